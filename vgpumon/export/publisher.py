"""Render each snapshot a scrape will read once, and hand scrapes the finished bodies.

:class:`Publisher` renders a snapshot in every form (text, OpenMetrics, the gzip forms scrapers
ask for) and swaps the set in whole as :attr:`Publisher.current`; a scrape gets its bodies from
:meth:`Publisher.bodies_for`. When a snapshot is rendered is docs/exporter.md, "Rendering": ahead
of scrapes only while a render is slow *and* scrapes come at least as often as snapshots (then
every snapshot will be read, and no scrape waits for a render); otherwise by the first scrape
that asks, so a snapshot nobody scrapes is never rendered. What must stay true:

* a render runs on the event loop in slices (:data:`SLICE_SECONDS`), so a scrape waits at most
  one slice behind it; gzip of a large body runs in a worker thread (zlib releases the GIL);
* concurrent scrapes of one snapshot share one render and one compression;
* one set of bodies is alive, and the snapshot is referenced weakly: a replaced snapshot is not
  kept alive by the exposition;
* a render that fails is logged and not retried in a loop; the previous bodies stay served.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

from vgpumon.metrics.exposition import Body, Exposition, Renderer
from vgpumon.metrics.hosts import Exported
from vgpumon.metrics.table import FAMILIES, ExportOptions, Family

log = logging.getLogger(__name__)

GZIP_LEVEL = 6  # prometheus-client's level
GZIP_WBITS = 16 + 15  # zlib: a gzip header and trailer (mtime 0) around a 32 KiB-window deflate
SLICE_SECONDS = 0.001  # the longest a render step keeps the event loop
POLL_SECONDS = 0.05  # how often the publisher looks for a new snapshot of a source that never says
WANTED_SECONDS = 600.0  # a gzip form is kept compressed this long after a scrape asked for it
# Bodies this large are compressed ahead in a thread; smaller ones on first ask, on the loop
# (small enough that a scrape waiting behind the compression hardly notices).
EAGER_GZIP_BYTES = 64 * 1024
# A render that took at least this long may make the next snapshots render ahead of scrapes (when
# scrapes come often enough to read them); a quicker one waits for the first scrape that asks,
# which then pays at most this in latency: well inside the scrape latency target.
RENDER_AHEAD_SECONDS = 0.002
# Reads this many times as far apart as snapshots still count as reading every snapshot.
READ_OFTEN_SLACK = 1.5


@dataclass(frozen=True)
class Bodies:
    """Every form of one snapshot's exposition."""

    snapshot: weakref.ReferenceType[Exported]
    options: ExportOptions
    exposition: Exposition  # both plain forms, sharing their sample lines
    text_gzip: bytes | None  # None: not compressed ahead (small, or nobody asked lately)
    openmetrics_gzip: bytes | None
    # gzip forms compressed when first asked (by format): bytes, or the compression under way,
    # which every scrape asking meanwhile waits for instead of compressing its own copy
    _on_ask: dict[bool, bytes | asyncio.Future[bytes]] = field(
        default_factory=dict, compare=False, repr=False
    )
    order: int = 0  # renders are numbered as they start: an older one never replaces a newer one

    @property
    def text(self) -> bytes:
        """The text form in one piece (a copy: the server sends the parts)."""
        return self.exposition.text

    @property
    def openmetrics(self) -> bytes:
        """The OpenMetrics form in one piece (a copy: the server sends the parts)."""
        return self.exposition.openmetrics

    async def body(self, openmetrics: bool, gz: bool) -> Body:
        """The body in the asked form; a gzip form not compressed in advance is compressed now."""
        if openmetrics:
            plain, packed = self.exposition.openmetrics_parts, self.openmetrics_gzip
        else:
            plain, packed = self.exposition.text_parts, self.text_gzip
        if not gz:
            return plain
        if packed is None:
            packed = await self._gzip_on_ask(openmetrics, plain)
        return (packed,)

    async def _gzip_on_ask(self, openmetrics: bool, plain: Body) -> bytes:
        """The gzip form nobody asked for before this snapshot: compressed once, then kept.

        A small body is compressed at once on the event loop; a large one in a worker thread,
        shared by every scrape that asks while it runs (shielded: a scrape that goes away does
        not cancel it for the others).
        """
        known = self._on_ask.get(openmetrics)
        if isinstance(known, bytes):
            return known
        if known is None:
            if body_size(plain) < EAGER_GZIP_BYTES:
                packed = gzip_parts(plain)
                self._on_ask[openmetrics] = packed
                return packed
            known = asyncio.ensure_future(asyncio.to_thread(gzip_parts, plain))
            self._on_ask[openmetrics] = known
        packed = await asyncio.shield(known)
        self._on_ask[openmetrics] = packed
        return packed

    def of(self, snapshot: Exported) -> bool:
        """True when these bodies were rendered from ``snapshot`` (the very object)."""
        return self.snapshot() is snapshot


