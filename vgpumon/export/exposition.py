"""Snapshot -> Prometheus text 0.0.4 or OpenMetrics, through prometheus-client's own encoders.

docs/design.md, rule 1: formatting never calls NVML. A :class:`SnapshotCollector` holds one
immutable :class:`~vgpumon.model.Snapshot` and turns it into metric families using the table in
:mod:`vgpumon.export.metrics`; it is registered on a private ``CollectorRegistry`` (never the global
one, so nothing else in the process leaks into the exposition and nothing is sampled at scrape
time). The encoders are prometheus-client's, so escaping, float formatting, counter ``_total``
handling and the OpenMetrics ``# UNIT`` / ``# EOF`` lines are the reference implementation's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from vgpumon.export.metrics import FAMILIES, ExportOptions, Family
from vgpumon.model import Snapshot

Encoder = Callable[[Collector], bytes]


class SnapshotCollector(Collector):
    """Formats exactly one snapshot; families without samples are left out entirely."""

    def __init__(
        self,
        snapshot: Snapshot,
        options: ExportOptions | None = None,
        families: tuple[Family, ...] = FAMILIES,
    ) -> None:
        self.snapshot = snapshot
        self.options = options or ExportOptions()
        self.families = families

    def collect(self) -> Iterator[Metric]:
        for family in self.families:
            metric: Metric | None = None
            for labels, value in family.samples(self.snapshot, self.options):
                if metric is None:
                    metric = Metric(family.base_name, family.help, family.type, unit=family.unit)
                metric.add_sample(family.name, dict(zip(family.labels, labels, strict=True)), value)
            if metric is not None:
                yield metric


def registry_for(snapshot: Snapshot, options: ExportOptions | None = None) -> CollectorRegistry:
    """A private registry holding only this snapshot's collector.

    A snapshot-like object with its own ``families`` (several agentless hosts, whose series carry
    a ``host`` label: :mod:`vgpumon.export.hosts`) is walked with those.
    """
    registry = CollectorRegistry(auto_describe=False)
    families = getattr(snapshot, "families", FAMILIES)
    registry.register(SnapshotCollector(snapshot, options, families))
    return registry


def render(
    snapshot: Snapshot, *, openmetrics: bool = False, options: ExportOptions | None = None
) -> bytes:
    """The exposition of one snapshot: text format 0.0.4, or OpenMetrics 1.0.0."""
    encoder: Encoder = generate_openmetrics if openmetrics else generate_latest
    return encoder(registry_for(snapshot, options))
