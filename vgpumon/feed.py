"""The one shape of a snapshot source that ``serve`` and ``top`` both drive: :class:`SnapshotFeed`.

A feed makes snapshots in its own loop (:meth:`SnapshotFeed.run`) and says when there is a new
one (:meth:`SnapshotFeed.on_snapshot`); a consumer reads the newest (:attr:`SnapshotFeed.latest`)
and never drives NVML, SSH or HTTP itself. A feed that reads over a network can fail to get a
snapshot at all; it is a :class:`FallibleFeed` and says so (:meth:`FallibleFeed.on_failure`),
keeping its last snapshot.

The feeds:

* the sampler, this host's GPUs (``vgpumon.collect.sampler``); NVML trouble is inside its
  snapshots (``health``), so it never fails to make one;
* one exporter over HTTP (``vgpumon.sources.remote.RemoteFeed``), a :class:`FallibleFeed`;
* one agentless host, its ``nvidia-smi`` over SSH (``vgpumon.sources.ssh.SshHostFeed``), a
  :class:`FallibleFeed`; and every agentless host as one feed whose snapshot is all of theirs
  (``vgpumon.sources.agentless.AgentlessFeed``), which ``serve --ssh.targets`` renders. The two that
  poll a peer share their loop and listeners (``vgpumon.sources.polled.PolledFeed``).

``serve`` renders one feed. ``top`` shows hosts: :class:`vgpumon.sources.feed_source.FeedSource`
turns any feed of :class:`~vgpumon.model.Snapshot` into one host of a
:class:`~vgpumon.sources.base.SnapshotSource` (its loop, refresh, connection state and one-line
error), and a fleet (``vgpumon.sources.fleet``) joins such hosts. No source runs a loop of its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar, runtime_checkable

log = logging.getLogger(__name__)

S = TypeVar("S", covariant=True)
N = TypeVar("N")


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


@runtime_checkable
class FallibleFeed(SnapshotFeed[S], Protocol[S]):
    """A feed whose attempt to get a snapshot can fail (a network between it and the GPUs).

    After a failure :attr:`latest` still holds the last snapshot (a screen shows it as stale) and
    :attr:`not_ready_reason` says why; the next snapshot (:meth:`on_snapshot`) ends the failure,
    even one with the same content as before.
    """

    def on_failure(self, listener: Callable[[str], object]) -> None:
        """Call ``listener`` on the event loop with a one-line reason when an attempt failed."""
        ...


def tell(listeners: Iterable[Callable[[N], object]], news: N) -> None:
    """Call every listener with ``news`` (a snapshot, a failure's reason); a listener that raises
    is logged and the others still hear it: a consumer's bug must not stop a feed."""
    for listener in listeners:
        try:
            listener(news)
        except Exception:
            log.exception("a listener of a snapshot feed failed")
