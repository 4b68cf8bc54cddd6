"""Table columns over the row models: label, cell text, sort key, style, priority.

A column is defined once here and used by ``vgpumon snapshot``'s rich tables and by every table of
the terminal UI, so the two never disagree on what a column means or how a value prints. Sorting
uses the raw value (``sort``), so ``9 GiB`` sorts below ``10 GiB``; absent values always sort last,
in either direction. Load-like columns (``descending``) sort largest first when first chosen.

A column also says how it looks (``style``: a palette role per row; ``parts``: several styled
pieces, for badges; ``gauge``: the ratio a gauge in front of the text shows) and how much it
matters (``priority``: 0 is kept longest). When a terminal is too narrow for every column,
:func:`fit` drops columns in a defined order, least important first and, among equals, the widest
first, so nothing is ever cut off the right edge.

The host screen's tree mixes GPU, vGPU and MIG rows in one table: its columns
(:data:`HOST_TREE_COLUMNS`) are shared by meaning (``name/VM``: a GPU's product, a vGPU's VM, a
MIG instance's pod; ``type``: a GPU's mode, a vGPU's type, a MIG profile) and are composed of the
per-kind tables' own columns (:func:`tree_column`: the vGPU rows' ``share/due`` *is* the vGPU
table's), so a cell is defined once and adding a kind of row is one entry per column, not a
branch in a screen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from vgpumon.model import Snapshot
from vgpumon.view import format as f
from vgpumon.view.badges import IDLE_PROCESS_AFTER_SECONDS, Badge, badge, labels
from vgpumon.view.badges import idle as badge_idle
from vgpumon.view.capacity import MIG, CapacityRow, FitRow, GiVgpuRow
from vgpumon.view.metering import ContentionLine, UsageLine
from vgpumon.view.rows import (
    EncoderShareRow,
    GpuRow,
    HostRow,
    LicenseRow,
    MigRow,
    ProcessRow,
    SchedulerRow,
    VgpuRow,
)

R = TypeVar("R")
# Palette roles a column's ``style`` may return (the terminal UI maps them to colours).
ERROR, WARNING, GOOD, DIM = "error", "warning", "good", "dim"
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
    priority: int = 5  # 0 is kept longest; :func:`fit` drops the highest numbers first
    descending: bool = False  # load-like: the first sort by this column puts the largest first
    style: Callable[[R], str | None] | None = None  # palette role of the cell (None: plain)
    parts: Callable[[R], Sequence[tuple[str, str | None]]] | None = None  # styled pieces
    gauge: Callable[[R], float | None] | None = None  # ratio of a gauge before the text
    gauge_narrow: bool = False  # the gauge also in the normal (not only the wide) layout
    # At least this wide, for a column whose values change width (a host's state): the columns
    # after it hold still when one row's value grows.
    width: int = 0
    # A column of rows of several kinds: each kind's own column (:func:`tree_column`).
    kinds: Mapping[type, Column[Any]] | None = None


PODS = "pods"  # the kubelet enricher gave devices to pods (``Snapshot.allocations``)
VGPUS = "vgpus"  # the host has vGPU instances (license and share columns mean something)
MIGS = "migs"  # the host has MIG instances
LOCAL = "local"  # processes of this host, with what /proc says of them (user, CPU, command)
IDLE = "idle"  # a process idle long enough for its badge (metering): the idle column appears
CC = "cc"  # confidential computing is on for some GPU: its state column appears


def present(snapshot: Snapshot | None) -> frozenset[str]:
    """The optional kinds of data ``snapshot`` has, for :func:`visible`."""
    if snapshot is None:
        return frozenset()
    out = set()
    if snapshot.allocations:
        out.add(PODS)
    if any(g.vgpu_instances for g in snapshot.gpus):
        out.add(VGPUS)
    if any(g.mig_instances for g in snapshot.gpus):
        out.add(MIGS)
    if any(
        badge_idle(p.idle_seconds, IDLE_PROCESS_AFTER_SECONDS)
        for g in snapshot.gpus
        if g.metering is not None
        for p in g.metering.processes
    ):
        out.add(IDLE)
    if any(g.conf_compute.feature_enabled for g in snapshot.gpus):
        out.add(CC)
    return frozenset(out)


def fit(columns: Sequence[Column[R]], widths: Sequence[int], room: int, gap: int = 2) -> list[int]:
    """Indexes of the columns kept when ``room`` cells must hold them (each takes its width plus
    ``gap``): columns drop least important first (highest ``priority``) and, among equals, widest
    first; the first column always stays. The kept columns keep their order."""
    kept = list(range(len(columns)))
    total = sum(w + gap for w in widths)
    order = sorted(kept[1:], key=lambda i: (-columns[i].priority, -widths[i], -i))
    for i in order:
        if total <= room:
            break
        kept.remove(i)
        total -= widths[i] + gap
    return kept


def by_kind(table: dict[type, Callable[[Any], Any]], default: Any = "") -> Callable[[Any], Any]:
    """A cell (or sort key) that depends on the row's type: one entry per kind of row."""

    def cell(row: Any) -> Any:
        read = table.get(type(row))
        return default if read is None else read(row)

    return cell


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
        priority=2,
    )


