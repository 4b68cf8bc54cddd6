"""The HTTP side of ``vgpumon serve``: its endpoints and its lifecycle.

The endpoints (``/metrics``, ``/api/v1/snapshot``, ``/-/healthy``, ``/-/ready``, ``/``) are
docs/exporter.md's. What must stay true (docs/design.md, rule 1): no handler calls NVML, and a
scrape gets its bodies from the :class:`~vgpumon.export.publisher.Publisher`; requests for the
metrics or the snapshot beyond ``max_requests`` in flight get a 503 at once instead of queueing
(the health and readiness probes are never refused for load). :func:`serve` owns the start
and the stop of the feed's loop, the listener, the publisher and the web config.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import html
import logging
import signal
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpumon import __version__
from vgpumon.errors import ConfigError
from vgpumon.export.address import DEFAULT_TELEMETRY_PATH
from vgpumon.export.app import (
    App,
    Handler,
    Middleware,
    Request,
    Response,
    html_page,
    json_response,
    text,
)
from vgpumon.export.connections import ConnectionGuard, ServerLimits
from vgpumon.export.gc_settings import settle_after_startup
from vgpumon.export.housekeeping import Housekeeping
from vgpumon.export.limits import DEFAULT_BCRYPT_MAX_COST
from vgpumon.export.listener import ListenAt, Listener
from vgpumon.export.negotiation import choose, gzip_wanted
from vgpumon.export.publisher import Publisher, no_extra
from vgpumon.export.serverstats import joined, server_families
from vgpumon.feed import SnapshotFeed
from vgpumon.metrics.hosts import Exported
from vgpumon.metrics.table import FAMILIES, ExportOptions, Family
from vgpumon.model import to_json

log = logging.getLogger(__name__)

ENDPOINTS = (
    ("/metrics", "Prometheus metrics (text 0.0.4 or OpenMetrics by Accept header)"),
    ("/api/v1/snapshot", "the latest snapshot as JSON"),
    ("/-/healthy", "200 while the process serves"),
    ("/-/ready", "200 once the first sampling cycle is done and the sampler is not wedged"),
)


# What the server reads: the sampler (one host) or the agentless hosts' feed (several).
Feed = SnapshotFeed[Exported]


@dataclass
class JsonCache:
    """``/api/v1/snapshot`` bodies: built once per snapshot in a worker thread, shared by all.

    The snapshot is referenced weakly (a replaced snapshot is not kept alive by this cache), which
    also makes the identity check safe: a dead reference never matches a new snapshot that
    happens to sit at the freed one's address. When the snapshot dies (the sampler has moved two
    cycles on), its body goes with it: nobody can be served it any more, and on a large host it
    is a megabyte held until the next API call, which may be minutes away or never.
    """

    snapshot: weakref.ReferenceType[Exported] | None = None
    task: asyncio.Task[bytes] | None = field(default=None, repr=False)

    async def body(self, snapshot: Exported) -> bytes:
        cached = self.snapshot() if self.snapshot is not None else None
        task = self.task
        if cached is not snapshot or task is None:
            self.snapshot = weakref.ref(snapshot, self._forget)
            task = self.task = asyncio.ensure_future(asyncio.to_thread(_json_bytes, snapshot))
        # shield: a client that disconnects must not cancel the build the others wait for.
        return await asyncio.shield(task)

    def _forget(self, dead: weakref.ReferenceType[Exported]) -> None:
        # Runs where the last reference to the snapshot went (any thread): only a plain store.
        if self.snapshot is dead:
            self.task = None


def _json_bytes(snapshot: Exported) -> bytes:
    return to_json(snapshot).encode()


@dataclass
class Limits:
    """The app's part of what a config reload may change while serving (the write timeout is
    the connections', :class:`ConnectionGuard`'s)."""

    max_requests: int = 40


@dataclass
class ExporterApp(App):
    """The exporter's app, with what a config reload changes while it serves."""

    publisher: Publisher = field(kw_only=True)
    limits: Limits = field(default_factory=Limits)


