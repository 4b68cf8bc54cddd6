"""The one shape of a snapshot source that ``serve`` and ``top`` both drive: :class:`SnapshotFeed`.

A feed makes snapshots in its own loop (:meth:`SnapshotFeed.run`) and says when there is a new
one (:meth:`SnapshotFeed.on_snapshot`); a consumer reads the newest (:attr:`SnapshotFeed.latest`)
and never drives NVML, SSH or HTTP itself. The sampler is the feed of this host's GPUs
(``vgpumon.collect.sampler``); the agentless SSH hosts are one feed whose snapshot is every
host's (``vgpumon.sources.agentless``). ``top``'s sources wrap a feed to publish host updates
(``vgpumon.sources.local``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol, TypeVar

S = TypeVar("S", covariant=True)


class SnapshotFeed(Protocol[S]):
    """Snapshots of type ``S``, made in :meth:`run` until ``stop`` is set."""

    @property
    def name(self) -> str:
        """What the feed reads, for logs and titles."""
        ...

    @property
    def latest(self) -> S | None:
        """The newest snapshot; None before the first."""
        ...

    @property
    def not_ready_reason(self) -> str | None:
        """Why the feed is not ready to be served (``/-/ready``), in words; None when it is."""
        ...

    def on_snapshot(self, listener: Callable[[S], object]) -> None:
        """Call ``listener`` on the event loop with each new snapshot (quick, never blocking)."""
        ...

    def refresh(self) -> None:
        """Make the next snapshot now instead of at the next interval."""
        ...

    async def run(self, stop: asyncio.Event) -> None:
        """Make snapshots until ``stop`` is set."""
        ...
