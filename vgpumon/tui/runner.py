"""Runs ``top``'s feed on its own thread and event loop, so the UI's loop never runs its work.

A feed does I/O and CPU work on whatever loop it lives on: HTTP polling and parsing a large
snapshot's JSON (hundreds of milliseconds for a host with hundreds of vGPUs), SSH sessions, the
sampler's hand-over of its snapshots. On the UI's loop each of those would be a frozen screen.
Here the feed runs (:meth:`~vgpumon.feed.SnapshotFeed.run`) on a background thread, exactly as
``serve`` runs its feed; its news reaches the UI's loop with ``call_soon_threadsafe``, at most one
hand-over pending at a time (news that comes while one is pending replaces it: the UI only ever
needs the newest :class:`~vgpumon.feed.Fleet`), and the UI asks for a refresh or a stop the same
way in the other direction. The UI never waits on the feed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from vgpumon.feed import Fleet, SnapshotFeed

log = logging.getLogger(__name__)
START_SECONDS = 5.0


class FeedThread:
    """``feed`` run on a thread of its own; ``deliver`` runs on ``ui_loop`` with its news."""

    def __init__(
        self,
        feed: SnapshotFeed[Fleet],
        deliver: Callable[[Fleet], None],
        ui_loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.feed = feed
        self._deliver = deliver
        self._ui_loop = ui_loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._pending: Fleet | None = None  # news not yet handed over
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="vgpumon-feed", daemon=True)
        feed.on_snapshot(self._hand_over)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(START_SECONDS)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # a crashed feed thread is logged; the UI shows the hosts as they were
            log.exception("the feed stopped")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        stop = self._stop = asyncio.Event()
        if self._stopping:
            stop.set()
        self._ready.set()
        await self.feed.run(stop)

    def _hand_over(self, news: Fleet) -> None:
        """On the feed's loop: keep the newest news and make sure one hand-over is on its way."""
        with self._lock:
            scheduled = self._pending is not None
            self._pending = news
        if not scheduled:
            with contextlib.suppress(RuntimeError):  # the UI's loop is closed: shutting down
                self._ui_loop.call_soon_threadsafe(self._take)

    def _take(self) -> None:
        """On the UI's loop: the newest news since the last hand-over."""
        with self._lock:
            news, self._pending = self._pending, None
        if news is not None:
            self._deliver(news)

    def _call(self, what: Callable[[], object]) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the feed's loop already ended
                loop.call_soon_threadsafe(what)

    def refresh(self) -> None:
        """Ask the feed for a new reading; returns at once."""
        self._call(self.feed.refresh)

    def call(self, what: Callable[[], object]) -> None:
        """Run ``what`` on the feed's loop (tell it what is shown); returns at once."""
        self._call(what)

    def stop(self) -> None:
        """Ask the feed to stop (its run frees what it holds); returns at once."""
        self._stopping = True
        stop = self._stop
        if stop is not None:
            self._call(stop.set)

    def join(self, seconds: float) -> bool:
        """Wait at most ``seconds`` for the feed to stop; True when it has."""
        self._thread.join(seconds)
        return not self._thread.is_alive()