def in_flight_limit(limits: Limits, paths: frozenset[str]) -> Middleware:
    """503 at once when ``limits.max_requests`` requests for the data ``paths`` are already being
    handled (no queue to hide in). Only the data endpoints, as node_exporter limits only its
    metrics handler: the health and readiness probes, cheap by design, answer whatever the load
    (a kubelet that gets 503 from a liveness probe restarts a working exporter)."""
    in_flight = 0

    async def limit(request: Request, handler: Handler) -> Response:
        nonlocal in_flight
        if request.path not in paths:
            return await handler(request)
        cap = limits.max_requests
        if in_flight >= cap:
            return text(f"too many requests in flight (limit {cap})\n", 503, {"Retry-After": "1"})
        in_flight += 1
        try:
            return await handler(request)
        finally:
            in_flight -= 1

    return limit


def process_families() -> Callable[[], tuple[str, str]]:
    """The ``process_*`` self metrics (CPU, memory, fds, start time) in both formats.

    Read once per render, so the values are as old as the snapshot they are served with (one
    sampling interval at most). See :mod:`vgpumon.metrics.process` for why not prometheus-client's
    ``ProcessCollector``.
    """
    from vgpumon.metrics.process import ProcessFamilies

    return ProcessFamilies()


def not_ready_reason(feed: Feed) -> str | None:
    """Why ``/-/ready`` says no, or None when it says yes."""
    snapshot = feed.latest
    if snapshot is None:
        return "first sampling cycle not done"
    said = feed.not_ready_reason  # the feed's own words (wedged, NVML not up and why)
    if said is not None:
        return said
    if not snapshot.health.up and not snapshot.gpus:
        return "NVML is not up and no GPU has been read (vgpumon_up 0)"
    return None


def build_app(
    source: Feed,
    *,
    families: tuple[Family, ...] = FAMILIES,
    options: ExportOptions | None = None,
    max_requests: int = 40,
    middlewares: Sequence[Middleware] = (),
    web_config: Any = None,
    extra: Callable[[], tuple[str, str]] | None = None,
    render_ahead: bool = False,
    telemetry_path: str = DEFAULT_TELEMETRY_PATH,
) -> ExporterApp:
    """The exporter's app.

    ``web_config`` (a :class:`vgpumon.export.webconfig_runtime.WebConfigRuntime`) installs TLS
    client checks, basic auth and headers outermost, so an unauthenticated request reaches nothing
    else;
    ``middlewares`` run inside the in-flight limit. ``extra`` adds families from outside the
    metric table to every render (``serve`` passes :func:`process_families`). ``render_ahead``
    renders every snapshot before a scrape asks, however cheap (otherwise only slow renders are).
    ``telemetry_path`` is where the metrics are served (``--web.telemetry-path``).
    ``families`` is the table the exposition walks (the agentless hosts' feed needs
    :data:`vgpumon.metrics.hosts.HOST_FAMILIES`).
    """
    endpoints = ((telemetry_path, ENDPOINTS[0][1]), *ENDPOINTS[1:])
    limits = Limits(max_requests)
    # The feed says when it has a new snapshot (snapshot_arrived) and scrapes ask: those are the
    # only times the publisher looks, so between them it costs the event loop nothing.
    publisher = Publisher(
        lambda: source.latest,
        options,
        families=families,
        extra=extra or no_extra,
        poll_seconds=None,
    )
    if render_ahead:
        publisher.render_ahead_seconds = 0.0
    source.on_snapshot(publisher.snapshot_arrived)
    json_cache = JsonCache()

    async def metrics(request: Request) -> Response:
        snapshot = source.latest
        if snapshot is None:
            return text("no sample yet: the first cycle is running\n", 503)
        bodies = await publisher.bodies_for(snapshot)
        if bodies is None:
            return text("no exposition rendered yet\n", 503)
        choice = choose(request.headers.get("accept"))
        gz = gzip_wanted(request.headers.get("accept-encoding"))
        if gz:
            publisher.want_gzip(choice.openmetrics)
        headers = {"Content-Type": choice.content_type, "Vary": "Accept, Accept-Encoding"}
        if gz:
            headers["Content-Encoding"] = "gzip"
        return Response(200, await bodies.body(choice.openmetrics, gz), headers)

    async def snapshot_json(request: Request) -> Response:
        snapshot = source.latest
        if snapshot is None:
            return json_response({"error": "no sample yet"}, status=503)
        body = await json_cache.body(snapshot)
        return Response(200, (body,), {"Content-Type": "application/json; charset=utf-8"})

    async def healthy(request: Request) -> Response:
        return text("OK\n")

    async def ready(request: Request) -> Response:
        why = not_ready_reason(source)
        if why is None:
            return text("OK\n")
        return text(f"not ready: {why}\n", 503)

    async def landing(request: Request) -> Response:
        snapshot = source.latest
        where = html.escape(snapshot.source) if snapshot is not None else "(no sample yet)"
        items = "\n".join(
            f'<li><a href="{path}">{path}</a>: {html.escape(text)}</li>' for path, text in endpoints
        )
        page = (
            '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>vgpumon exporter</title>'
            "</head>\n<body><h1>vgpumon exporter</h1>\n"
            f"<p>Version {html.escape(__version__)}, reading {where}.</p>\n<ul>\n{items}\n</ul>\n"
            "</body></html>\n"
        )
        return html_page(page)

    data_paths = frozenset((telemetry_path, "/api/v1/snapshot"))
    app = ExporterApp(
        middlewares=[in_flight_limit(limits, data_paths), *middlewares],
        publisher=publisher,
        limits=limits,
    )
    app.add_get("/", landing)
    app.add_get(telemetry_path, metrics)
    app.add_get("/api/v1/snapshot", snapshot_json)
    app.add_get("/-/healthy", healthy)
    app.add_get("/-/ready", ready)
    if web_config is not None:
        web_config.setup(app)
    return app


