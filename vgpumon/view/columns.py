"""Table columns over the row models: label, cell text, sort key, and which layouts show them.

A column is defined once here and used by ``vgpumon snapshot``'s rich tables and by every table of
the terminal UI, so the two never disagree on what a column means or how a value prints. Sorting
uses the raw value (``sort``), so ``9 GiB`` sorts below ``10 GiB``; absent values always sort last,
in either direction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from vgpumon.model import Snapshot
from vgpumon.view import format as f
from vgpumon.view.badges import labels
from vgpumon.view.rows import (
    GpuRow,
    HostRow,
    LicenseRow,
    MigRow,
    ProcessRow,
    SchedulerRow,
    VgpuRow,
)

R = TypeVar("R")
# Terminal width from which the columns marked ``wide`` are shown (the UI and ``snapshot`` alike).
WIDE_AT = 120


@dataclass(frozen=True)
class Column(Generic[R]):
    key: str
    label: str
    cell: Callable[[R], str]
    sort: Callable[[R], Any]
    numeric: bool = False  # right-aligned
    wide: bool = False  # only in wide layouts (and in ``snapshot``'s 160-column pictures)
    # Shown only when the snapshot has this kind of data (:func:`present`): a pod column on a
    # host without the kubelet enricher would be a column of dashes taking width from the rest.
    needs: str | None = None


PODS = "pods"  # the kubelet enricher gave devices to pods (``Snapshot.allocations``)


def present(snapshot: Snapshot | None) -> frozenset[str]:
    """The optional kinds of data ``snapshot`` has, for :func:`visible`."""
    return frozenset({PODS}) if snapshot is not None and snapshot.allocations else frozenset()


def visible(
    columns: Sequence[Column[R]], wide: bool, has: frozenset[str] = frozenset()
) -> list[Column[R]]:
    return [c for c in columns if (wide or not c.wide) and (c.needs is None or c.needs in has)]


def _pod_column() -> Column[Any]:
    """Which pod the kubelet gave the device to (``namespace/pod``; ``+N`` more when shared)."""
    return Column(
        "pod",
        "pod",
        lambda r: r.holders.label or f.DASH,
        lambda r: r.holders.label or None,
        needs=PODS,
    )


def sort_rows(rows: Sequence[R], column: Column[R], reverse: bool = False) -> list[R]:
    """Rows ordered by ``column``'s raw value; rows without a value last in both directions."""
    present = [r for r in rows if column.sort(r) is not None]
    absent = [r for r in rows if column.sort(r) is None]
    return sorted(present, key=column.sort, reverse=reverse) + absent


def _share(v: VgpuRow) -> str:
    if v.share is None:
        return f.DASH
    got = f.pct(v.share)
    return got if v.entitled is None else f"{got}/{f.pct(v.entitled)}"


def _expires(expiry: float | None, expires_in: float | None, status: str | None) -> str:
    if expires_in is None:
        return f.expiry_status(status)
    return "expired" if expires_in <= 0 else f"in {f.duration(expires_in)}"


GPU_COLUMNS: tuple[Column[GpuRow], ...] = (
    Column("index", "#", lambda r: str(r.index), lambda r: r.index, numeric=True),
    Column("mode", "mode", lambda r: r.mode_label, lambda r: r.mode),
    Column("badges", "badges", lambda r: labels(r.badges), lambda r: len(r.badges)),
    Column("util", "util", lambda r: f.pct(r.utilization), lambda r: r.utilization, True),
    Column(
        "memory",
        "memory",
        lambda r: f.used_total(r.memory_used, r.memory_total),
        lambda r: r.memory_ratio,
        True,
    ),
    Column(
        "power",
        "power",
        lambda r: f.power_of_limit(r.power, r.power_limit),
        lambda r: r.power,
        True,
    ),
    Column("temp", "temp", lambda r: f.celsius(r.temperature), lambda r: r.temperature, True),
    Column(
        "clock", "SM clock", lambda r: f.hertz(r.sm_clock), lambda r: r.sm_clock, True, wide=True
    ),
    Column(
        "held",
        "held by",
        lambda r: ", ".join(r.held_by) or f.DASH,
        lambda r: len(r.held_by),
        wide=True,
    ),
    Column(
        "gpm",
        "GPM sm/dram",
        lambda r: f"{f.pct(r.gpm_sm)}/{f.pct(r.gpm_dram)}",
        lambda r: r.gpm_sm,
        True,
        wide=True,
    ),
    _pod_column(),
    Column(
        "inst",
        "inst",
        lambda r: str(r.instances) if r.instances else f.DASH,
        lambda r: r.instances,
        True,
    ),
    Column("name", "name", lambda r: f.or_dash(r.name), lambda r: r.name),
)

