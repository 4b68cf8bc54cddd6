"""Row models for usage and contention: who used how much (docs/metering.md), and who took a
starved vGPU's time (docs/verdicts.md).

Usage rows come from a :class:`~vgpumon.sources.usage.UsageReport` (Prometheus' whole hours, or
the counters since vgpumon started); contention rows from the scheduler's share verdicts in a
snapshot (``gpus[].vgpu_schedulers[].shares``): each vGPU the collector calls starved, beside the
vGPUs of the same scheduler that received more than their due, with the VMs named as everywhere
else. Nothing here decides who is starved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vgpumon.model import Gpu, Snapshot, VgpuShare
from vgpumon.sources.usage import GROUPS, QUANTITIES, UsageReport, UsageRow
from vgpumon.view.rows import NO_HOLDERS, vm_label


@dataclass(frozen=True)
class UsageLine:
    key: str
    by: str  # vm | pod | namespace | tenant
    name: str  # the group's labels, "namespace/pod" for a pod
    gpu_hours: float | None
    memory_gib_hours: float | None
    energy_kwh: float | None
    share: float | None  # of all rows' GPU-hours

    @property
    def fields(self) -> dict[str, str]:
        out = {"vm": self.name} if self.by == "vm" else {}
        if self.by in ("pod", "namespace"):
            out["ns"] = self.name.split("/", 1)[0]
        if self.by == "pod":
            out["pod"] = self.name.split("/", 1)[-1]
        return {**out, "name": self.name}


def merge_reports(reports: Iterable[UsageReport], by: str) -> UsageReport:
    """Several hosts' reports as one (the same VM, pod or namespace on two hosts adds up)."""
    rows: dict[tuple[str, ...], dict[str, float]] = {}
    start, end = 0.0, 0.0
    not_finite = 0
    for report in reports:
        end = max(end, report.end)
        not_finite += report.not_finite
        for row in report.rows:
            total = rows.setdefault(row.key, {})
            for quantity, value in row.values.items():
                total[quantity] = total.get(quantity, 0.0) + value
    ordered = sorted(rows.items(), key=lambda kv: (-kv[1].get("gpu_hours", 0.0), kv[0]))
    return UsageReport(
        by, start, end, tuple(UsageRow(k, v) for k, v in ordered), not_finite=not_finite
    )


def usage_lines(report: UsageReport) -> list[UsageLine]:
    total = sum(r.values.get("gpu_hours", 0.0) for r in report.rows)
    lines = []
    for row in report.rows:
        name = "/".join(row.key) if len(GROUPS[report.by]) > 1 else row.key[0]
        hours = row.values.get("gpu_hours")
        lines.append(
            UsageLine(
                key=f"{report.by}/{name}",
                by=report.by,
                name=name or "—",
                gpu_hours=hours,
                memory_gib_hours=row.values.get(QUANTITIES[1]),
                energy_kwh=row.values.get(QUANTITIES[2]),
                share=None if hours is None or total <= 0 else hours / total,
            )
        )
    return lines


@dataclass(frozen=True)
class ContentionLine:
    """One neighbour that ran above its due while ``vgpu_id`` starved (or the starved vGPU alone
    when the window names no neighbour)."""

    key: str
    host: str
    gpu_index: int
    vgpu_id: int
    vm: str | None
    ran: float  # part of the window the starved vGPU ran
    due: float  # part of the window it was due
    waited: float  # part of the window it was preempted with work left
    neighbour: int | None
    neighbour_vm: str | None
    neighbour_ran: float | None
    neighbour_due: float | None
    vm_ids: str = ""  # NVML's VM ids of both, for the filter (``vm`` may be a name)

    @property
    def above(self) -> float | None:
        if self.neighbour_ran is None or self.neighbour_due is None:
            return None
        return self.neighbour_ran - self.neighbour_due

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "vgpu": " ".join(str(v) for v in (self.vgpu_id, self.neighbour) if v is not None),
            "vm": " ".join(v for v in (self.vm, self.neighbour_vm, self.vm_ids) if v),
            "badge": "starved",
        }


def _short(label: str | None, vm_id: str | None) -> str | None:
    """A VM's name, or NVML's VM id shortened as the vGPU tables shorten it."""
    if label is not None and label == vm_id and len(label) > 12:
        return label[:8] + "…"
    return label


# A neighbour counts as above its due when it received this much more (log granularity).
ABOVE_DUE_MARGIN = 0.01


def contention_lines(host: str, snapshot: Snapshot, gpus: Sequence[Gpu]) -> list[ContentionLine]:
    out = []
    for g in gpus:
        vms = {v.vgpu_id: _short(vm_label(v, NO_HOLDERS), v.vm_id) for v in g.vgpu_instances}
        ids = {v.vgpu_id: v.vm_id or "" for v in g.vgpu_instances}
        for sch in g.vgpu_schedulers:
            above = sorted(
                (
                    v
                    for v in sch.shares
                    if v.received is not None
                    and v.due is not None
                    and v.received > v.due + ABOVE_DUE_MARGIN
                ),
                key=lambda v: (v.due or 0.0) - (v.received or 0.0),
            )
            for c in sch.shares:
                if c.state != "starved":
                    continue
                neighbours: list[VgpuShare | None] = [n for n in above if n.vgpu_id != c.vgpu_id]
                for n in neighbours or [None]:
                    out.append(
                        ContentionLine(
                            key=f"{host}/{g.uuid}/starved/{c.vgpu_id}/{n.vgpu_id if n else '-'}",
                            host=host,
                            gpu_index=g.index,
                            vgpu_id=c.vgpu_id,
                            vm=vms.get(c.vgpu_id),
                            ran=c.received or 0.0,
                            due=c.due or 0.0,
                            waited=c.waited or 0.0,
                            neighbour=None if n is None else n.vgpu_id,
                            neighbour_vm=None if n is None else vms.get(n.vgpu_id),
                            neighbour_ran=None if n is None else n.received,
                            neighbour_due=None if n is None else n.due,
                            vm_ids=" ".join(
                                ids.get(i, "") for i in (c.vgpu_id, n.vgpu_id if n else None) if i
                            ),
                        )
                    )
    return out
