"""Snapshot -> Prometheus text 0.0.4 or OpenMetrics, through prometheus-client's own encoders.

Design rule 1: formatting never calls NVML. A :class:`SnapshotCollector` holds one immutable
:class:`~vgpumon.model.Snapshot` and turns it into metric families using the table in
:mod:`vgpumon.export.metrics`; it is registered on a private ``CollectorRegistry`` (never the
global one, so nothing else in the process leaks into the exposition and nothing is sampled at
scrape time).
The encoders are prometheus-client's, so escaping, float formatting, counter ``_total`` handling
and the OpenMetrics ``# UNIT`` / ``# EOF`` lines are the reference implementation's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

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
        return collect_families([((), self.snapshot)], self.options, self.families)


# One snapshot and the constant labels its series get (``host="esxi-1"``), labels first.
LabeledSnapshot = tuple[tuple[tuple[str, str], ...], Snapshot]


def collect_families(
    entries: Sequence[LabeledSnapshot], options: ExportOptions, families: tuple[Family, ...]
) -> Iterator[Metric]:
    """Each family once, with the samples of every snapshot (several hosts share a family)."""
    for family in families:
        metric: Metric | None = None
        for constant, snapshot in entries:
            for labels, value in family.samples(snapshot, options):
                if metric is None:
                    metric = Metric(family.base_name, family.help, family.type, unit=family.unit)
                named = dict(constant)
                named.update(zip(family.labels, labels, strict=True))
                metric.add_sample(family.name, named, value)
        if metric is not None:
            yield metric


class Exposable(Protocol):
    """Something other than one snapshot that knows its collector (several agentless hosts)."""

    def collector(self, options: ExportOptions) -> Collector: ...


def registry_for(
    snapshot: Snapshot | Exposable, options: ExportOptions | None = None
) -> CollectorRegistry:
    """A private registry holding only this snapshot's collector."""
    registry = CollectorRegistry(auto_describe=False)
    if isinstance(snapshot, Snapshot):
        registry.register(SnapshotCollector(snapshot, options))
    else:
        registry.register(snapshot.collector(options or ExportOptions()))
    return registry


def render(
    snapshot: Snapshot | Exposable,
    *,
    openmetrics: bool = False,
    options: ExportOptions | None = None,
) -> bytes:
    """The exposition of one snapshot: text format 0.0.4, or OpenMetrics 1.0.0."""
    encoder: Encoder = generate_openmetrics if openmetrics else generate_latest
    return encoder(registry_for(snapshot, options))