def _ratio(
    key: str, label: str, read: Callable[[Any], float | None], *, gauge: bool = False, **more: Any
) -> Column[Any]:
    """A load-like ratio shown as a percentage: right-aligned, largest first, optionally with
    its gauge."""
    return Column(
        key,
        label,
        lambda r: f.pct(read(r)),
        read,
        numeric=True,
        descending=True,
        gauge=read if gauge else None,
        **more,
    )


def sort_rows(rows: Sequence[R], column: Column[R], reverse: bool = False) -> list[R]:
    """Rows ordered by ``column``'s raw value; rows without a value last in both directions.

    Rows whose cells read the same tie and keep the order they came in (the screen's own: GPU
    index, then instance) in both directions: raw values that trade places below the shown
    precision (two vGPUs at 40%/25%) would otherwise swap the rows on every refresh."""
    keyed = [(column.sort(r), column.cell(r), r) for r in rows]
    shown: dict[str, Any] = {}  # one sort value per shown text: the lowest
    for value, text, _ in keyed:
        if value is not None and (text not in shown or value < shown[text]):
            shown[text] = value
    present = [(shown[text], r) for value, text, r in keyed if value is not None]
    absent = [r for value, _, r in keyed if value is None]
    return [r for _, r in sorted(present, key=lambda t: t[0], reverse=reverse)] + absent


def _share(v: VgpuRow) -> str:
    if v.received is None:
        return f.DASH
    got = f.pct(v.received)
    return got if v.due is None else f"{got}/{f.pct(v.due)}"


def _unlicensed_style(state: str | None) -> str | None:
    return WARNING if (state or "").startswith("unlicensed") else None


def _badge_parts(badges: Sequence[Badge]) -> list[tuple[str, str | None]]:
    return [(x.label, ERROR if x.error else WARNING) for x in badges]


def _vgpu_badges(v: VgpuRow) -> list[tuple[str, str | None]]:
    """A vGPU's alarms beside its license column (which already says unlicensed)."""
    kinds = (("expiring", v.expiring), ("starved", v.starved), ("idle", v.idle))
    return _badge_parts([badge(k) for k, on in kinds if on])


def _vgpu_license(v: VgpuRow) -> str:
    return f.license_short(v.license_state)


def _gpu_licenses(g: GpuRow) -> str:
    """A GPU's vGPUs without a license, as a count (its badges say which kind of problem)."""
    return f"{g.unlicensed} unlic" if g.unlicensed else (f.DASH if g.vgpus else "")


def _short_vm(v: VgpuRow) -> str:
    """The VM's name; without one, NVML's VM id shortened (the full id is in the detail)."""
    if v.vm is None:
        return f.DASH
    if v.vm == v.vm_id and len(v.vm) > 12:
        return v.vm[:8] + "…"
    return v.vm


def _migration(ready: bool | None) -> str:
    """Whether this host's side of a live migration is ready (docs/capacity.md)."""
    return f.DASH if ready is None else ("ready" if ready else "no")


def _cc_column(priority: int) -> Column[Any]:
    """Confidential computing (``cc_label``), shown only where some GPU runs it."""
    return Column(
        "cc",
        "CC",
        lambda r: f.or_dash(r.cc),
        lambda r: r.cc or "",
        needs=CC,
        priority=priority,
        style=lambda r: WARNING if r.cc in ("not ready", "devtools", "mixed") else None,
    )


def _expires(expiry: float | None, expires_in: float | None, status: str | None) -> str:
    if expires_in is None:
        return f.expiry_status(status)
    return "expired" if expires_in <= 0 else f"in {f.duration(expires_in)}"


GPU_COLUMNS: tuple[Column[GpuRow], ...] = (
    Column("index", "#", lambda r: str(r.index), lambda r: r.index, numeric=True, priority=0),
    Column("mode", "mode", lambda r: r.mode_label, lambda r: r.mode, priority=1),
    Column(
        "badges",
        "badges",
        lambda r: labels(r.badges),
        lambda r: len(r.badges),
        priority=1,
        descending=True,
        parts=lambda r: _badge_parts(r.badges),
    ),
    _ratio("util", "util", lambda r: r.utilization, gauge=True, priority=3, gauge_narrow=True),
    Column(
        "memory",
        "memory",
        lambda r: f.used_total(r.memory_used, r.memory_total),
        lambda r: r.memory_ratio,
        priority=3,
        gauge=lambda r: r.memory_ratio,
        numeric=True,
        descending=True,
    ),
    Column(
        "power",
        "power",
        lambda r: f.power_of_limit(r.power, r.power_limit),
        lambda r: r.power,
        priority=5,
        numeric=True,
        descending=True,
    ),
    Column(
        "temp",
        "temp",
        lambda r: f.celsius(r.temperature),
        lambda r: r.temperature,
        priority=5,
        numeric=True,
        descending=True,
    ),
    Column(
        "clock",
        "SM clock",
        lambda r: f.hertz(r.sm_clock),
        lambda r: r.sm_clock,
        wide=True,
        priority=7,
        numeric=True,
        descending=True,
    ),
    Column(
        "held",
        "held by",
        lambda r: ", ".join(r.held_by) or f.DASH,
        lambda r: len(r.held_by),
        wide=True,
        priority=7,
    ),
    Column(
        "gpm",
        "GPM sm/dram",
        lambda r: f"{f.pct(r.gpm_sm)}/{f.pct(r.gpm_dram)}",
        lambda r: r.gpm_sm,
        wide=True,
        priority=6,
        numeric=True,
        descending=True,
    ),
    _pod_column(),
    Column(
        "inst",
        "inst",
        lambda r: str(r.instances) if r.instances else f.DASH,
        lambda r: r.instances,
        priority=4,
        numeric=True,
        descending=True,
    ),
    _cc_column(priority=2),
    Column("name", "name", lambda r: f.or_dash(r.name), lambda r: r.name, priority=4),
)

