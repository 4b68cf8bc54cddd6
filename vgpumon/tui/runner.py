"""Runs a snapshot source on its own thread and event loop, so the UI's loop never runs its work.

A source does I/O and CPU work on whatever loop it lives on: HTTP polling and parsing a large
snapshot's JSON (hundreds of milliseconds for a host with hundreds of vGPUs), the sampler's
scheduling. On the UI's loop each of those would be a frozen screen. Here the source lives on a
background thread; each update it publishes is handed to the UI's loop with
``call_soon_threadsafe``, and the UI asks for a refresh or a close the same way in the other
direction. The UI never waits on the source: closing waits a bounded time, then leaves the
daemon thread behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from vgpumon.sources.base import HostUpdate, SnapshotSource

log = logging.getLogger(__name__)
CLOSE_SECONDS = 5.0


class SourceThread:
    """``source`` started on a thread of its own; ``deliver`` runs on ``ui_loop`` per update."""

    def __init__(
        self,
        source: SnapshotSource,
        deliver: Callable[[HostUpdate], None],
        ui_loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.source = source
        self._deliver = deliver
        self._ui_loop = ui_loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._closed: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="vgpumon-source", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(CLOSE_SECONDS)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except Exception:  # a crashed source thread is logged; the UI shows the hosts as stale
            log.exception("snapshot source stopped")

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        updates = self.source.updates()  # subscribed before start: nothing is missed
        self._ready.set()
        for update in self.source.latest().values():
            self._hand_over(update)
        closed = self._closed = asyncio.Event()
        await self.source.start()
        async for update in updates:
            self._hand_over(update)
        await closed.wait()  # the stream ends inside close(): let close() finish first

    def _hand_over(self, update: HostUpdate) -> None:
        with contextlib.suppress(RuntimeError):  # the UI's loop is closed: we are shutting down
            self._ui_loop.call_soon_threadsafe(self._deliver, update)

    def _call(self, make: Callable[[], object]) -> asyncio.Future[object] | None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return None

        async def run() -> object:
            return await make()  # type: ignore[misc]

        try:
            return asyncio.wrap_future(asyncio.run_coroutine_threadsafe(run(), loop))
        except RuntimeError:
            return None

    async def refresh(self) -> None:
        """Ask the source for a new reading; returns without waiting for it."""
        self._call(self.source.refresh)

    async def close(self) -> None:
        """Close the source on its loop, waiting at most :data:`CLOSE_SECONDS`."""

        async def close_then_stop() -> None:
            try:
                await self.source.close()
            finally:
                if self._closed is not None:
                    self._closed.set()

        future = self._call(close_then_stop)
        if future is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(future, CLOSE_SECONDS)
