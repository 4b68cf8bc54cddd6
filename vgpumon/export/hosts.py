"""Export several agentless hosts from one ``vgpumon serve --ssh``: every series gets ``host``.

The metric table stays the one place of names: each host's snapshot is walked by the same
families as a local one, and its series get the constant label ``host="NAME"`` in front
(:func:`vgpumon.export.exposition.collect_families`). A host whose last poll failed exports what
the table says about a failed source: ``vgpumon_up{host} 0`` and
``vgpumon_scrape_collector_success{collector="ssh",host} 0``, and no GPU series (absent, not stale
values presented as current).

:class:`AgentlessExporter` is what ``vgpumon.export.server.serve`` drives in place of a sampler:
``latest`` (a :class:`HostsView`), ``ready``, ``run(stop)`` and ``session.source``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from vgpumon.export.exposition import LabeledSnapshot, collect_families
from vgpumon.export.metrics import FAMILIES, ExportOptions
from vgpumon.model import Snapshot
from vgpumon.sources.base import HostState
from vgpumon.sources.ssh import SshSource, down_snapshot

HOST_LABEL = "host"


@dataclass(frozen=True)
class HostSnapshot:
    host: str
    snapshot: Snapshot
    error: str | None = None  # why the host's last poll failed


@dataclass(frozen=True)
class HostsView:
    """The newest export of every host, swapped in whole on each change (like a snapshot)."""

    hosts: tuple[HostSnapshot, ...]
    source: str

    def collector(self, options: ExportOptions) -> Collector:
        return _HostsCollector(self, options)


class _HostsCollector(Collector):
    def __init__(self, view: HostsView, options: ExportOptions) -> None:
        self.view = view
        self.options = options

    def collect(self) -> Iterator[Metric]:
        entries: list[LabeledSnapshot] = [
            (((HOST_LABEL, h.host),), h.snapshot) for h in self.view.hosts
        ]
        return collect_families(entries, self.options, FAMILIES)


def view_of(source: SshSource, now: float | None = None) -> HostsView:
    when = time.time() if now is None else now
    hosts = []
    for host, update in source.latest().items():
        if update.state is HostState.UP and update.snapshot is not None:
            hosts.append(HostSnapshot(host, update.snapshot))
        elif update.state is HostState.UNREACHABLE:
            hosts.append(HostSnapshot(host, down_snapshot(update, when), update.error))
    return HostsView(tuple(hosts), source.name)


@dataclass(frozen=True)
class _Session:
    source: str


class AgentlessExporter:
    """The sampler-shaped face of an :class:`SshSource` for the exporter's HTTP server."""

    def __init__(self, source: SshSource) -> None:
        self.source = source
        self.session = _Session(source.name)
        self._view: HostsView | None = None

    @property
    def latest(self) -> HostsView | None:
        return self._view

    @property
    def ready(self) -> bool:
        """Every host has answered or failed once (a host still connecting is not known yet)."""
        return self._view is not None and len(self._view.hosts) == len(self.source.hosts())

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
        finally:
            waiter.cancel()
            await self.source.close()
