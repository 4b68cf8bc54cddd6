"""Agentless hosts as the snapshot feed ``vgpumon serve --ssh.targets`` renders.

:class:`AgentlessFeed` is the hosts' fleet (:class:`~vgpumon.sources.ssh.SshFleet`, the feed
``top --ssh.targets`` shows) with each of its :class:`~vgpumon.feed.Fleet` news turned into a
:class:`~vgpumon.metrics.hosts.HostsView`, the snapshot the exporter renders with the per-host
families (:mod:`vgpumon.metrics.hosts`). It has the shape of every feed
(:class:`vgpumon.feed.SnapshotFeed`), so ``serve`` drives it as it drives the sampler: one feed
mapped to another, nothing in between.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from vgpumon.feed import Fleet, HostState, tell
from vgpumon.metrics.hosts import HostSnapshot, HostsView
from vgpumon.sources.ssh import SshFleet, down_snapshot


def view_of(fleet: Fleet, now: float | None = None) -> HostsView:
    """What the exporter says of each host: an answered host's snapshot, a failed host's down
    snapshot (``vgpumon_up 0``, the SSH collector failed) with the reason, nothing for a host
    that has not answered yet."""
    when = time.time() if now is None else now
    hosts = []
    for update in fleet.hosts:
        if update.state is HostState.UP and update.snapshot is not None:
            hosts.append(HostSnapshot(update.host, update.snapshot))
        elif update.state is HostState.UNREACHABLE:
            hosts.append(HostSnapshot(update.host, down_snapshot(update, when), update.error))
    return HostsView(tuple(hosts), fleet.name)


class AgentlessFeed:
    """The feed of an :class:`SshFleet`: a :class:`HostsView` of every host on each change."""

    def __init__(self, fleet: SshFleet) -> None:
        self.fleet = fleet
        self._view: HostsView | None = None
        self._listeners: list[Callable[[HostsView], object]] = []
        fleet.on_snapshot(self._changed)

    @property
    def name(self) -> str:
        return self.fleet.name

    @property
    def latest(self) -> HostsView | None:
        return self._view

    @property
    def not_ready_reason(self) -> str | None:
        return self.fleet.not_ready_reason

    def on_snapshot(self, listener: Callable[[HostsView], object]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> None:
        self.fleet.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        await self.fleet.run(stop)

    def _changed(self, fleet: Fleet) -> None:
        if all(u.state is HostState.CLOSED for u in fleet.hosts):
            return  # the fleet stopped: keep exporting what the hosts last said
        self._view = view_of(fleet)
        tell(self._listeners, self._view)