VGPU_COLUMNS: tuple[Column[VgpuRow], ...] = (
    Column("vgpu", "vGPU", lambda r: str(r.vgpu_id), lambda r: r.vgpu_id, True, priority=0),
    Column("vm", "VM", _short_vm, lambda r: r.vm, priority=1),
    _pod_column(),
    Column("type", "type", lambda r: f.vgpu_type(r.type_name), lambda r: r.type_name, priority=1),
    Column(
        "fb",
        "framebuffer",
        lambda r: f.used_total(r.framebuffer_used, r.framebuffer_total),
        lambda r: r.framebuffer_ratio,
        priority=3,
        gauge=lambda r: r.framebuffer_ratio,
        numeric=True,
        descending=True,
    ),
    _ratio("sm", "sm", lambda r: r.sm, gauge=True, priority=3, gauge_narrow=True),
    _ratio("mem", "mem", lambda r: r.memory, wide=True, priority=6),
    Column(
        "enc",
        "enc/dec",
        lambda r: f"{f.pct(r.encoder)}/{f.pct(r.decoder)}",
        lambda r: r.encoder,
        wide=True,
        priority=7,
        numeric=True,
        descending=True,
    ),
    Column(
        "license",
        "license",
        _vgpu_license,
        lambda r: r.license_state,
        priority=1,
        style=lambda r: _unlicensed_style(r.license_state),
    ),
    Column(
        "expires",
        "expires",
        lambda r: _expires(r.expiry, r.expires_in, r.expiry_status),
        lambda r: r.expires_in,
        wide=True,
        priority=5,
    ),
    Column(
        "fps",
        "fps cap",
        lambda r: f.or_dash(r.frame_rate_limit),
        lambda r: r.frame_rate_limit,
        True,
        wide=True,
        priority=8,
    ),
    Column(
        "share",
        "share/due",
        _share,
        lambda r: r.received,
        priority=1,
        style=lambda r: ERROR if r.starved else None,
        numeric=True,
        descending=True,
    ),
    Column(
        "migr",
        "migr",
        lambda r: _migration(r.migration_ready),
        lambda r: r.migration_ready,
        priority=4,
        style=lambda r: WARNING if r.migration_ready is False else None,
    ),
    Column(
        "migr_size",
        "moves",
        lambda r: f.size(r.migration_bytes),
        lambda r: r.migration_bytes,
        priority=6,
        numeric=True,
        descending=True,
    ),
    Column(
        "migr_why",
        "migration",
        lambda r: "; ".join(r.migration_blockers) or f.DASH,
        lambda r: len(r.migration_blockers),
        wide=True,
        priority=6,
        descending=True,
    ),
    Column("vmid", "VM id", lambda r: f.or_dash(r.vm_id), lambda r: r.vm_id, wide=True, priority=9),
)

MIG_COLUMNS: tuple[Column[MigRow], ...] = (
    Column(
        "gi", "GI", lambda r: str(r.gpu_instance_id), lambda r: r.gpu_instance_id, True, priority=0
    ),
    Column("profile", "profile", lambda r: f.or_dash(r.profile), lambda r: r.profile, priority=1),
    _pod_column(),
    Column(
        "placement",
        "slot",
        lambda r: f.or_dash(r.placement),
        lambda r: r.placement,
        wide=True,
        priority=7,
    ),
    Column(
        "memory",
        "memory",
        lambda r: f.used_total(r.memory_used, r.memory_total),
        lambda r: r.memory_ratio,
        priority=2,
        gauge=lambda r: r.memory_ratio,
        numeric=True,
        descending=True,
    ),
    _ratio("sm", "sm", lambda r: r.sm_active, gauge=True, priority=2, gauge_narrow=True),
    _ratio("occ", "occ", lambda r: r.sm_occupancy, wide=True, priority=6),
    _ratio("tensor", "tensor", lambda r: r.tensor_active, priority=4),
    _ratio("dram", "dram", lambda r: r.dram_active, priority=4),
    Column(
        "ci",
        "CIs",
        lambda r: str(r.compute_instances),
        lambda r: r.compute_instances,
        True,
        priority=5,
    ),
    Column(
        "sms",
        "SMs",
        lambda r: f.or_dash(r.sm_count),
        lambda r: r.sm_count,
        True,
        wide=True,
        priority=7,
    ),
    Column(
        "procs",
        "procs",
        lambda r: f.or_dash(r.processes),
        lambda r: r.processes,
        priority=3,
        numeric=True,
        descending=True,
    ),
)


def _by_key(columns: Sequence[Column[R]]) -> dict[str, Column[R]]:
    return {c.key: c for c in columns}


_GPU, _VGPU, _MIG = _by_key(GPU_COLUMNS), _by_key(VGPU_COLUMNS), _by_key(MIG_COLUMNS)