VGPU_COLUMNS: tuple[Column[VgpuRow], ...] = (
    Column("vgpu", "vGPU", lambda r: str(r.vgpu_id), lambda r: r.vgpu_id, True),
    Column("vm", "VM", lambda r: f.or_dash(r.vm), lambda r: r.vm),
    _pod_column(),
    Column("type", "type", lambda r: f.vgpu_type(r.type_name), lambda r: r.type_name),
    Column(
        "fb",
        "framebuffer",
        lambda r: f.used_total(r.framebuffer_used, r.framebuffer_total),
        lambda r: r.framebuffer_ratio,
        True,
    ),
    Column("sm", "sm", lambda r: f.pct(r.sm), lambda r: r.sm, True),
    Column("mem", "mem", lambda r: f.pct(r.memory), lambda r: r.memory, True, wide=True),
    Column(
        "enc",
        "enc/dec",
        lambda r: f"{f.pct(r.encoder)}/{f.pct(r.decoder)}",
        lambda r: r.encoder,
        True,
        wide=True,
    ),
    Column(
        "license", "license", lambda r: f.license_state(r.license_state), lambda r: r.license_state
    ),
    Column(
        "expires",
        "expires",
        lambda r: _expires(r.expiry, r.expires_in, r.expiry_status),
        lambda r: r.expires_in,
        wide=True,
    ),
    Column(
        "fps",
        "fps cap",
        lambda r: f.or_dash(r.frame_rate_limit),
        lambda r: r.frame_rate_limit,
        True,
        wide=True,
    ),
    Column("share", "share/due", _share, lambda r: r.share, True),
)

MIG_COLUMNS: tuple[Column[MigRow], ...] = (
    Column("gi", "GI", lambda r: str(r.gpu_instance_id), lambda r: r.gpu_instance_id, True),
    Column("profile", "profile", lambda r: f.or_dash(r.profile), lambda r: r.profile),
    _pod_column(),
    Column("placement", "slot", lambda r: f.or_dash(r.placement), lambda r: r.placement, wide=True),
    Column(
        "memory",
        "memory",
        lambda r: f.used_total(r.memory_used, r.memory_total),
        lambda r: r.memory_ratio,
        True,
    ),
    Column("sm", "sm", lambda r: f.pct(r.sm_active), lambda r: r.sm_active, True),
    Column(
        "occ", "occ", lambda r: f.pct(r.sm_occupancy), lambda r: r.sm_occupancy, True, wide=True
    ),
    Column("tensor", "tensor", lambda r: f.pct(r.tensor_active), lambda r: r.tensor_active, True),
    Column("dram", "dram", lambda r: f.pct(r.dram_active), lambda r: r.dram_active, True),
    Column("ci", "CIs", lambda r: str(r.compute_instances), lambda r: r.compute_instances, True),
    Column("sms", "SMs", lambda r: f.or_dash(r.sm_count), lambda r: r.sm_count, True, wide=True),
    Column("procs", "procs", lambda r: f.or_dash(r.processes), lambda r: r.processes, True),
)

PROCESS_COLUMNS: tuple[Column[ProcessRow], ...] = (
    Column("pid", "pid", lambda r: str(r.pid), lambda r: r.pid, True),
    Column("name", "process", lambda r: f.or_dash(r.name), lambda r: r.name),
    Column("kind", "kind", lambda r: r.kind, lambda r: r.kind),
    Column("where", "on", lambda r: f.or_dash(r.where), lambda r: r.where),
    Column("memory", "memory", lambda r: f.size(r.memory), lambda r: r.memory, True),
    Column("sm", "sm", lambda r: f.pct(r.sm), lambda r: r.sm, True),
    Column("mem", "mem", lambda r: f.pct(r.memory_util), lambda r: r.memory_util, True, wide=True),
)