def _web_config(path: str | None, bcrypt_max_cost: int) -> Any:
    """The runtime of a Prometheus web-config file (TLS, basic auth), or None without one."""
    if path is None:
        return None
    from vgpumon.export.webconfig_runtime import WebConfigRuntime

    return WebConfigRuntime(path, bcrypt_max_cost=bcrypt_max_cost)


def startup_warnings(web_config: Any) -> list[str]:
    """Setups that work but expose more than an operator likely means to (running as root is
    the command's to say: only it knows whether device files are opened)."""
    warnings = []
    if web_config is not None and web_config.config.users and web_config.config.tls is None:
        warnings.append(
            "basic auth is configured without TLS: passwords cross the network in clear text "
            "(add tls_server_config to the web config)"
        )
    return warnings


@dataclass(frozen=True)
class Reloaded:
    """What a config reload (SIGHUP) gives the server: the settings it can apply while serving,
    and, by name, those that take a restart (compared with the ones in force to warn about)."""

    options: ExportOptions
    max_requests: int
    write_timeout_seconds: float
    log_level: str
    restart_only: tuple[tuple[str, object], ...] = ()


Reload = Callable[[], Awaitable[Reloaded]]


async def apply_reload(
    in_force: Reloaded, load: Reload, app: ExporterApp, guard: ConnectionGuard, web_config: Any
) -> Reloaded:
    """SIGHUP: re-read the config file and the web config; a bad file keeps the old settings.

    Export options, the request cap, the write timeout and the log level change at once; settings
    that need a new listener or sampler are named in a warning (they apply after a restart).
    """
    try:
        new = await load()
    except ConfigError as err:
        log.warning("reload: %s; keeping the previous configuration", err)
        return in_force
    app.publisher.set_options(new.options)
    app.limits.max_requests = new.max_requests
    # Connections read their limits on every use: a new write timeout applies at once.
    timeout = new.write_timeout_seconds
    guard.limits = dataclasses.replace(guard.limits, write_timeout_seconds=timeout)
    logging.getLogger().setLevel(new.log_level.upper())
    old_values = dict(in_force.restart_only)
    changed = [name for name, value in new.restart_only if old_values.get(name) != value]
    if changed:
        log.warning("reload: %s changed; that takes a restart", ", ".join(changed))
    if web_config is not None:
        await asyncio.to_thread(web_config.check_for_changes, force=True)
    log.info("configuration reloaded")
    # What needs a restart stays as it is in force, so the next reload compares against that.
    return dataclasses.replace(new, restart_only=in_force.restart_only)


