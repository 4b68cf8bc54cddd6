"""Export several agentless hosts from one ``vgpumon serve --ssh``: every series gets ``host``.

The metric table stays the one place of names: :data:`HOST_FAMILIES` is derived from
:data:`~vgpumon.metrics.table.FAMILIES` row by row, each with ``host`` in front of its labels and
samples taken from every host's snapshot, so the exposition walks it exactly like the table itself
(one ``# HELP``/``# TYPE`` per family, whatever the number of hosts). A host whose last poll
failed exports what the table says about a failed source: ``vgpumon_up{host} 0`` and
``vgpumon_scrape_collector_success{collector="ssh",host} 0``, and no GPU series (absent, not
stale values presented as current).

:class:`AgentlessExporter` is what ``vgpumon.export.server.serve`` drives in place of a sampler:
``latest`` (a :class:`HostsView`), ``ready``, ``run(stop)`` and ``session.source``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vgpumon.metrics.table import FAMILIES, ExportOptions, Family, Sample
from vgpumon.model import Gpu, SamplerHealth, Snapshot
from vgpumon.sources.base import HostState
from vgpumon.sources.ssh import SshSource, down_snapshot

HOST_LABEL = "host"


@dataclass(frozen=True)
class HostSnapshot:
    host: str
    snapshot: Snapshot
    error: str | None = None  # why the host's last poll failed


def _per_host(family: Family) -> Family:
    def samples(view: Any, options: ExportOptions) -> Iterator[Sample]:
        for entry in view.hosts:
            for labels, value in family.samples(entry.snapshot, options):
                yield (entry.host, *labels), value

    return dataclasses.replace(family, labels=(HOST_LABEL, *family.labels), samples=samples)


HOST_FAMILIES: tuple[Family, ...] = tuple(_per_host(f) for f in FAMILIES)


@dataclass(frozen=True)
class HostsView:
    """The newest export of every host, swapped in whole on each change (like a snapshot)."""

    hosts: tuple[HostSnapshot, ...]
    source: str

    @property
    def families(self) -> tuple[Family, ...]:
        """What the exposition walks for this view instead of the single-host table."""
        return HOST_FAMILIES

    # What the server's readiness check reads from a snapshot: up when any host answered.
    @property
    def health(self) -> SamplerHealth:
        return SamplerHealth(up=any(h.snapshot.health.up for h in self.hosts))

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(g for h in self.hosts for g in h.snapshot.gpus)


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
