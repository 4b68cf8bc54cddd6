"""Exporters as the hosts of ``top`` (RemoteFeed in a fleet) against real exporters on loopback:
up, down and back, TLS, auth, timeouts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from http_helpers import loopback_get

from vgpumon.errors import ConfigError
from vgpumon.feed import Fleet, HostState, HostUpdate, SnapshotFeed
from vgpumon.model import SCHEMA_VERSION
from vgpumon.sources import remote
from vgpumon.sources.fleet import FleetFeed
from vgpumon.sources.remote import (
    Connection,
    ExporterClient,
    NotReady,
    RemoteFeed,
    RemoteTarget,
    remote_fleet,
)

UP = HostState.UP
UNREACHABLE = HostState.UNREACHABLE


def is_up(update: HostUpdate) -> bool:
    return update.state is UP


def unreachable(update: HostUpdate) -> bool:
    return update.state is UNREACHABLE


@asynccontextmanager
async def polling(
    url: str, connection: Connection | None = None, **kwargs: Any
) -> AsyncIterator[FleetFeed]:
    """``top --url URL``'s feed, running: the exporter as the one host of a fleet."""
    connection = connection or Connection()
    fleet = remote_fleet([RemoteTarget(url)], connection, interval_seconds=0.05, **kwargs)
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    try:
        yield fleet
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)


@asynccontextmanager
async def answering(body: str, status: int = 200) -> AsyncIterator[str]:
    """A server whose /api/v1/snapshot always answers ``body``."""

    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body, content_type="application/json")

    async with loopback_get("/api/v1/snapshot", handler) as url:
        yield url


# ------------------------------------------------------------------------------- targets


def test_a_target_takes_a_base_url_or_an_endpoint_and_keys_by_host_and_port():
    for url in (
        "http://gpu1:9400",
        "http://gpu1:9400/",
        " http://gpu1:9400/metrics ",
        "http://gpu1:9400/api/v1/snapshot/",
    ):
        target = RemoteTarget(url)
        assert target.base_url == "http://gpu1:9400"
        assert target.host == "gpu1:9400"
    assert RemoteTarget("https://gpu1").host == "gpu1:443"
    assert RemoteTarget("http://[::1]:9400/metrics").host == "[::1]:9400"
    assert RemoteTarget("http://gpu1:9400", name="rack-3").host == "rack-3"
    behind_proxy = RemoteTarget("https://proxy/gpu1/metrics")
    assert behind_proxy.endpoint("/api/v1/snapshot") == "https://proxy/gpu1/api/v1/snapshot"


def test_credentials_in_the_url_are_used_but_never_shown():
    target = RemoteTarget("http://me:pw@gpu1:9400/metrics")
    assert target.url_credentials == ("me", "pw")
    assert target.base_url == "http://gpu1:9400"
    assert "pw" not in RemoteFeed(target).name
    assert "pw" not in remote_fleet([target]).name


@pytest.mark.parametrize("url", ["gpu1:9400", "ftp://gpu1:9400", "http://:9400", "http://"])
def test_a_bad_url_is_one_config_error(url: str):
    with pytest.raises(ConfigError, match="bad exporter URL") as err:
        RemoteTarget(url)
    assert "\n" not in str(err.value)


def test_connection_settings_are_checked_up_front(tmp_path: Path):
    target = RemoteTarget("http://gpu1:9400")
    with pytest.raises(ConfigError, match=r"cannot use CA file .*missing\.pem"):
        ExporterClient(target, Connection(ca_file=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match="password was given without a user"):
        ExporterClient(target, Connection(password="x"))
    with pytest.raises(ConfigError, match="timeout must be positive"):
        ExporterClient(target, Connection(timeout_seconds=0))


def test_backoff_doubles_from_the_interval_up_to_the_cap_with_jitter():
    feed = RemoteFeed(
        RemoteTarget("http://gpu1:9400"),
        interval_seconds=1.0,
        backoff_cap_seconds=10.0,
        rng=random.Random(7),
    )
    assert feed.next_delay() == 1.0
    ceilings = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    for failures, ceiling in enumerate(ceilings, start=1):
        feed._failures = failures
        delays = {feed.next_delay() for _ in range(50)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays), (failures, delays)
        assert len(delays) > 1  # jittered: clients that lost one exporter spread out


# ----------------------------------------------------------------------- a live exporter


async def test_a_live_exporter_is_up_and_publishes_only_new_snapshots(exporter, wait_until):
    typed: SnapshotFeed[Fleet] = remote_fleet([RemoteTarget(exporter.url)])
    assert typed.latest is not None
    host = f"127.0.0.1:{exporter.port}"
    seen: list[HostUpdate] = []
    async with polling(exporter.url) as source:
        assert source.latest.names == (host,)
        source.on_snapshot(lambda fleet: seen.append(fleet.hosts[0]))
        first = await wait_until(source, host, is_up)
        assert first.snapshot is not None and first.snapshot.gpus
        assert first.snapshot.source == "sim:passthrough-guest"
        assert first.error is None and not first.stale
        await wait_until(source, host, lambda u: u.sequence >= first.sequence + 3)
    states = [u.state for u in seen]
    assert states[-1] is HostState.CLOSED
    up = [u for u in seen if u.state is UP]
    stamps = [u.snapshot.timestamp for u in up if u.snapshot is not None]
    # Polls come every 50 ms and the exporter samples every 100 ms: many polls found nothing
    # new, and none of those was published.
    assert len(stamps) == len(set(stamps)) >= 3
    assert [u.sequence for u in seen] == sorted(u.sequence for u in seen)


async def test_a_stopped_exporter_is_unreachable_with_the_reason_then_back_up(exporter, wait_until):
    host = f"127.0.0.1:{exporter.port}"
    async with polling(exporter.url, backoff_cap_seconds=0.2) as source:
        before = await wait_until(source, host, is_up)
        await exporter.stop()
        down = await wait_until(source, host, unreachable)
        assert down.error == "connection refused"
        assert down.stale and down.snapshot is not None  # the last known state is kept
        assert down.snapshot.timestamp >= before.snapshot.timestamp  # type: ignore[union-attr]
        await exporter.start()  # the same port again
        source.refresh()
        back = await wait_until(source, host, is_up)
        assert back.error is None and not back.stale
        assert back.snapshot is not None and back.snapshot.timestamp > down.snapshot.timestamp


async def test_refresh_polls_at_once_even_with_a_long_interval(exporter, wait_until):
    host = f"127.0.0.1:{exporter.port}"
    source = remote_fleet([RemoteTarget(exporter.url)], interval_seconds=3600)
    stop = asyncio.Event()
    running = asyncio.create_task(source.run(stop))
    try:
        first = await wait_until(source, host, is_up)
        assert first.snapshot is not None
        await exporter.sampled_after(first.snapshot.timestamp)
        source.refresh()
        await wait_until(source, host, lambda u: u.sequence > first.sequence)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)


