"""The server sheds abuse: connection cap, header/idle/write timeouts, quiet client errors.

Each test runs the real listener (``Listener``) on loopback with small limits and talks to it
with raw sockets, so nothing in a client library hides what the server does.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from export_helpers import FixedFeed, rich_snapshot

from vgpumon.errors import ConfigError
from vgpumon.export.address import ListenAddress
from vgpumon.export.app import Handler, Middleware, Request, Response, text
from vgpumon.export.connections import MAX_PIPELINED, ConnectionGuard, ServerLimits
from vgpumon.export.listener import Listener, refuse_duplicate_listen
from vgpumon.export.server import (
    Reloaded,
    apply_reload,
    build_app,
    process_families,
    startup_warnings,
)
from vgpumon.metrics.table import ExportOptions
from vgpumon.model import SamplerHealth, Snapshot

FAST = ServerLimits(
    max_connections=3,
    header_timeout_seconds=0.5,
    idle_timeout_seconds=0.7,
    write_timeout_seconds=0.5,
)
GET = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"


Source = FixedFeed


@asynccontextmanager
async def listening(
    limits: ServerLimits = FAST, source: Source | None = None, **app_kwargs: object
) -> AsyncIterator[tuple[int, ConnectionGuard]]:
    app = build_app(source or Source(rich_snapshot()), **app_kwargs)  # type: ignore[arg-type]
    guard = ConnectionGuard(limits)
    listener = Listener(app, guard)
    try:
        await listener.start([ListenAddress("127.0.0.1", 0)], None)
        yield listener.addresses[0][1], guard
    finally:
        await listener.close(1.0)


async def closed_by_server(reader: asyncio.StreamReader, within: float) -> bool:
    """True when the server closes the connection (EOF or reset) within ``within`` seconds."""
    try:
        while True:
            if not await asyncio.wait_for(reader.read(65536), within):
                return True
    except (ConnectionError, OSError):
        return True
    except asyncio.TimeoutError:
        return False


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.02)


async def request(port: int, raw: bytes = GET) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    writer.close()
    return head


async def test_a_connection_that_sends_nothing_is_closed() -> None:
    async with listening() as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_by_server(reader, 5)
        assert guard.header_timeouts == 1
        writer.close()


async def test_a_request_head_sent_too_slowly_is_closed() -> None:
    async with listening() as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert await closed_by_server(reader, 5)
        assert guard.header_timeouts == 1
        writer.close()


async def test_an_idle_kept_alive_connection_is_closed() -> None:
    async with listening() as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        await reader.readexactly(3)  # "OK\n"
        assert await closed_by_server(reader, 5), "idle past the keep-alive timeout"
        assert guard.header_timeouts == 0, "the head came in time"
        writer.close()


def holding(release: asyncio.Event) -> Middleware:
    """Middleware: a request for /hold is answered only once ``release`` is set (a busy slot)."""

    async def hold(request: Request, handler: Handler) -> Response:
        if request.path == "/hold":
            await release.wait()
            return text("held\n")
        return await handler(request)

    return hold


HOLD = b"GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"


async def test_connections_past_the_cap_are_refused_only_when_all_are_answering() -> None:
    release = asyncio.Event()
    async with listening(middlewares=[holding(release)]) as (port, guard):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        for _, w in held:
            w.write(HOLD)
        await asyncio.wait_for(
            until(lambda: guard.open == 3 and all(c.state == "busy" for c in guard.connections())),
            5,
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await closed_by_server(reader, 2)
        assert guard.refused == 1
        writer.close()
        release.set()
        for r, w in held:
            assert (await read_response(r))[1] == b"held\n"
            w.close()
        while guard.open:
            await asyncio.sleep(0.01)
        assert (await request(port)).startswith(b"HTTP/1.1 200")


async def test_at_the_cap_a_connection_that_sent_nothing_makes_room() -> None:
    async with listening() as (port, guard):
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(3)]
        await asyncio.wait_for(until(lambda: guard.open == 3), 5)
        assert (await request(port)).startswith(b"HTTP/1.1 200")
        assert guard.refused == 0 and guard.stats.evicted["head"] == 1
        assert await closed_by_server(held[0][0], 2), "the oldest one made room"
        for _, w in held:
            w.close()


async def test_a_client_that_stops_reading_is_dropped() -> None:
    source = Source(rich_snapshot())
    # A big body: many copies of the rich snapshot's GPUs (the socket buffers cannot take it all).
    big = dataclasses.replace(source.latest, gpus=source.latest.gpus * 400)  # type: ignore[union-attr]
    source.latest = big
    async with listening(source=source) as (port, guard):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.pause_reading()  # type: ignore[attr-defined]
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
        await asyncio.wait_for(until(lambda: guard.open == 0), 10)  # dropped: write timeout
        writer.close()


async def test_a_client_that_pipelines_small_requests_and_never_reads_is_dropped() -> None:
    """Answers to small requests must not pile up in the server for a client that never reads."""
    async with listening() as (port, guard):
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.pause_reading()  # type: ignore[attr-defined]
        writer.write(GET * 200_000)  # 7 MB of requests, about 20 MB of answers
        await asyncio.wait_for(until(lambda: guard.open == 0), 20)
        # Closed after its share of pipelined answers (issue 33), not after 20 MB of them.
        assert guard.stats.requests == {200: MAX_PIPELINED}
        writer.transport.abort()


async def test_malformed_requests_are_logged_at_debug_without_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with listening() as (port, _guard):
        for raw in (b"GARBAGE\r\n\r\n", b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"):
            assert (await request(port, raw)).split(b" ")[1] == b"400"
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == []
    assert all(r.exc_info is None for r in caplog.records), "no traceback"
    debug = [r for r in caplog.records if r.getMessage().startswith("bad request from 127.0.0.1")]
    assert len(debug) == 2 and all("\n" not in r.getMessage() for r in debug)


async def read_response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One response's head and body (Content-Length framed) from a raw connection."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    return head, await asyncio.wait_for(reader.readexactly(length), 5)


async def test_pipelined_requests_are_answered_in_order() -> None:
    async with listening() as (port, _guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET + b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
        bodies = [(await read_response(reader))[1] for _ in range(3)]
        assert bodies == [b"OK\n"] * 3
        writer.close()


async def test_head_gets_the_headers_and_no_body() -> None:
    async with listening() as (port, _guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n" + GET)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200") and b"Content-Length: " in head
        assert int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0]) > 1000
        # The next bytes are the next response, not a body.
        assert (await read_response(reader))[1] == b"OK\n"
        writer.close()


async def test_other_methods_and_unknown_paths() -> None:
    async with listening() as (port, _guard):
        post = b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        head = await request(port, post)
        assert head.startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in head
        assert (await request(port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")).startswith(
            b"HTTP/1.1 404"
        )


async def test_a_request_head_over_16_kib_is_refused_and_closed() -> None:
    async with listening() as (port, _guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 431") and b"Connection: close" in head
        assert await closed_by_server(reader, 5)
        writer.close()


async def test_a_second_request_head_sent_too_slowly_is_closed_before_the_idle_timeout() -> None:
    """On a kept-alive connection, a request's first byte starts the header timeout."""
    limits = dataclasses.replace(FAST, idle_timeout_seconds=30.0)
    async with listening(limits) as (port, guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(GET)
        await read_response(reader)
        writer.write(b"GET / HTTP/1.1\r\n")  # and then nothing
        assert await closed_by_server(reader, 5), "closed after the header timeout, not 30 s"
        assert guard.header_timeouts == 1
        writer.close()


async def test_negotiation_on_the_wire() -> None:
    async with listening() as (port, _guard):
        plain = await request(
            port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip;q=0\r\n\r\n"
        )
        assert b"Content-Encoding" not in plain
        odd = await request(
            port,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n"
            b"Accept: application/openmetrics-text; version=99.0.0\r\n\r\n",
        )
        assert b"99.0.0" not in odd and b"text/plain; version=0.0.4" in odd


async def test_process_metrics_are_served_in_both_formats() -> None:
    async with listening(extra=process_families()) as (port, _guard):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for accept, eof in ((b"text/plain", False), (b"application/openmetrics-text", True)):
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: " + accept + b"\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            body = (await reader.readexactly(length)).decode()
            assert "\nprocess_resident_memory_bytes " in body
            assert "\nvgpumon_up 1.0\n" in body
            assert body.count("# EOF") == (1 if eof else 0)
            assert body.endswith("# EOF\n") is eof
        writer.close()


async def test_not_ready_while_nvml_is_down_and_no_gpu_was_read() -> None:
    down = Snapshot(timestamp=1.0, health=SamplerHealth(up=False))
    async with listening(source=Source(down)) as (port, _guard):
        head = await request(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503")
    up = rich_snapshot()
    async with listening(source=Source(up)) as (port, _guard):
        head = await request(port, b"GET /-/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")


def test_the_same_listen_address_twice_is_named() -> None:
    address = ListenAddress("127.0.0.1", 9839)
    with pytest.raises(ConfigError, match=r"listen address 127\.0\.0\.1:9839 is given twice"):
        refuse_duplicate_listen([address, ListenAddress(None, 1), address])


def test_startup_warnings_for_auth_without_tls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    @dataclasses.dataclass
    class Config:
        users: dict[str, str]
        tls: object

    @dataclasses.dataclass
    class Runtime:
        config: Config

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert startup_warnings(None) == []
    assert startup_warnings(Runtime(Config({"alice": "x"}, tls=object()))) == []
    (clear,) = startup_warnings(Runtime(Config({"alice": "x"}, tls=None)))
    assert "basic auth is configured without TLS" in clear
    # Running as root is the command's warning (it knows whether device files are opened):
    # tests/commands/test_serve_conventions.py.
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert startup_warnings(None) == []


async def test_over_the_cap_a_tls_connection_gets_no_handshake() -> None:
    """No TLS state (and no handshake CPU) for a connection the cap refuses."""
    import ssl

    import trustme

    ca = trustme.CA()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_ctx)
    client_ctx = ssl.create_default_context()
    ca.configure_trust(client_ctx)
    release = asyncio.Event()
    app = build_app(Source(rich_snapshot()), middlewares=[holding(release)])
    guard = ConnectionGuard(dataclasses.replace(FAST, max_connections=1))
    listener = Listener(app, guard)
    try:
        await listener.start([ListenAddress("127.0.0.1", 0)], server_ctx)
        port = listener.addresses[0][1]
        _r, held = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        held.write(HOLD)
        await asyncio.wait_for(until(lambda: guard.connections()[0].state == "busy"), 5)
        with pytest.raises((ConnectionError, ssl.SSLError, OSError)):
            await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port, ssl=client_ctx), 5)
        assert guard.refused == 1 and guard.open == 1
        release.set()
        held.close()
    finally:
        await listener.close(1.0)


async def test_a_reload_changes_the_write_timeout_of_the_connections() -> None:
    """SIGHUP's write timeout reaches the connections (they read the guard's limits each time)."""
    app = build_app(Source(rich_snapshot()))
    guard = ConnectionGuard(FAST)
    options = ExportOptions()
    in_force = Reloaded(options, 40, FAST.write_timeout_seconds, "info")

    async def load() -> Reloaded:
        return Reloaded(options, 7, 12.5, "info")

    root = logging.getLogger()
    level = root.level
    try:
        applied = await apply_reload(in_force, load, app, guard, None)
    finally:
        root.setLevel(level)  # the reload sets the log level too
    assert guard.limits.write_timeout_seconds == 12.5
    assert guard.limits.max_connections == FAST.max_connections, "the rest as it was"
    assert app.limits.max_requests == 7 and applied.write_timeout_seconds == 12.5