def tree_column(
    key: str,
    label: str,
    kinds: dict[type, Column[Any]],
    *,
    sort: Callable[[GpuRow], Any] | None = None,
    **options: Any,
) -> Column[Any]:
    """A column of the host tree, made of one column per kind of row (``kinds``: the GPU, vGPU
    and MIG tables' own columns, so a cell is defined once, in its kind's table). Each cell, its
    style, badges and gauge are those of the row's kind's column; a kind without one shows
    nothing. Only GPU rows are sorted (instances stay under their GPU): by ``sort``, else by the
    GPU column's own sort."""
    gpu = kinds.get(GpuRow)
    sort_gpu = sort if sort is not None else (gpu.sort if gpu is not None else None)

    def part(attr: str, default: Any) -> Callable[[Any], Any] | None:
        reads = {kind: getattr(c, attr) for kind, c in kinds.items() if getattr(c, attr)}
        return by_kind(reads, default) if reads else None

    return Column(
        key,
        label,
        by_kind({kind: c.cell for kind, c in kinds.items()}),
        by_kind({GpuRow: sort_gpu}, None) if sort_gpu is not None else (lambda r: None),
        style=part("style", None),
        parts=part("parts", ()),
        gauge=part("gauge", None),
        kinds=dict(kinds),
        **options,
    )


# Cells only the tree has: its id column tells the kinds apart (v for a vGPU, GI for a MIG
# instance), a GPU's product without the vendor, how many of its vGPUs run unlicensed, a
# MIG instance's compute instances and GPM pair, a vGPU's alarms, a GPU's UUID.
_TREE_VGPU_ID: Column[VgpuRow] = Column(
    "vgpu", "vGPU", lambda r: f"v{r.vgpu_id}", lambda r: r.vgpu_id
)
_TREE_GI: Column[MigRow] = Column(
    "gi", "GI", lambda r: f"GI{r.gpu_instance_id}", lambda r: r.gpu_instance_id
)
_TREE_GPU_NAME: Column[GpuRow] = Column(
    "name", "name", lambda r: f.or_dash(r.name).removeprefix("NVIDIA "), lambda r: r.name
)
_GPU_LICENSES: Column[GpuRow] = Column(
    "license",
    "license",
    _gpu_licenses,
    lambda r: r.unlicensed,
    style=lambda r: WARNING if r.unlicensed else None,
)
_MIG_CIS: Column[MigRow] = Column(
    "ci", "CIs", lambda r: f"{r.compute_instances} CI", lambda r: r.compute_instances
)
_MIG_GPM: Column[MigRow] = Column(
    "gpm", "GPM sm/dram", lambda r: f"{f.pct(r.sm_active)}/{f.pct(r.dram_active)}", lambda r: None
)
_VGPU_ALARMS: Column[VgpuRow] = Column(
    "badges", "alarms", lambda r: "", lambda r: None, parts=_vgpu_badges
)
_GPU_UUID: Column[GpuRow] = Column("uuid", "UUID", lambda r: r.uuid, lambda r: r.uuid)

# The host screen's table: GPU rows and, expanded under them, their vGPU or MIG instances. Each
# column holds one meaning for every kind of row (see the module's docstring) and takes each
# kind's cell from that kind's own table.
HOST_TREE_COLUMNS: tuple[Column[Any], ...] = (
    tree_column(
        "index",
        "#",
        {GpuRow: _GPU["index"], VgpuRow: _TREE_VGPU_ID, MigRow: _TREE_GI},
        priority=0,
    ),
    tree_column(
        "name",
        "name/VM",
        {GpuRow: _TREE_GPU_NAME, VgpuRow: _VGPU["vm"], MigRow: _MIG["pod"]},
        priority=1,
    ),
    tree_column(
        "type",
        "mode/type",
        {GpuRow: _GPU["mode"], VgpuRow: _VGPU["type"], MigRow: _MIG["profile"]},
        priority=1,
    ),
    tree_column(
        "license",
        "license",
        {GpuRow: _GPU_LICENSES, VgpuRow: _VGPU["license"]},
        needs=VGPUS,
        priority=1,
        descending=True,
    ),
    tree_column(
        "share",
        "share/due",
        {VgpuRow: _VGPU["share"]},
        sort=lambda r: r.vgpus,
        needs=VGPUS,
        priority=1,
        numeric=True,
    ),
    _pod_column(),
    tree_column(
        "badges",
        "alarms",
        {GpuRow: _GPU["badges"], VgpuRow: _VGPU_ALARMS},
        priority=2,
        descending=True,
    ),
    tree_column(
        "util",
        "util/sm",
        {GpuRow: _GPU["util"], VgpuRow: _VGPU["sm"], MigRow: _MIG["sm"]},
        priority=3,
        gauge_narrow=True,
        numeric=True,
        descending=True,
    ),
    tree_column(
        "memory",
        "memory",
        {GpuRow: _GPU["memory"], VgpuRow: _VGPU["fb"], MigRow: _MIG["memory"]},
        priority=3,
        numeric=True,
        descending=True,
    ),
    tree_column(
        "inst",
        "inst",
        {GpuRow: _GPU["inst"], MigRow: _MIG_CIS},
        priority=4,
        numeric=True,
        descending=True,
    ),
    tree_column(
        "power", "power", {GpuRow: _GPU["power"]}, priority=5, numeric=True, descending=True
    ),
    tree_column("temp", "temp", {GpuRow: _GPU["temp"]}, priority=5, numeric=True, descending=True),
    tree_column(
        "gpm",
        "GPM sm/dram",
        {GpuRow: _GPU["gpm"], MigRow: _MIG_GPM},
        priority=6,
        numeric=True,
        descending=True,
    ),
    tree_column(
        "clock", "SM clock", {GpuRow: _GPU["clock"]}, priority=7, numeric=True, descending=True
    ),
    tree_column("held", "held by", {GpuRow: _GPU["held"]}, priority=7),
    tree_column("uuid", "UUID", {GpuRow: _GPU_UUID, VgpuRow: _VGPU["vmid"]}, priority=9),
)

