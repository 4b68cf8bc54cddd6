"""Usage totals per VM, pod, namespace or tenant over a time range, from Prometheus.

The totals come from the metering rules' hourly series (packaging/prometheus/
vgpumon-metering.rules.yml): ``vgpumon:<by>_<quantity>:increase1h`` summed over the whole hours
of the range with a subquery whose steps fall on the clock's hours, so each hour counts once and
a VM that took over a reused vGPU id mid-range is billed from the hour it did. The tenant mapping
lives in those rules too, so the command and the dashboards agree on who a tenant is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.model import Snapshot
from vgpumon.sources.promapi import PrometheusClient, PrometheusError
from vgpumon.sources.remote import Connection

HOUR = 3600
GIB = 1 << 30
JOULES_PER_KWH = 3.6e6
# By what usage is grouped: the rule's prefix and the labels that name a row.
GROUPS: dict[str, tuple[str, ...]] = {
    "vm": ("vm",),
    "pod": ("namespace", "pod"),
    "namespace": ("namespace",),
    "tenant": ("tenant",),
}
QUANTITIES = ("gpu_hours", "memory_gib_hours", "energy_kwh")


@dataclass(frozen=True)
class UsageRow:
    key: tuple[str, ...]  # the GROUPS labels' values, in order
    values: dict[str, float] = field(default_factory=dict)  # quantity -> total


@dataclass(frozen=True)
class UsageReport:
    by: str
    start: float  # Unix seconds, on a whole hour (0: since each counter began)
    end: float
    rows: tuple[UsageRow, ...]
    # Values Prometheus gave as NaN or infinite (a counter reset inside a rule's window, a
    # division by zero): left out of the rows and the totals, and counted here.
    not_finite: int = 0

    @property
    def labels(self) -> tuple[str, ...]:
        return GROUPS[self.by]


def hour_range(start: float, end: float) -> tuple[float, float]:
    """The whole hours inside [start, end]: start rounded up, end rounded down."""
    lo = math.ceil(start / HOUR) * HOUR
    hi = math.floor(end / HOUR) * HOUR
    if hi - lo < HOUR:
        raise ConfigError(
            "the range holds no whole hour: usage is summed by the hour (give at least 1h, "
            "from a whole hour)"
        )
    return float(lo), float(hi)


def query(by: str, quantity: str, start: float, end: float) -> str:
    """The PromQL that totals ``quantity`` per ``by`` over the whole hours (start, end], evaluated
    at ``end``: each hourly series' value at start + 1h, ..., end (the hour before each).

    The Grafana Usage dashboard runs the same text with its range for ``start`` and ``end``
    (dashboards/vgpumon_dashboards/usage.py, ``in_range``), so the two agree to the digit. The
    steps are kept by their time (an hour after ``start`` or later), not by where the
    subquery's range begins: Prometheus 2.x counts a range's left end in and 3.x does not, and
    a range on whole hours has a step exactly there.
    """
    rule = f"vgpumon:{by}_{quantity}:increase1h"
    seconds = round(end - start)
    # The hourly series keep the targets' own labels (cluster, ...): one total per group.
    keys = ", ".join(GROUPS[by])
    return (
        f"sum by ({keys}) (sum_over_time(({rule} and on () vector(time()) - {HOUR} "
        f">= {start:.0f})[{seconds}s:1h]))"
    )


def report_from_snapshot(snapshot: Snapshot, by: str) -> UsageReport:
    """Usage since vgpumon started, from one snapshot's counters (no Prometheus needed).

    For the TUI's view of this host, or a fleet's snapshots: the same rows as :class:`UsageClient`
    gives, over the life of each counter instead of whole hours. Tenants here are the namespaces
    and VMs themselves: the tenant mapping lives in the Prometheus rules.
    """
    if by not in GROUPS:
        raise ConfigError(f"--by {by!r}: choose one of {', '.join(GROUPS)}")
    rows: dict[tuple[str, ...], dict[str, float]] = {}

    not_finite = 0

    def add(key: tuple[str, ...], busy: float, memory: float, energy: float | None) -> None:
        nonlocal not_finite
        row = rows.setdefault(key, dict.fromkeys(QUANTITIES, 0.0))
        for quantity, value, unit in (
            ("gpu_hours", busy, HOUR),
            ("memory_gib_hours", memory, GIB * HOUR),
            ("energy_kwh", energy, JOULES_PER_KWH),
        ):
            if value is None:
                continue
            if not math.isfinite(value):  # a remote snapshot's counter: left out, counted
                not_finite += 1
                continue
            row[quantity] += value / unit

    for g in snapshot.gpus:
        m = g.metering
        if m is None:
            continue
        if by in ("vm", "tenant"):
            vms = {v.vgpu_id: v for v in g.vgpu_instances}
            for meter in m.vgpus:
                v = vms.get(meter.vgpu_id)
                name = (v.vm.name if v and v.vm else None) or (v.vm_id if v else None) or ""
                u = meter.usage
                add((name,), u.busy_seconds, u.memory_byte_seconds, u.energy_joules)
        if by != "vm":
            for pod in m.pods:
                key = {
                    "pod": (pod.namespace, pod.pod),
                    "namespace": (pod.namespace,),
                    "tenant": (pod.namespace,),
                }[by]
                u = pod.usage
                add(key, u.busy_seconds, u.memory_byte_seconds, u.energy_joules)
    ordered = sorted(rows.items(), key=lambda kv: (-kv[1]["gpu_hours"], kv[0]))
    return UsageReport(
        by,
        0.0,
        snapshot.timestamp,
        tuple(UsageRow(k, v) for k, v in ordered),
        not_finite=not_finite,
    )


class UsageClient:
    """Instant queries against one Prometheus server (``/api/v1/query``)."""

    def __init__(self, client: PrometheusClient | str, *, timeout_seconds: float = 30.0) -> None:
        if not isinstance(client, PrometheusClient):
            client = PrometheusClient(client, Connection(timeout_seconds=timeout_seconds))
        self.client = client
        self.url = client.url

    async def report(self, by: str, start: float, end: float) -> UsageReport:
        if by not in GROUPS:
            raise ConfigError(f"--by {by!r}: choose one of {', '.join(GROUPS)}")
        start, end = hour_range(start, end)
        labels = GROUPS[by]
        rows: dict[tuple[str, ...], dict[str, float]] = {}
        not_finite = 0
        for quantity in QUANTITIES:
            for metric, value in await self._query(query(by, quantity, start, end), end):
                key = tuple(str(metric.get(label, "")) for label in labels)
                row = rows.setdefault(key, {})
                if not math.isfinite(value):
                    not_finite += 1
                    continue
                # Series that differ only in labels outside the grouping (a cluster, a job)
                # are the same row: they add up, never replace one another.
                row[quantity] = row.get(quantity, 0.0) + value
        ordered = sorted(rows.items(), key=lambda kv: (-kv[1].get("gpu_hours", 0.0), kv[0]))
        return UsageReport(
            by, start, end, tuple(UsageRow(k, v) for k, v in ordered), not_finite=not_finite
        )

    async def _query(self, promql: str, at: float) -> list[tuple[dict[str, str], float]]:
        try:
            return (await self.client.instant(promql, at)).series
        except PrometheusError as exc:
            raise VgpumonError(str(exc)) from None