SCHEDULER_COLUMNS: tuple[Column[SchedulerRow], ...] = (
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True),
    Column("gi", "GI", lambda r: f.or_dash(r.gpu_instance_id), lambda r: r.gpu_instance_id, True),
    Column("policy", "policy", lambda r: f.or_dash(r.policy), lambda r: r.policy),
    Column("arr", "ARR", lambda r: f.flag(r.arr), lambda r: r.arr),
    Column("slice", "time slice", lambda r: f.duration(r.timeslice), lambda r: r.timeslice, True),
    Column(
        "avg",
        "avg factor",
        lambda r: f.or_dash(r.average_factor),
        lambda r: r.average_factor,
        True,
        wide=True,
    ),
    Column("vgpus", "vGPUs", lambda r: str(r.vgpus), lambda r: r.vgpus, True),
    Column(
        "log",
        "log (missed)",
        lambda r: f"{r.log_entries} ({r.log_missed})",
        lambda r: r.log_entries,
        True,
        wide=True,
    ),
    Column(
        "starved",
        "starved",
        lambda r: str(r.starved) if r.starved else f.DASH,
        lambda r: r.starved,
        True,
    ),
)

# The per-vGPU part of the scheduler screen: what each vGPU received against its due.
SHARE_COLUMNS: tuple[Column[VgpuRow], ...] = (
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True),
    Column("vgpu", "vGPU", lambda r: str(r.vgpu_id), lambda r: r.vgpu_id, True),
    Column("vm", "VM", lambda r: f.or_dash(r.vm), lambda r: r.vm),
    Column("type", "type", lambda r: f.vgpu_type(r.type_name), lambda r: r.type_name),
    Column("policy", "policy", lambda r: f.or_dash(r.policy), lambda r: r.policy),
    Column("sm", "sm", lambda r: f.pct(r.sm), lambda r: r.sm, True),
    Column("got", "received", lambda r: f.pct(r.share), lambda r: r.share, True),
    Column("due", "due", lambda r: f.pct(r.entitled), lambda r: r.entitled, True),
    Column("starved", "", lambda r: "STARVED" if r.starved else "", lambda r: r.starved),
)

LICENSE_COLUMNS: tuple[Column[LicenseRow], ...] = (
    Column("host", "host", lambda r: r.host, lambda r: r.host, wide=True),
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True),
    Column("subject", "vGPU", lambda r: r.subject, lambda r: r.subject, True),
    Column("vm", "VM", lambda r: f.or_dash(r.vm), lambda r: r.vm),
    Column("type", "type", lambda r: f.vgpu_type(r.type_name), lambda r: r.type_name, wide=True),
    Column("state", "state", lambda r: f.license_state(r.state), lambda r: r.urgency),
    Column(
        "expires",
        "expires",
        lambda r: _expires(r.expiry, r.expires_in, r.expiry_status),
        lambda r: r.urgency,
    ),
    Column("product", "product", lambda r: f.or_dash(r.product), lambda r: r.product, wide=True),
)

HOST_COLUMNS: tuple[Column[HostRow], ...] = (
    Column("host", "host", lambda r: r.host, lambda r: r.host),
    Column(
        "state", "state", lambda r: r.state + (" (stale)" if r.stale else ""), lambda r: r.state
    ),
    Column("gpus", "GPUs", lambda r: str(r.gpus) if r.gpus else f.DASH, lambda r: r.gpus, True),
    Column("modes", "modes", lambda r: r.modes_label, lambda r: r.modes_label, wide=True),
    Column("util", "util", lambda r: f.pct(r.utilization), lambda r: r.utilization, True),
    Column(
        "memory",
        "memory",
        lambda r: f.used_total(r.memory_used, r.memory_total),
        lambda r: r.memory_ratio,
        True,
    ),
    Column(
        "power",
        "power",
        lambda r: f.power_of_limit(r.power, r.power_limit),
        lambda r: r.power,
        True,
        wide=True,
    ),
    Column(
        "vgpus", "vGPUs", lambda r: str(r.vgpus) if r.vgpus else f.DASH, lambda r: r.vgpus, True
    ),
    Column(
        "lic",
        "lic!",
        lambda r: str(r.license_problems) if r.license_problems else f.DASH,
        lambda r: r.license_problems,
        True,
    ),
    Column("xid", "Xid", lambda r: str(r.xid) if r.xid else f.DASH, lambda r: r.xid, True),
    Column("lost", "lost", lambda r: str(r.lost) if r.lost else f.DASH, lambda r: r.lost, True),
    Column(
        "note",
        "note",
        lambda r: f.or_dash(r.error) if r.error else labels(r.badges),
        lambda r: r.error or "",
        wide=True,
    ),
)