PROCESS_COLUMNS: tuple[Column[ProcessRow], ...] = (
    Column("pid", "pid", lambda r: str(r.pid), lambda r: r.pid, True, priority=0),
    Column("name", "process", lambda r: f.or_dash(r.name), lambda r: r.name, priority=1),
    Column("user", "user", lambda r: f.or_dash(r.user), lambda r: r.user, priority=2, needs=LOCAL),
    _ratio("cpu", "CPU", lambda r: r.cpu, priority=3, needs=LOCAL),
    Column(
        "rss",
        "host mem",
        lambda r: f.size(r.host_memory),
        lambda r: r.host_memory,
        priority=4,
        needs=LOCAL,
        numeric=True,
        descending=True,
    ),
    Column("kind", "kind", lambda r: r.kind, lambda r: r.kind, priority=4),
    Column("where", "on", lambda r: f.or_dash(r.where), lambda r: r.where, priority=3),
    Column(
        "memory",
        "GPU mem",
        lambda r: f.size(r.memory),
        lambda r: r.memory,
        priority=1,
        numeric=True,
        descending=True,
    ),
    Column(
        "sm", "sm", lambda r: f.pct(r.sm), lambda r: r.sm, priority=2, numeric=True, descending=True
    ),
    _ratio("mem", "mem", lambda r: r.memory_util, wide=True, priority=5),
    Column(
        "command",
        "command line",
        lambda r: f.or_dash(r.command),
        lambda r: r.command,
        priority=8,
        needs=LOCAL,
    ),
    Column(
        "idle",
        "idle",
        lambda r: f"idle {f.duration(r.idle_seconds)}" if r.idle else "",
        lambda r: r.idle_seconds if r.idle else None,
        priority=1,
        needs=IDLE,
        descending=True,
        style=lambda r: WARNING if r.idle else None,
    ),
)


def _starved_count(r: SchedulerRow) -> str:
    """How many of its vGPUs are starved; ``?`` where some have no verdict and none is starved."""
    if r.starved:
        return str(r.starved)
    return "?" if r.undecided else f.DASH


SCHEDULER_COLUMNS: tuple[Column[SchedulerRow], ...] = (
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column(
        "gi",
        "GI",
        lambda r: f.or_dash(r.gpu_instance_id),
        lambda r: r.gpu_instance_id,
        True,
        priority=3,
    ),
    Column("policy", "policy", lambda r: f.or_dash(r.policy), lambda r: r.policy, priority=1),
    Column("arr", "ARR", lambda r: f.flag(r.arr), lambda r: r.arr, priority=4),
    Column(
        "slice",
        "time slice",
        lambda r: f.duration(r.timeslice),
        lambda r: r.timeslice,
        True,
        priority=3,
    ),
    Column(
        "avg",
        "avg factor",
        lambda r: f.or_dash(r.average_factor),
        lambda r: r.average_factor,
        True,
        wide=True,
        priority=6,
    ),
    Column(
        "vgpus",
        "vGPUs",
        lambda r: str(r.vgpus),
        lambda r: r.vgpus,
        priority=2,
        numeric=True,
        descending=True,
    ),
    Column(
        "log",
        "log (missed)",
        lambda r: f"{r.log_entries} ({r.log_missed})",
        lambda r: r.log_entries,
        wide=True,
        priority=6,
        numeric=True,
        descending=True,
    ),
    Column(
        "starved",
        "starved",
        _starved_count,
        lambda r: r.starved,
        priority=1,
        style=lambda r: ERROR if r.starved else (DIM if r.undecided else None),
        numeric=True,
        descending=True,
    ),
)

# The encoder engines' part of the scheduler screen (R590+): the same verdict per engine.
ENCODER_SHARE_COLUMNS: tuple[Column[EncoderShareRow], ...] = (
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column("vgpu", "vGPU", lambda r: str(r.vgpu_id), lambda r: r.vgpu_id, True, priority=0),
    Column("vm", "VM", lambda r: f.or_dash(r.vm), lambda r: r.vm, priority=1),
    Column("engine", "engine", lambda r: r.engine, lambda r: r.engine, priority=1),
    _ratio("got", "received", lambda r: r.received, priority=1),
    _ratio("waited", "held off", lambda r: r.waited, priority=3),
    _ratio("due", "due", lambda r: r.due, priority=1),
    Column(
        "starved",
        "verdict",
        lambda r: f.share_state(r.share_state),
        lambda r: r.starved,
        priority=1,
        descending=True,
        style=lambda r: ERROR if r.starved else (DIM if r.share_state != "ok" else None),
    ),
)

