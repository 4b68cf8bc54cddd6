"""Fixtures for the sources tests: real exporters on loopback, started in this process.

An :class:`Exporter` is what ``vgpumon serve --sim SCENARIO`` runs (a sampler over the simulator,
the exporter's app, optionally a web-config file for TLS and basic auth), on 127.0.0.1.
It can be stopped and started again on the same port, so a client sees a host go away and come
back. :func:`silent_server` accepts connections and never answers: the hung exporter.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import trustme

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.export.address import ListenAddress
from vgpumon.export.listener import Listener
from vgpumon.export.server import build_app
from vgpumon.export.webconfig_runtime import WebConfigRuntime
from vgpumon.feed import Fleet, HostUpdate, SnapshotFeed
from vgpumon.nvml.loader import open_session

PASSWORD = "s3cret-scraper"
USER = "prometheus"


class Exporter:
    """``vgpumon serve --sim`` in this process: start, stop, start again on the same port."""

    def __init__(
        self, scenario: str = "passthrough-guest", *, web_config: str | None = None
    ) -> None:
        self.scenario = scenario
        self.web_config = web_config
        self.port = 0
        self._listener: Listener | None = None
        self._sampler: Sampler | None = None
        self._stop = asyncio.Event()
        self._sampling: asyncio.Task[None] | None = None

    @property
    def tls(self) -> bool:
        return (
            self.web_config is not None and "tls_server_config" in Path(self.web_config).read_text()
        )

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    async def start(self) -> Exporter:
        self._sampler = Sampler(
            open_session(sim=self.scenario), SamplerConfig(interval_seconds=0.1)
        )
        runtime = WebConfigRuntime(self.web_config) if self.web_config else None
        app = build_app(self._sampler, web_config=runtime)
        self._listener = Listener(app)
        ssl_context = runtime.ssl_context() if runtime is not None else None
        await self._listener.start([ListenAddress("127.0.0.1", self.port)], ssl_context)
        self.port = self._listener.addresses[0][1]
        self._stop = asyncio.Event()
        self._sampling = asyncio.create_task(self._sampler.run(self._stop))
        return self

    async def sampled_after(self, timestamp: float, seconds: float = 30.0) -> None:
        """Return once the exporter holds a snapshot newer than ``timestamp``."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + seconds
        while True:
            latest = self._sampler.latest if self._sampler is not None else None
            if latest is not None and latest.timestamp > timestamp:
                return
            if loop.time() > give_up:
                pytest.fail(f"the exporter sampled nothing after {timestamp} in {seconds} s")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._listener is not None:
            await self._listener.close(0.5)
            self._listener = None
        self._stop.set()
        if self._sampling is not None:
            await self._sampling
            self._sampling = None
        if self._sampler is not None:
            await asyncio.to_thread(self._sampler.close)
            self._sampler = None


@pytest.fixture
async def exporter_factory() -> AsyncIterator[Callable[..., Exporter]]:
    """Make exporters that are stopped at the end of the test (started by the test)."""
    made: list[Exporter] = []

    def make(scenario: str = "passthrough-guest", *, web_config: str | None = None) -> Exporter:
        exporter = Exporter(scenario, web_config=web_config)
        made.append(exporter)
        return exporter

    yield make
    for exporter in made:
        await exporter.stop()


@pytest.fixture
async def exporter(exporter_factory: Callable[..., Exporter]) -> Exporter:
    """One running plain-HTTP exporter over the ``passthrough-guest`` scenario."""
    return await exporter_factory().start()


@pytest.fixture
async def silent_url() -> AsyncIterator[str]:
    """The http:// URL of a TCP server that accepts connections and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
def tls_files(tmp_path: Path, ca: trustme.CA) -> Path:
    """server.crt/key signed by ``ca`` for 127.0.0.1 and ca.pem, in ``tmp_path``."""
    cert = ca.issue_cert("127.0.0.1", "localhost")
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    return tmp_path


@pytest.fixture
def credentials() -> tuple[str, str]:
    """The user and password that :func:`web_config` files accept."""
    return USER, PASSWORD


@pytest.fixture
def web_config(tls_files: Path) -> Callable[..., str]:
    """Write a web-config file with TLS (``tls_files``' certificate) and/or basic auth."""
    return lambda *, tls, auth: write_web_config(tls_files, tls=tls, auth=auth)


def write_web_config(directory: Path, *, tls: bool, auth: bool) -> str:
    text = ""
    if tls:
        text += (
            "tls_server_config:\n"
            f"  cert_file: {directory / 'server.crt'}\n"
            f"  key_file: {directory / 'server.key'}\n"
        )
    if auth:
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
        text += f"basic_auth_users:\n  {USER}: '{hashed}'\n"
    path = directory / "web.yml"
    path.write_text(text)
    return str(path)


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """:func:`until`, for tests to await."""
    return until


def host_of(feed: SnapshotFeed[Fleet], host: str) -> HostUpdate:
    """The host's newest state in the feed's newest Fleet."""
    fleet = feed.latest
    assert fleet is not None
    return next(u for u in fleet.hosts if u.host == host)


async def until(
    feed: SnapshotFeed[Fleet],
    host: str,
    check: Callable[[HostUpdate], bool],
    *,
    seconds: float = 30.0,
) -> HostUpdate:
    """The host's newest update once ``check`` holds for it; fails the test after ``seconds``
    (a generous bound against a loaded machine, not a timing assertion)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds
    while True:
        update = host_of(feed, host)
        if check(update):
            return update
        if loop.time() > give_up:
            pytest.fail(f"{host} never reached the expected state; last: {update}")
        await asyncio.sleep(0.02)
