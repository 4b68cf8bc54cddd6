"""Agentless hosts as one snapshot feed for ``vgpumon serve --ssh.targets``.

:class:`AgentlessFeed` drives an :class:`~vgpumon.sources.ssh.SshSource` and turns each change of
any host into a new :class:`~vgpumon.metrics.hosts.HostsView`, the snapshot the exporter renders
with the per-host families (:mod:`vgpumon.metrics.hosts`). It has the shape of every feed
(:class:`vgpumon.feed.SnapshotFeed`), so ``serve`` drives it as it drives the sampler.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from vgpumon.feed import tell
from vgpumon.metrics.hosts import HostSnapshot, HostsView
from vgpumon.sources.base import HostState
from vgpumon.sources.ssh import SshSource, down_snapshot


def view_of(source: SshSource, now: float | None = None) -> HostsView:
    when = time.time() if now is None else now
    hosts = []
    for host, update in source.latest().items():
        if update.state is HostState.UP and update.snapshot is not None:
            hosts.append(HostSnapshot(host, update.snapshot))
        elif update.state is HostState.UNREACHABLE:
            hosts.append(HostSnapshot(host, down_snapshot(update, when), update.error))
    return HostsView(tuple(hosts), source.name)


class AgentlessFeed:
    """The feed of an :class:`SshSource`: a :class:`HostsView` of every host on each change."""

    def __init__(self, source: SshSource) -> None:
        self.source = source
        self._view: HostsView | None = None
        self._listeners: list[Callable[[HostsView], object]] = []

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def latest(self) -> HostsView | None:
        return self._view

    @property
    def not_ready_reason(self) -> str | None:
        """Ready once every host has answered or failed once (one still connecting is unknown)."""
        if self._view is None:
            return "first sampling cycle not done"
        waiting = len(self.source.hosts()) - len(self._view.hosts)
        return f"{waiting} host(s) not answered yet" if waiting else None

    def on_snapshot(self, listener: Callable[[HostsView], object]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> None:
        asyncio.get_running_loop().create_task(self.source.refresh())

    async def run(self, stop: asyncio.Event) -> None:
        await self.source.start()
        updates = self.source.updates()
        waiter = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                step = asyncio.ensure_future(updates.__anext__())
                done, _ = await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
                if step not in done:
                    step.cancel()
                    break
                if step.exception() is not None:
                    break  # the source closed
                self._view = view_of(self.source)
                tell(self._listeners, self._view)
        finally:
            waiter.cancel()
            await self.source.close()