Latest = Callable[[], Exported | None]
Extra = Callable[[], tuple[str, str]]


def no_extra() -> tuple[str, str]:
    return "", ""


class Publisher:
    """Watches ``latest()`` and keeps :attr:`current` rendered from the newest snapshot.

    ``poll_seconds`` None: ``latest`` is only looked at when woken (:meth:`kick`,
    :meth:`snapshot_arrived`, a scrape), so an idle exporter's publisher costs no wake-up at all.

    ``extra()`` gives text appended to both formats of every render (the ``process_*`` families,
    text and OpenMetrics forms), read when the render starts.
    """

    def __init__(
        self,
        latest: Latest,
        options: ExportOptions | None = None,
        *,
        families: tuple[Family, ...] = FAMILIES,
        extra: Extra = no_extra,
        poll_seconds: float | None = POLL_SECONDS,
    ) -> None:
        self._latest = latest
        self._families = families
        self._renderer = Renderer(options, families)
        self._extra = extra
        self._poll = poll_seconds
        self._wake = asyncio.Event()
        self._published = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.current: Bodies | None = None
        self._failed: weakref.ReferenceType[Exported] | None = None  # its render raised
        self.renders = 0  # completed renders (for tests and the benchmark)
        self._gzip_wanted: dict[bool, float] = {}  # openmetrics? -> loop time of the last ask
        # Called on the event loop right after each new bodies are made current (the memory
        # housekeeping, vgpumon.export.housekeeping): the time furthest from the next render.
        self.after_publish: list[Callable[[], object]] = []
        self.render_ahead_seconds = RENDER_AHEAD_SECONDS
        self.last_render_seconds: float | None = None  # event-loop time of the last render
        self._started = 0  # renders started (Bodies.order)
        self._asked: tuple[weakref.ReferenceType[Exported], asyncio.Task[None]] | None = None
        # When scrapes asked and snapshots arrived (loop time), and the gaps before the last of
        # each: rendering ahead pays only where every snapshot is read.
        self._last_ask: float | None = None  # when a snapshot was first asked for
        self._read_snapshot: weakref.ReferenceType[Exported] | None = None
        self._ask_gap: float | None = None
        self._last_arrival: float | None = None
        self._arrival_gap: float | None = None

    @property
    def renders_ahead(self) -> bool:
        """True when new snapshots are rendered before a scrape asks: always when so configured
        (``render_ahead_seconds`` 0), the first one (which measures the cost), and otherwise
        while the last render was slow and scrapes come at least as often as snapshots."""
        spent = self.last_render_seconds
        if spent is None or self.render_ahead_seconds <= 0.0:
            return True
        return spent >= self.render_ahead_seconds and self._read_often()

    def _note_read(self, snapshot: Exported) -> None:
        """A scrape asked for ``snapshot``: the first ask of each snapshot is one read (a burst of
        scrapers reads one snapshot once)."""
        now = asyncio.get_running_loop().time()
        read = self._read_snapshot
        if read is not None and read() is snapshot:
            return
        self._read_snapshot = weakref.ref(snapshot)
        if self._last_ask is not None:
            self._ask_gap = now - self._last_ask
        self._last_ask = now

    def _read_often(self) -> bool:
        """Scrapes come at least once per snapshot, and came lately: each snapshot will be read."""
        last, asks, arrivals = self._last_ask, self._ask_gap, self._arrival_gap
        if last is None or asks is None or arrivals is None:
            return False
        now = asyncio.get_running_loop().time()
        # Some slack for jitter: a scraper as fast as the sampler reads at about its pace.
        return asks <= READ_OFTEN_SLACK * arrivals and now - last <= 2 * arrivals

    @property
    def options(self) -> ExportOptions:
        return self._renderer.options

    def set_options(self, options: ExportOptions) -> None:
        """Use new export options from the next render on (config reload)."""
        if options != self._renderer.options:
            # The current bodies keep being served until the new options' render is done.
            self._renderer = Renderer(options, self._families)
            self._failed = None
            self.kick()

    def want_gzip(self, openmetrics: bool) -> None:
        """A scraper asked for this format gzipped: compress it in the coming renders."""
        self._gzip_wanted[openmetrics] = asyncio.get_running_loop().time()

    def _gzip_forms(self) -> tuple[bool, bool]:
        """(text, OpenMetrics): whether each was asked for gzipped within WANTED_SECONDS."""
        now = asyncio.get_running_loop().time()

        def recent(openmetrics: bool) -> bool:
            asked = self._gzip_wanted.get(openmetrics)
            return asked is not None and now - asked <= WANTED_SECONDS

        return recent(False), recent(True)

    def kick(self) -> None:
        """Look for a new snapshot now rather than at the next poll."""
        self._wake.set()
        self._ensure_running()

    def snapshot_arrived(self, snapshot: Exported) -> None:
        """The feed's news of a new snapshot (its ``on_snapshot`` listener): rendered now when
        renders go ahead of scrapes; otherwise nothing wakes until a scrape asks for it."""
        now = asyncio.get_running_loop().time()
        if self._last_arrival is not None:
            self._arrival_gap = now - self._last_arrival
        self._last_arrival = now
        if self._ahead():
            self.kick()

    async def bodies_for(self, snapshot: Exported) -> Bodies | None:
        """The bodies a scrape of ``snapshot`` (the feed's latest) is answered with; None when no
        render has succeeded yet.

        Its own when they are rendered; rendered ahead, the last complete bodies at once (the new
        ones are on their way); rendered on ask, ``snapshot``'s, rendered now by the first scrape
        that asks (the others wait for that one render); before the first render, that render.
        """
        self._note_read(snapshot)
        current = self.current
        if current is None:
            return await self._first_render()
        if current.of(snapshot):
            return current
        return await self._for_scrape(snapshot)

    async def _first_render(self) -> Bodies | None:
        """The current bodies; before the first render is done, wait for it."""
        self._ensure_running()
        if self.current is None and self._latest() is not None:
            self.kick()
            await self._published.wait()
        return self.current

    async def _for_scrape(self, snapshot: Exported) -> Bodies | None:
        """The bodies a scrape of ``snapshot`` (the source's latest) gets.

        Rendered ahead: the current bodies at once (the new ones are on their way). Rendered on
        ask: ``snapshot``'s own, rendered now by the first scrape that asks; scrapes arriving
        during that render wait for the same one. A scrape that goes away meanwhile does not
        cancel the render the others wait for.
        """
        current = self.current
        if current is None:
            return await self._first_render()
        if not self._due(snapshot):
            return current
        if self._ahead():
            self.kick()
            return current
        asked = self._asked
        if asked is None or asked[0]() is not snapshot or asked[1].done():
            task = asyncio.get_running_loop().create_task(
                self._publish_logged(snapshot), name="vgpumon-render-on-ask"
            )
            self._asked = asked = (weakref.ref(snapshot), task)
        await asyncio.shield(asked[1])
        return self.current

    async def until_published(self, snapshot: Exported) -> None:
        """Return once ``snapshot`` (or a newer one) is what scrapes get, or its render failed.

        For harnesses that drive the sampler by hand on a simulated clock: in their time the
        render takes no time, so a scrape right after a cycle must see that cycle.
        """
        while True:
            current = self.current
            if current is not None and current.of(snapshot):
                return
            if self._failed is not None and self._failed() is snapshot:
                return
            if self._latest() is not snapshot:  # superseded before it was rendered
                return
            if not self._ahead():
                await self._for_scrape(snapshot)  # rendered on ask: ask
                continue
            self.kick()
            await asyncio.sleep(0.001)

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="vgpumon-publisher"
            )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _due(self, snapshot: Exported) -> bool:
        """A snapshot not rendered yet, and not one whose render already failed."""
        current = self.current
        if current is not None and current.of(snapshot) and current.options == self.options:
            return False
        return self._failed is None or self._failed() is not snapshot

    def _ahead(self) -> bool:
        """Render the latest snapshot now, without waiting for a scrape to ask."""
        current = self.current
        return current is None or current.options != self.options or self.renders_ahead

    async def _publish_logged(self, snapshot: Exported) -> None:
        try:
            await self.publish(snapshot)
        except Exception:  # one bad render must not stop every later one
            log.exception("rendering the exposition failed; serving the previous one")
            self._failed = weakref.ref(snapshot)  # not retried: the next one is
            self._published.set()  # waiters for a first render get an answer

    async def _run(self) -> None:
        while True:
            snapshot = self._latest()
            if snapshot is not None and self._due(snapshot) and self._ahead():
                await self._publish_logged(snapshot)
                continue  # a newer snapshot may have arrived meanwhile
            self._wake.clear()
            if self._poll is None:  # a feed that says when it has news: no timer at all
                await self._wake.wait()
                continue
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self._poll)

    async def publish(self, snapshot: Exported) -> Bodies:
        """Render ``snapshot`` in every form and make it :attr:`current`."""
        renderer = self._renderer
        self._started += 1
        order = self._started
        began = time.perf_counter()
        extra_text, extra_om = self._extra()
        exposition = None
        spent = 0.0  # on the event loop, without the other work done between slices
        for exposition in renderer.steps(snapshot, SLICE_SECONDS, (extra_text, extra_om)):
            if exposition is None:
                spent += time.perf_counter() - began
                await asyncio.sleep(0)
                began = time.perf_counter()
        spent += time.perf_counter() - began
        if exposition is None:  # cannot happen: steps() always ends with the exposition
            raise RuntimeError("renderer ended without an exposition")
        self.last_render_seconds = spent
        want_text, want_om = self._gzip_forms()
        want_text = want_text and body_size(exposition.text_parts) >= EAGER_GZIP_BYTES
        want_om = want_om and body_size(exposition.openmetrics_parts) >= EAGER_GZIP_BYTES
        text_gz = om_gz = None
        if want_text or want_om:  # no tasks at all for the usual case of no gzip wanted
            text_gz, om_gz = await asyncio.gather(
                _compress(exposition.text_parts, want_text),
                _compress(exposition.openmetrics_parts, want_om),
            )
        bodies = Bodies(
            weakref.ref(snapshot), renderer.options, exposition, text_gz, om_gz, order=order
        )
        current = self.current
        newest = current is None or current.order < order or current.options != renderer.options
        if renderer is self._renderer and newest:  # options unchanged while rendering
            self.current = bodies
            self.renders += 1
            self._published.set()
            for listener in self.after_publish:
                try:
                    listener()
                except Exception:  # housekeeping must never stop publishing
                    log.exception("an after-publish task failed")
        return bodies


async def _compress(body: Body, wanted: bool) -> bytes | None:
    """gzip of ``body`` in a worker thread, or None when no scraper wants it compressed."""
    if not wanted:
        return None
    return await asyncio.to_thread(gzip_parts, body)


def body_size(body: Body) -> int:
    return sum(len(part) for part in body)


def gzip_parts(body: Body) -> bytes:
    """One gzip member of the parts in order (mtime 0), without joining them first."""
    packer = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, GZIP_WBITS)
    out = [packer.compress(part) for part in body]
    out.append(packer.flush())
    return b"".join(out)