# The per-vGPU part of the scheduler screen: what each vGPU received against its due.
SHARE_COLUMNS: tuple[Column[VgpuRow], ...] = (
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column("vgpu", "vGPU", lambda r: str(r.vgpu_id), lambda r: r.vgpu_id, True, priority=0),
    Column("vm", "VM", _short_vm, lambda r: r.vm, priority=1),
    Column("type", "type", lambda r: f.vgpu_type(r.type_name), lambda r: r.type_name, priority=3),
    Column("policy", "policy", lambda r: f.or_dash(r.policy), lambda r: r.policy, priority=5),
    Column(
        "sm", "sm", lambda r: f.pct(r.sm), lambda r: r.sm, priority=4, numeric=True, descending=True
    ),
    _ratio("got", "received", lambda r: r.received, priority=1),
    _ratio("due", "due", lambda r: r.due, priority=1),
    Column(
        "starved",
        "verdict",
        lambda r: f.share_state(r.share_state),
        lambda r: r.starved,
        priority=1,
        descending=True,
        style=lambda r: ERROR if r.starved else (DIM if r.share_state != "ok" else None),
    ),
)

LICENSE_COLUMNS: tuple[Column[LicenseRow], ...] = (
    Column("host", "host", lambda r: r.host, lambda r: r.host, wide=True, priority=2),
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column("subject", "vGPU", lambda r: r.subject, lambda r: r.subject, True, priority=0),
    Column("vm", "VM", lambda r: f.or_dash(r.vm), lambda r: r.vm, priority=1),
    Column(
        "type",
        "type",
        lambda r: f.vgpu_type(r.type_name),
        lambda r: r.type_name,
        wide=True,
        priority=4,
    ),
    Column(
        "state",
        "state",
        lambda r: f.license_state(r.state),
        lambda r: r.urgency,
        priority=1,
        style=lambda r: _unlicensed_style(r.state),
    ),
    Column(
        "expires",
        "expires",
        lambda r: _expires(r.expiry, r.expires_in, r.expiry_status),
        lambda r: r.urgency,
        priority=1,
    ),
    Column(
        "product",
        "product",
        lambda r: f.or_dash(r.product),
        lambda r: r.product,
        wide=True,
        priority=5,
    ),
)


def _host_state(r: HostRow) -> str:
    """A host's state; ``(stale)`` where a host that is up shows its last good reading (an
    unreachable host's data is its last known by definition)."""
    return r.state + (" (stale)" if r.stale and r.state != "unreachable" else "")


HOST_COLUMNS: tuple[Column[HostRow], ...] = (
    Column("host", "host", lambda r: r.host, lambda r: r.host, priority=0),
    Column(
        "state",
        "state",
        _host_state,
        lambda r: r.state,
        priority=1,
        style=lambda r: ERROR if r.state == "unreachable" else None,
        width=len("unreachable"),
    ),
    Column(
        "gpus",
        "GPUs",
        lambda r: str(r.gpus) if r.gpus else f.DASH,
        lambda r: r.gpus,
        priority=3,
        numeric=True,
        descending=True,
    ),
    Column(
        "modes", "modes", lambda r: r.modes_label, lambda r: r.modes_label, wide=True, priority=6
    ),
    _ratio("util", "util", lambda r: r.utilization, gauge=True, priority=4, gauge_narrow=True),
    Column(
        "memory",
        "memory",
        lambda r: f.used_total(r.memory_used, r.memory_total),
        lambda r: r.memory_ratio,
        priority=5,
        gauge=lambda r: r.memory_ratio,
        numeric=True,
        descending=True,
    ),
    Column(
        "power",
        "power",
        lambda r: f.power_of_limit(r.power, r.power_limit),
        lambda r: r.power,
        wide=True,
        priority=6,
        numeric=True,
        descending=True,
    ),
    Column(
        "vgpus",
        "vGPUs",
        lambda r: str(r.vgpus) if r.vgpus else f.DASH,
        lambda r: r.vgpus,
        priority=3,
        numeric=True,
        descending=True,
    ),
    Column(
        "lic",
        "lic!",
        lambda r: str(r.license_problems) if r.license_problems else f.DASH,
        lambda r: r.license_problems,
        priority=1,
        style=lambda r: WARNING if r.license_problems else None,
        numeric=True,
        descending=True,
    ),
    Column(
        "xid",
        "Xid",
        lambda r: str(r.xid) if r.xid else f.DASH,
        lambda r: r.xid,
        priority=1,
        style=lambda r: ERROR if r.xid else None,
        numeric=True,
        descending=True,
    ),
    Column(
        "lost",
        "lost",
        lambda r: str(r.lost) if r.lost else f.DASH,
        lambda r: r.lost,
        priority=1,
        style=lambda r: ERROR if r.lost else None,
        numeric=True,
        descending=True,
    ),
    _cc_column(priority=3),
    Column(
        "note",
        "note",
        lambda r: f.or_dash(r.error) if r.error else labels(r.badges),
        lambda r: r.error or "",
        wide=True,
        priority=2,
        parts=lambda r: [(f.or_dash(r.error), ERROR)] if r.error else _badge_parts(r.badges),
    ),
)


def _gpu_index_column() -> Column[Any]:
    """Which GPU an instance or process is on (tables that list them for a whole host)."""
    return Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0)


# What holds a host's GPUs, listed for the whole host under its GPU table.
HOST_VGPU_COLUMNS: tuple[Column[Any], ...] = (_gpu_index_column(), *VGPU_COLUMNS)
HOST_MIG_COLUMNS: tuple[Column[Any], ...] = (_gpu_index_column(), *MIG_COLUMNS)
HOST_PROCESS_COLUMNS: tuple[Column[Any], ...] = (_gpu_index_column(), *PROCESS_COLUMNS)