async def serve(
    feed: Feed,
    *,
    families: tuple[Family, ...] = FAMILIES,
    listen: Sequence[ListenAt],
    options: ExportOptions,
    max_requests: int,
    web_config_file: str | None,
    shutdown_timeout_seconds: float,
    bcrypt_max_cost: int = DEFAULT_BCRYPT_MAX_COST,
    render_ahead: bool = False,
    telemetry_path: str = DEFAULT_TELEMETRY_PATH,
    limits: ServerLimits | None = None,
    reload: Reload | None = None,
    in_force: Reloaded | None = None,
) -> int:
    """Serve until SIGTERM/SIGINT, then shut down within ``shutdown_timeout_seconds``.

    Takes plain values, not the command's settings object, so the HTTP side depends on neither
    the config files' shape nor the sampler's package. SIGHUP calls ``reload`` (which reads the
    files off the event loop) and applies what it returns (:func:`apply_reload`), comparing with
    ``in_force``.

    ``feed`` is the sampler or the agentless hosts' feed (:class:`vgpumon.feed.SnapshotFeed`);
    ``serve`` runs it (:meth:`~vgpumon.feed.SnapshotFeed.run`) and renders its snapshots with
    ``families``. The caller owns ``feed`` and closes it afterwards (``Sampler.close`` is
    bounded). ``serve`` owns the start and the stop of everything else: the listener, the
    publisher, the web config's worker threads.

    Shutdown: stop accepting, let in-flight requests finish, let a running sampling cycle end
    (it is itself bounded by the cycle deadline), then close. A worker thread stuck inside an NVML
    call is never interrupted: it is a daemon and ends with the process.
    """
    limits = limits or ServerLimits()
    web_config = _web_config(web_config_file, bcrypt_max_cost)
    for warning in startup_warnings(web_config):
        log.warning("%s", warning)
    ssl_context = web_config.ssl_context() if web_config is not None else None
    guard = ConnectionGuard(limits)
    app = build_app(
        feed,
        families=families,
        options=options,
        max_requests=max_requests,
        web_config=web_config,
        extra=joined(process_families(), server_families(guard, web_config)),
        render_ahead=render_ahead,
        telemetry_path=telemetry_path,
    )
    publisher = app.publisher
    bound = shutdown_timeout_seconds
    listener = Listener(app, guard)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    reloads: set[asyncio.Task[None]] = set()
    current = in_force or Reloaded(options, max_requests, limits.write_timeout_seconds, "info")

    async def reload_now() -> None:
        nonlocal current
        if reload is not None:
            current = await apply_reload(current, reload, app, guard, web_config)

    def on_hup() -> None:
        if reloads:  # one at a time; a second SIGHUP while one runs is folded into it
            return
        task = loop.create_task(reload_now(), name="vgpumon-reload")
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, on_hup)
    sampling: asyncio.Task[None] | None = None
    try:
        urls = await listener.start(listen, ssl_context)
        publisher.kick()  # render the first snapshot as soon as there is one
        sampling = asyncio.create_task(feed.run(stop), name="vgpumon-sampler")
        frozen = settle_after_startup()
        log.debug("%d start-up objects moved out of the collector's full passes", frozen)
        # Now (what start-up freed: argument parsing, a scenario's YAML), then once a minute,
        # right after a publish: collect, then return free heap pages to the system.
        housekeeping = Housekeeping()
        housekeeping.run()
        publisher.after_publish.append(housekeeping.after_publish)
        log.info("vgpumon %s serving %s on %s", __version__, feed.name, ", ".join(urls))
        await stop.wait()
        log.info("shutting down (at most %.1f s)", bound)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)
        for task in list(reloads):
            task.cancel()
        deadline = time.monotonic() + bound
        if web_config is not None:
            # First: a request waiting on a bcrypt check (cost 14 is a second, more is more)
            # gets its 503 now instead of holding the shutdown up to its bound.
            web_config.close()
        await listener.close(bound)
        await publisher.close()
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
