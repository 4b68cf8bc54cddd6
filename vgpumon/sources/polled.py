"""What every feed that polls a peer shares (:class:`PolledFeed`): the exporter over HTTP
(:mod:`vgpumon.sources.remote`) and each agentless host over SSH (:mod:`vgpumon.sources.ssh`).

A polled feed is a :class:`~vgpumon.feed.FallibleFeed`: it keeps the newest snapshot while the
peer does not answer, says why in :attr:`PolledFeed.not_ready_reason`, and tells its listeners of
each snapshot and failure its subclass calls news. The loop is here, once: poll, wait for the
next poll (or a :meth:`PolledFeed.refresh`, or the stop), again. A poll that raises something
unforeseen is logged and told as a failure, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from vgpumon.feed import tell
from vgpumon.model import Snapshot

log = logging.getLogger(__name__)


class PolledFeed:
    """A feed that asks a peer for a snapshot every :attr:`interval_seconds`.

    Subclasses implement :meth:`poll` (calling :meth:`_tell_snapshot` and :meth:`_tell_failure`
    for what they count as news) and may change :meth:`next_delay` (a backoff while failing).
    """

    def __init__(self, interval_seconds: float, not_ready: str) -> None:
        self.interval_seconds = interval_seconds
        self._wake = asyncio.Event()  # refresh() and the stop cut a wait short
        self._latest: Snapshot | None = None
        self._error: str | None = not_ready  # why not ready; None after a snapshot
        self._snapshot_listeners: list[Callable[[Snapshot], object]] = []
        self._failure_listeners: list[Callable[[str], object]] = []

    @property
    def name(self) -> str:
        raise NotImplementedError

    @property
    def latest(self) -> Snapshot | None:
        """The newest snapshot received, kept while the peer does not answer."""
        return self._latest

    @property
    def not_ready_reason(self) -> str | None:
        return self._error

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self._snapshot_listeners.append(listener)

    def on_failure(self, listener: Callable[[str], object]) -> None:
        self._failure_listeners.append(listener)

    def refresh(self) -> None:
        self._wake.set()

    async def poll(self) -> Snapshot | None:
        """Ask the peer once; the snapshot, or None when the poll failed."""
        raise NotImplementedError

    def next_delay(self, elapsed: float = 0.0) -> float:
        """Seconds from now to the next poll, ``elapsed`` after the last one began: the interval
        counts from each poll's start."""
        return max(0.0, self.interval_seconds - elapsed)

    def _tell_snapshot(self, snapshot: Snapshot) -> None:
        self._latest = snapshot
        self._error = None
        tell(self._snapshot_listeners, snapshot)

    def _tell_failure(self, reason: str) -> None:
        self._error = reason
        tell(self._failure_listeners, reason)

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; a poll in flight then completes (bounded by its peer's
        time limit)."""
        loop = asyncio.get_running_loop()

        async def relay_stop() -> None:
            await stop.wait()
            self._wake.set()

        relay = loop.create_task(relay_stop())
        try:
            while not stop.is_set():
                started = loop.time()
                self._wake.clear()  # a refresh during the poll asks for another one at once
                try:
                    await self.poll()
                except Exception as exc:  # a bug in one poll must not end the loop silently
                    log.exception("%s: poll failed", self.name)
                    self._tell_failure(f"internal error: {type(exc).__name__}")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(
                        self._wake.wait(), timeout=self.next_delay(loop.time() - started)
                    )
        finally:
            relay.cancel()