# The VMs a hypervisor's process list shows (process rows of kind vm: an agentless ESXi host's
# VMs by world ID, name and the framebuffer each holds).
def _vm_column(key: str, label: str, priority: int) -> Column[Any]:
    """A process column under the name it has for a VM (the process name is the VM's name)."""
    column = next(c for c in PROCESS_COLUMNS if c.key == key)
    return dataclasses.replace(column, label=label, priority=priority)


HOST_VM_COLUMNS: tuple[Column[Any], ...] = (
    _gpu_index_column(),
    _vm_column("name", "VM", 0),
    _vm_column("memory", "framebuffer", 0),
    _vm_column("pid", "VM id", 1),
)


# Every holder of a host's GPUs in one table where kinds mix (a vGPU host's VMs beside a MIG GPU's
# instances and a bare-metal GPU's processes): each column is made of the kinds' own columns, so
# a cell is defined once, in its kind's table.
_PROCESS = _by_key(PROCESS_COLUMNS)
_HOLDER_KIND: dict[type, str] = {VgpuRow: "vGPU", MigRow: "MIG"}


def holder_kind(row: Any) -> str:
    """What a holder is: ``vGPU``, ``MIG``, or a process's kind (compute, graphics, vm)."""
    return _HOLDER_KIND.get(type(row)) or str(getattr(row, "kind", ""))


def holder_column(
    key: str,
    label: str,
    kinds: dict[type, Column[Any]],
    *,
    sort: dict[type, Callable[[Any], Any]] | None = None,
    **options: Any,
) -> Column[Any]:
    """A column of the mixed holders' table: each row's cell, style, badges and sort are its
    kind's column's (``sort`` where the kinds' own sorts are not alike: a framebuffer's ratio
    against a process's bytes); a kind without one shows nothing. Gauges only where every kind
    has one (a process's memory has no total: an empty gauge would read as unknown)."""

    def part(attr: str, default: Any) -> Callable[[Any], Any] | None:
        reads = {kind: getattr(c, attr) for kind, c in kinds.items() if getattr(c, attr)}
        return by_kind(reads, default) if reads else None

    gauges = [c.gauge for c in kinds.values()]
    sorts = sort if sort is not None else {kind: c.sort for kind, c in kinds.items()}
    return Column(
        key,
        label,
        by_kind({kind: c.cell for kind, c in kinds.items()}),
        by_kind(sorts, None),
        style=part("style", None),
        parts=part("parts", ()),
        gauge=part("gauge", None) if all(gauges) else None,
        kinds=dict(kinds),
        **options,
    )


HOST_HOLDER_COLUMNS: tuple[Column[Any], ...] = (
    _gpu_index_column(),
    Column("kind", "kind", holder_kind, holder_kind, priority=0),
    holder_column(
        "id",
        "id",
        {VgpuRow: _VGPU["vgpu"], MigRow: _MIG["gi"], ProcessRow: _PROCESS["pid"]},
        numeric=True,
        priority=1,
    ),
    holder_column(
        "holder",
        "VM/pod/process",
        {VgpuRow: _VGPU["vm"], MigRow: _MIG["pod"], ProcessRow: _PROCESS["name"]},
        priority=1,
    ),
    holder_column(
        "type", "type/profile", {VgpuRow: _VGPU["type"], MigRow: _MIG["profile"]}, priority=2
    ),
    holder_column(
        "memory",
        "memory",
        {VgpuRow: _VGPU["fb"], MigRow: _MIG["memory"], ProcessRow: _PROCESS["memory"]},
        # Bytes held, alike for every kind (their own tables sort vGPUs and MIG instances by
        # the ratio of theirs they use).
        sort={
            VgpuRow: lambda r: r.framebuffer_used,
            MigRow: lambda r: r.memory_used,
            ProcessRow: lambda r: r.memory,
        },
        numeric=True,
        descending=True,
        priority=2,
    ),
    holder_column(
        "sm",
        "sm",
        {VgpuRow: _VGPU["sm"], MigRow: _MIG["sm"], ProcessRow: _PROCESS["sm"]},
        numeric=True,
        descending=True,
        priority=3,
    ),
    holder_column("license", "license", {VgpuRow: _VGPU["license"]}, priority=4, needs=VGPUS),
)


# --------------------------------------------------------------------------- usage, contention


def _amount(value: float | None) -> str:
    """GPU-hours, GiB-hours, kWh: two decimals, small amounts to two significant digits."""
    if value is None:
        return f.DASH
    if value == 0 or abs(value) >= 0.01:
        return f"{value:,.2f}"
    return f"{value:.2g}"


def _usage_column(key: str, label: str, read: Callable[[UsageLine], float | None]) -> Column[Any]:
    return Column(
        key,
        label,
        lambda r: _amount(read(r)),
        read,
        numeric=True,
        descending=True,
        priority=1,
    )


USAGE_COLUMNS: tuple[Column[UsageLine], ...] = (
    Column("name", "who", lambda r: r.name, lambda r: r.name, priority=0),
    _usage_column("gpu_hours", "GPU-hours", lambda r: r.gpu_hours),
    _ratio("share", "share", lambda r: r.share, gauge=True, priority=3),
    _usage_column("memory", "GiB-hours", lambda r: r.memory_gib_hours),
    _usage_column("energy", "kWh", lambda r: r.energy_kwh),
)


