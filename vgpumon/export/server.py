"""The HTTP side of ``vgpumon serve``: aiohttp app and its lifecycle.

Endpoints:

* ``/metrics``: the latest snapshot as Prometheus text 0.0.4 or OpenMetrics, chosen from the Accept
  header exactly as prometheus-client's ``choose_encoder`` does, gzip when the client accepts it;
* ``/api/v1/snapshot``: the latest snapshot as JSON (``vgpumon.model.to_json``; the path carries
  the API version and the body its ``schema_version``);
* ``/-/healthy`` (the process serves) and ``/-/ready`` (first cycle done and sampler not wedged);
* ``/``: a landing page listing the above.

docs/design.md, rule 1: no handler calls NVML. Handlers read ``source.latest``, an immutable
snapshot the sampler swaps in, and the bytes rendered from it are cached per snapshot, format and
encoding, so fifty scrapers arriving together cost one render (done in a worker thread). Requests
beyond ``max_requests`` in flight (those waiting for a render included) get a 503 at once instead of
queueing behind the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import html
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from prometheus_client.exposition import choose_encoder, gzip_accepted

from vgpumon import __version__
from vgpumon.config.serve import ListenAddress
from vgpumon.errors import ConfigError
from vgpumon.export.exposition import Encoder, registry_for
from vgpumon.export.metrics import ExportOptions
from vgpumon.model import Snapshot, to_json

log = logging.getLogger(__name__)

ENDPOINTS = (
    ("/metrics", "Prometheus metrics (text 0.0.4 or OpenMetrics by Accept header)"),
    ("/api/v1/snapshot", "the latest snapshot as JSON"),
    ("/-/healthy", "200 while the process serves"),
    ("/-/ready", "200 once the first sampling cycle is done and the sampler is not wedged"),
)


class SnapshotSource(Protocol):
    """What the server needs from the sampler (and what tests can fake)."""

    @property
    def latest(self) -> Snapshot | None: ...

    @property
    def ready(self) -> bool: ...


@dataclass
class RenderCache:
    """Bodies rendered from one snapshot, keyed by content type and encoding.

    Each body is built once, in a worker thread (a large host's render takes tens of milliseconds,
    which must not stall other requests on the event loop); scrapers that arrive meanwhile await
    the same task. Holding the snapshot object itself (not an id) makes the identity check safe: a
    new snapshot can never be mistaken for a freed one that had the same address.
    """

    options: ExportOptions
    snapshot: Snapshot | None = None
    entries: dict[tuple[str, bool], asyncio.Task[bytes]] = field(default_factory=dict)
    renders: int = 0  # how many times the table was walked (for tests and the benchmark)

    def _entries(self, snapshot: Snapshot) -> dict[tuple[str, bool], asyncio.Task[bytes]]:
        # Handlers call this with ``source.latest`` before their first await, so a snapshot that
        # differs from the cached one is always the newer one.
        if snapshot is not self.snapshot:
            self.snapshot = snapshot
            self.entries = {}
        return self.entries

    @staticmethod
    async def _shared(
        entries: dict[tuple[str, bool], asyncio.Task[bytes]],
        key: tuple[str, bool],
        build: Callable[[], Awaitable[bytes]],
    ) -> bytes:
        task = entries.get(key)
        if task is None:
            task = asyncio.ensure_future(build())
            entries[key] = task

            def forget_failure(done: asyncio.Task[bytes]) -> None:
                if (done.cancelled() or done.exception() is not None) and entries.get(key) is done:
                    del entries[key]

            task.add_done_callback(forget_failure)
        # shield: a scraper that disconnects must not cancel the render the others wait for.
        return await asyncio.shield(task)

    async def metrics(
        self, snapshot: Snapshot, content_type: str, encoder: Encoder, gz: bool
    ) -> bytes:
        entries = self._entries(snapshot)

        async def plain() -> bytes:
            self.renders += 1
            return await asyncio.to_thread(encoder, registry_for(snapshot, self.options))

        async def zipped() -> bytes:
            body = await self._shared(entries, (content_type, False), plain)
            return await asyncio.to_thread(gzip.compress, body, 6)

        return await self._shared(entries, (content_type, gz), zipped if gz else plain)

    async def json(self, snapshot: Snapshot) -> bytes:
        async def build() -> bytes:
            return (await asyncio.to_thread(to_json, snapshot)).encode()

        return await self._shared(self._entries(snapshot), ("application/json", False), build)


RENDER_CACHE = web.AppKey("render_cache", RenderCache)


def in_flight_limit(max_requests: int) -> Middleware:
    """503 at once when ``max_requests`` are already being handled (no queue to hide behind)."""
    in_flight = 0

    @web.middleware
    async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal in_flight
        if in_flight >= max_requests:
            return web.Response(
                status=503,
                text=f"too many requests in flight (limit {max_requests})\n",
                headers={"Retry-After": "1"},
            )
        in_flight += 1
        try:
            return await handler(request)
        finally:
            in_flight -= 1

    return limit


def build_app(
    source: SnapshotSource,
    *,
    options: ExportOptions | None = None,
    max_requests: int = 40,
    middlewares: Sequence[Middleware] = (),
    web_config: Any = None,
) -> web.Application:
    """The exporter's aiohttp app.

    ``web_config`` (a :class:`vgpumon.export.webconfig.WebConfigRuntime`) installs TLS client
    checks, basic auth and headers outermost, so an unauthenticated request reaches nothing else;
    ``middlewares`` run inside the in-flight limit.
    """
    cache = RenderCache(options or ExportOptions())

    async def metrics(request: web.Request) -> web.Response:
        snapshot = source.latest
        if snapshot is None:
            return web.Response(status=503, text="no sample yet: the first cycle is running\n")
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        gz = gzip_accepted(request.headers.get("Accept-Encoding", ""))
        body = await cache.metrics(snapshot, content_type, encoder, gz)
        headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
        if gz:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def snapshot_json(request: web.Request) -> web.Response:
        snapshot = source.latest
        if snapshot is None:
            return web.json_response({"error": "no sample yet"}, status=503)
        return web.Response(body=await cache.json(snapshot), content_type="application/json")

    async def healthy(request: web.Request) -> web.Response:
        return web.Response(text="OK\n")

    async def ready(request: web.Request) -> web.Response:
        if source.ready:
            return web.Response(text="OK\n")
        snapshot = source.latest
        why = "first sampling cycle not done" if snapshot is None else "sampler wedged"
        return web.Response(status=503, text=f"not ready: {why}\n")

    async def landing(request: web.Request) -> web.Response:
        snapshot = source.latest
        where = html.escape(snapshot.source) if snapshot is not None else "(no sample yet)"
        items = "\n".join(
            f'<li><a href="{path}">{path}</a>: {html.escape(text)}</li>' for path, text in ENDPOINTS
        )
        page = (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>vgpumon exporter</title>'
            "</head>\n<body><h1>vgpumon exporter</h1>\n"
            f"<p>Version {html.escape(__version__)}, reading {where}.</p>\n<ul>\n{items}\n</ul>\n"
            "</body></html>\n"
        )
        return web.Response(text=page, content_type="text/html")

    app = web.Application(middlewares=[in_flight_limit(max_requests), *middlewares])
    app.router.add_get("/", landing)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/snapshot", snapshot_json)
    app.router.add_get("/-/healthy", healthy)
    app.router.add_get("/-/ready", ready)
    app[RENDER_CACHE] = cache
    if web_config is not None:
        web_config.setup(app)
    return app


def _web_config(path: str | None) -> Any:
    """The runtime of a Prometheus web-config file (TLS, basic auth), or None without one."""
    if path is None:
        return None
    from vgpumon.export.webconfig import WebConfigRuntime

    return WebConfigRuntime(path)


async def start_sites(
    runner: web.AppRunner, listen: Sequence[ListenAddress], ssl_context: Any
) -> list[str]:
    """Bind every address or fail with one line naming the one that could not be bound.

    Returns the URLs actually bound (``:PORT`` becomes one per address family, port 0 the port the
    kernel chose).
    """
    for address in listen:
        site = web.TCPSite(runner, address.host, address.port, ssl_context=ssl_context)
        try:
            await site.start()
        except OSError as err:
            raise ConfigError(f"cannot listen on {address}: {err.strerror or err}") from None
    scheme = "https" if ssl_context is not None else "http"
    return [f"{scheme}://{ListenAddress(a[0], a[1])}" for a in runner.addresses]


async def serve(
    sampler: Any,
    *,
    listen: Sequence[ListenAddress],
    options: ExportOptions,
    max_requests: int,
    web_config_file: str | None,
    shutdown_timeout_seconds: float,
) -> int:
    """Serve until SIGTERM/SIGINT, then shut down within ``shutdown_timeout_seconds``.

    Takes plain values, not the command's settings object, so the HTTP side depends on neither
    the config files' shape nor the sampler's package.

    The caller owns ``sampler`` and closes it afterwards (``Sampler.close`` is bounded).

    Shutdown: stop accepting, let in-flight requests finish, let a running sampling cycle end
    (it is itself bounded by the cycle deadline), then close. A worker thread stuck inside an NVML
    call is never interrupted: it is a daemon and ends with the process.
    """
    web_config = _web_config(web_config_file)
    ssl_context = web_config.ssl_context() if web_config is not None else None
    app = build_app(
        sampler,
        options=options,
        max_requests=max_requests,
        web_config=web_config,
    )
    bound = shutdown_timeout_seconds
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=bound)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sampling: asyncio.Task[None] | None = None
    try:
        urls = await start_sites(runner, listen, ssl_context)
        sampling = asyncio.create_task(sampler.run(stop), name="vgpumon-sampler")
        log.info(
            "vgpumon %s serving %s on %s", __version__, sampler.session.source, ", ".join(urls)
        )
        await stop.wait()
        log.info("shutting down (at most %.1f s)", bound)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        deadline = time.monotonic() + bound
        await runner.cleanup()
        if sampling is not None:
            stop.set()
            remaining = max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(asyncio.shield(sampling), timeout=remaining)
            except asyncio.TimeoutError:
                log.warning("a sampling cycle was still running at the shutdown bound")
                sampling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampling
    return 0
