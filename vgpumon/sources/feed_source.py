"""Any snapshot feed as one host of a :class:`SnapshotSource`: :class:`FeedSource`.

The feed (:class:`vgpumon.feed.SnapshotFeed`) makes snapshots in its own loop: the sampler, an
exporter over HTTP, an agentless host over SSH. This wrapper runs that loop in a background task
and turns what the feed says into the host's updates:

* a new snapshot is one update, ``up``, unless ``judge`` finds the snapshot itself says the host
  is down (then ``unreachable`` with the judge's reason, the snapshot shown);
* a failed attempt of a :class:`~vgpumon.feed.FallibleFeed` is one update, ``unreachable`` with
  the feed's one-line reason, the last snapshot kept (shown as stale);
* ``refresh`` asks the feed for a snapshot now; ``close`` stops the loop, marks the host
  ``closed`` and ends every update stream.

What counts as new, and when to retry, is the feed's business (an exporter polled twice within
one of its cycles has nothing new; a dead one is retried with backoff), so every host of ``top``
is this one code path over a different feed, and no source keeps a loop of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from vgpumon.feed import FallibleFeed, SnapshotFeed
from vgpumon.model import Snapshot
from vgpumon.sources.base import HostState, HostUpdate, UpdateHub

log = logging.getLogger(__name__)

# Why a snapshot shows its host as down although it arrived (None: it is up).
Judge = Callable[[Snapshot], str | None]


def nvml_down(snapshot: Snapshot) -> str | None:
    """A sampler's snapshot whose NVML is not up and that read no GPU shows its host down (this
    host's sampler and a remote exporter's alike)."""
    return None if snapshot.health.up or snapshot.gpus else "NVML is not initialised"


class FeedSource:
    """The host ``host`` whose snapshots come from ``feed``."""

    def __init__(
        self,
        feed: SnapshotFeed[Snapshot],
        host: str,
        *,
        name: str | None = None,
        judge: Judge | None = None,
    ) -> None:
        self.feed = feed
        self.host = host
        self._name = name
        self._judge = judge
        self._hub = UpdateHub([host])
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        feed.on_snapshot(self._arrived)
        if isinstance(feed, FallibleFeed):
            feed.on_failure(self._failed)

    @property
    def name(self) -> str:
        return self._name if self._name is not None else self.feed.name

    def hosts(self) -> Sequence[str]:
        return self._hub.hosts()

    def latest(self) -> Mapping[str, HostUpdate]:
        return self._hub.latest()

    def updates(self) -> AsyncIterator[HostUpdate]:
        return self._hub.updates()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(
                self.feed.run(self._stop), name=f"vgpumon-source-{self.host}"
            )

    async def refresh(self) -> None:
        self.feed.refresh()

    def _arrived(self, snapshot: Snapshot) -> HostUpdate:
        reason = self._judge(snapshot) if self._judge is not None else None
        state = HostState.UP if reason is None else HostState.UNREACHABLE
        return self._hub.publish(self.host, state, snapshot=snapshot, error=reason)

    def _failed(self, reason: str) -> HostUpdate:
        return self._hub.publish(self.host, HostState.UNREACHABLE, error=reason)

    async def close(self) -> None:
        """Stop the feed's loop (an attempt in flight is cancelled), mark the host closed, end the
        update streams, then free what the feed holds (:meth:`close_feed`)."""
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                try:
                    await self._task
                except Exception:  # the loop's own bug: logged, and the source still closes
                    log.exception("the feed of %s failed", self.host)
            self._task = None
        self._hub.close()
        await self.close_feed()

    async def close_feed(self) -> None:
        """Free the feed's resources (threads, connections); a feed that holds none has nothing
        to free. Sources over such feeds override this."""