def _starved_vgpu(r: ContentionLine) -> str:
    return f"{r.vgpu_id} {f.or_dash(r.vm)}"


def _neighbour(r: ContentionLine) -> str:
    return f.DASH if r.neighbour is None else f"{r.neighbour} {f.or_dash(r.neighbour_vm)}"


CONTENTION_COLUMNS: tuple[Column[ContentionLine], ...] = (
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column(
        "starved",
        "starved vGPU",
        _starved_vgpu,
        lambda r: r.vgpu_id,
        priority=0,
        style=lambda r: ERROR,
    ),
    Column(
        "ran",
        "ran/due",
        lambda r: f"{f.pct(r.ran)}/{f.pct(r.due)}",
        lambda r: r.ran,
        numeric=True,
        priority=1,
    ),
    Column("waited", "waited", lambda r: f.pct(r.waited), lambda r: r.waited, True, priority=3),
    Column("neighbour", "ran above due", _neighbour, lambda r: r.neighbour, priority=0),
    Column(
        "above",
        "by",
        lambda r: f"+{f.pct(r.above)}" if r.above is not None else f.DASH,
        lambda r: r.above,
        numeric=True,
        descending=True,
        priority=1,
        style=lambda r: WARNING if r.above else None,
    ),
)


# --------------------------------------------------------------------------- capacity

# MIG-backed vGPUs per GPU instance (the capacity screen's second table).
GI_VGPU_COLUMNS: tuple[Column[GiVgpuRow], ...] = (
    Column("host", "host", lambda r: r.host, lambda r: r.host, priority=0),
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column(
        "gi", "GI", lambda r: str(r.gpu_instance_id), lambda r: r.gpu_instance_id, True, priority=0
    ),
    Column("profile", "profile", lambda r: f.or_dash(r.profile), lambda r: r.profile, priority=2),
    Column("running", "vGPUs", lambda r: str(r.running), lambda r: r.running, True, priority=1),
    Column(
        "mixed",
        "mixed",
        lambda r: f.DASH if r.mixed is None else ("yes" if r.mixed else "no"),
        lambda r: r.mixed,
        priority=3,
    ),
    Column(
        "fits",
        "more that fit",
        lambda r: r.fits_label,
        lambda r: r.room,
        priority=0,
        descending=True,
        style=lambda r: GOOD if r.room else WARNING,
    ),
)

# The capacity screen's matrix: one row per vGPU type or MIG profile, a column per host
# (:func:`capacity_host_column`) after these.
CAPACITY_COLUMNS: tuple[Column[CapacityRow], ...] = (
    Column("name", "type/profile", lambda r: r.name, lambda r: (r.kind, r.size_bytes), priority=0),
    Column("kind", "kind", lambda r: r.kind, lambda r: r.kind, priority=3),
    Column(
        "fleet",
        "fit now",
        lambda r: str(r.total),
        lambda r: r.total,
        priority=0,
        numeric=True,
        descending=True,
        style=lambda r: GOOD if r.total else WARNING,
    ),
    Column(
        "room",
        "hosts",
        lambda r: f"{r.hosts_with_room}/{len(r.per_host)}",
        lambda r: r.hosts_with_room,
        priority=2,
        numeric=True,
        descending=True,
    ),
)


def _count(n: int | None, offered: bool) -> str:
    if not offered:
        return f.DASH
    return "?" if n is None else str(n)


def capacity_host_column(host: str) -> Column[CapacityRow]:
    """How many more of the row's type fit on ``host`` (— where none of its GPUs offers it, ?
    where the driver could not count)."""
    return Column(
        f"host:{host}",
        host,
        lambda r: _count(r.on(host), r.offered_on(host)),
        lambda r: r.on(host),
        priority=1,
        numeric=True,
        descending=True,
        style=lambda r: GOOD if r.on(host) else (DIM if r.offered_on(host) else None),
    )


def _left(r: FitRow) -> str:
    if r.remaining_after is None:
        return f.DASH
    if r.kind == MIG:
        return f"{r.remaining_after} slice" + ("" if r.remaining_after == 1 else "s")
    return f.size(r.remaining_after)


# Where one more of a type fits (``fits:TYPE``), best fit first.
FIT_COLUMNS: tuple[Column[FitRow], ...] = (
    Column("rank", "#", lambda r: str(r.rank), lambda r: r.rank, True, priority=0),
    Column("host", "host", lambda r: r.host, lambda r: r.host, priority=0),
    Column("gpu", "GPU", lambda r: str(r.gpu_index), lambda r: r.gpu_index, True, priority=0),
    Column("name", "type/profile", lambda r: r.name, lambda r: r.name, priority=1),
    Column(
        "more",
        "fit now",
        lambda r: str(r.creatable),
        lambda r: r.creatable,
        priority=1,
        numeric=True,
        descending=True,
    ),
    Column(
        "left",
        "left after one",
        _left,
        lambda r: r.remaining_after,
        priority=1,
        numeric=True,
    ),
    Column("kind", "kind", lambda r: r.kind, lambda r: r.kind, priority=4),
    Column("uuid", "UUID", lambda r: r.gpu_uuid, lambda r: r.gpu_uuid, wide=True, priority=9),
)
