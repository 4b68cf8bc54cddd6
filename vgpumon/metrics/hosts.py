"""Several agentless hosts in one exposition (``vgpumon serve --ssh.targets``): every series gets
``host``.

The metric table stays the one place of names: :data:`HOST_FAMILIES` is derived from
:data:`~vgpumon.metrics.table.FAMILIES` row by row, each with ``host`` in front of its labels and
samples taken from every host's snapshot, so the exposition walks it exactly like the table itself
(one ``# HELP``/``# TYPE`` per family, whatever the number of hosts). A host whose last poll
failed exports what the table says about a failed source: ``vgpumon_up{host} 0`` and
``vgpumon_scrape_collector_success{collector="ssh",host} 0``, and no GPU series (absent, not
stale values presented as current). The feed that makes :class:`HostsView` objects is
:mod:`vgpumon.sources.agentless`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vgpumon.metrics.table import FAMILIES, ExportOptions, Family, Sample
from vgpumon.model import Gpu, SamplerHealth, Snapshot

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

    # Its rows no longer describe these samples (host label, every host's snapshot): only
    # ``samples`` does, so the renderer formats them from the samples.
    return dataclasses.replace(
        family, labels=(HOST_LABEL, *family.labels), samples=samples, rows=None
    )


HOST_FAMILIES: tuple[Family, ...] = tuple(_per_host(f) for f in FAMILIES)


@dataclass(frozen=True)
class HostsView:
    """The newest export of every host, swapped in whole on each change (like a snapshot).

    Rendered with :data:`HOST_FAMILIES`; ``health`` and ``gpus`` answer what the server's
    readiness check reads of a snapshot.
    """

    hosts: tuple[HostSnapshot, ...]
    source: str

    @property
    def health(self) -> SamplerHealth:
        """Up when any host answered."""
        return SamplerHealth(up=any(h.snapshot.health.up for h in self.hosts))

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(g for h in self.hosts for g in h.snapshot.gpus)


# What ``serve`` exports: one host's snapshot, or several agentless hosts' view.
Exported = Snapshot | HostsView