# --------------------------------------------------------------------------- TLS and auth


async def test_tls_with_the_ca_file(exporter_factory, web_config, tls_files, wait_until):
    exporter = await exporter_factory(web_config=web_config(tls=True, auth=False)).start()
    assert exporter.url.startswith("https://")
    host = f"127.0.0.1:{exporter.port}"
    async with polling(exporter.url, Connection(ca_file=str(tls_files / "ca.pem"))) as source:
        update = await wait_until(source, host, is_up)
        assert update.snapshot is not None and update.snapshot.gpus
    async with polling(exporter.url) as source:  # system trust only: refused
        down = await wait_until(source, host, unreachable)
        assert down.error is not None
        assert down.error.startswith("TLS error: certificate not trusted"), down.error
    async with polling(exporter.url, Connection(insecure=True)) as source:
        await wait_until(source, host, is_up)
    plain = "http://" + exporter.url.split("://", 1)[1]
    async with polling(plain) as source:  # plain HTTP to the TLS port
        down = await wait_until(source, host, unreachable)
        assert down.error is not None and "\n" not in down.error


async def test_basic_auth_good_bad_and_missing(
    exporter_factory, web_config, credentials, wait_until
):
    user, password = credentials
    exporter = await exporter_factory(web_config=web_config(tls=False, auth=True)).start()
    host = f"127.0.0.1:{exporter.port}"
    async with polling(exporter.url, Connection(username=user, password=password)) as source:
        await wait_until(source, host, is_up)
    async with polling(exporter.url, Connection(username=user, password="wrong")) as source:
        down = await wait_until(source, host, unreachable)
        assert down.error == "HTTP 401: the exporter refused the credentials"
    async with polling(exporter.url) as source:
        down = await wait_until(source, host, unreachable)
        assert down.error == "HTTP 401: the exporter wants credentials"
    with_url_creds = f"http://{user}:{password}@127.0.0.1:{exporter.port}"
    async with polling(with_url_creds) as source:
        await wait_until(source, host, is_up)


async def test_tls_and_auth_together(exporter_factory, web_config, tls_files, credentials):
    user, password = credentials
    exporter = await exporter_factory(web_config=web_config(tls=True, auth=True)).start()
    client = ExporterClient(
        RemoteTarget(exporter.url),
        Connection(ca_file=str(tls_files / "ca.pem"), username=user, password=password),
    )
    try:
        for _ in range(200):  # the first cycle may still be running (503)
            try:
                snapshot = await client.snapshot()
                break
            except NotReady:
                await asyncio.sleep(0.05)
        assert snapshot.gpus
    finally:
        await client.close()


# ----------------------------------------------------------------- silent or wrong servers


async def test_a_server_that_never_answers_times_out(silent_url, wait_until):
    host = silent_url.split("://", 1)[1]
    async with polling(silent_url, Connection(timeout_seconds=0.3)) as source:
        down = await wait_until(source, host, unreachable)
        assert down.error == "no answer within 0.3 s (timeout)"
        assert down.snapshot is None and not down.stale


@pytest.mark.parametrize(
    ("body", "status", "reason"),
    [
        ("{not json", 200, "bad JSON: "),
        ('{"schema_version": 999, "timestamp": 1}', 200, "schema mismatch: snapshot schema"),
        (f'{{"schema_version": {SCHEMA_VERSION}, "timestamp": "x"}}', 200, "schema mismatch: "),
        ("[]", 200, "schema mismatch: "),
        ('{"error": "no sample yet"}', 503, "HTTP 503: the exporter has no sample yet"),
        ("nope", 404, "HTTP 404"),
    ],
)
async def test_a_wrong_answer_is_unreachable_with_one_line(
    body: str, status: int, reason: str, wait_until: Callable[..., Any]
):
    async with answering(body, status) as url, polling(url) as source:
        host = url.split("://", 1)[1]
        down = await wait_until(source, host, unreachable)
        assert down.error is not None and down.error.startswith(reason), down.error
        assert "\n" not in down.error


async def test_an_answer_too_large_is_refused(monkeypatch, wait_until):
    monkeypatch.setattr(remote, "MAX_BODY_BYTES", 1000)
    async with answering("x" * 5000) as url, polling(url) as source:
        down = await wait_until(source, url.split("://", 1)[1], unreachable)
        assert down.error is not None and down.error.startswith("the answer is larger than")
