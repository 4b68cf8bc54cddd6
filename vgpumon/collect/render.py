"""A readable terminal picture of one :class:`Snapshot` (``vgpumon snapshot``'s default output).

Absent values print as an em dash, never as 0 (docs/design.md, rule 4). Sections that would be empty
(MIG, processes, vGPU) are left out, so a bare-metal host gets two short tables.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from vgpumon.model import Gpm, Gpu, Snapshot

DASH = "—"
GIB = 1024**3
MIB = 1024**2


def pct(value: float | None) -> str:
    return DASH if value is None else f"{value * 100:.0f}%"


def gib(value: int | float | None) -> str:
    return DASH if value is None else f"{value / GIB:.1f}"


def used_total(used: int | None, total: int | None) -> str:
    if used is None and total is None:
        return DASH
    return f"{gib(used)}/{gib(total)} GiB"


def watts(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f} W"


def celsius(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f} °C"


def mhz(value: float | None) -> str:
    return DASH if value is None else f"{value / 1e6:.0f}"


def _num(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}"


def text(value: object) -> str:
    return DASH if value is None or value == "" else str(value)


def flag(value: bool | None, yes: str = "on", no: str = "off") -> str:
    return DASH if value is None else (yes if value else no)


def titled_table(title: str, *columns: str) -> Table:
    """A section of the snapshot picture: bold left-aligned title, columns that fold, not cut."""
    table = Table(title=title, title_justify="left", title_style="bold", header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _header(snapshot: Snapshot) -> Text:
    when = datetime.datetime.fromtimestamp(snapshot.timestamp, tz=datetime.timezone.utc)
    d = snapshot.driver
    line = Text()
    line.append(f"{snapshot.source}", style="bold")
    line.append(
        f"  driver {text(d.driver_version)}  NVML {text(d.nvml_version)}"
        f"  CUDA {text(d.cuda_driver_version)}  {when:%Y-%m-%d %H:%M:%S} UTC"
    )
    h = snapshot.health
    if h.wedged:
        line.append("  sampler wedged: showing the last good data", style="bold red")
    if h.hung_gpus:
        line.append(f"  hung: {', '.join(h.hung_gpus)}", style="red")
    return line


def _identity_table(gpus: Iterable[Gpu]) -> Table:
    table = titled_table("GPUs", "#", "name", "uuid", "virtualization", "MIG")
    table.columns[2].no_wrap = True
    for g in gpus:
        mig = flag(g.mig_mode_current, "enabled", "disabled")
        if g.mig_mode_pending is not None and g.mig_mode_pending != g.mig_mode_current:
            mig += f" (pending {flag(g.mig_mode_pending, 'enabled', 'disabled')})"
        state = text(g.virtualization_mode) if g.up else Text(f"down: {text(g.down_reason)}", "red")
        table.add_row(str(g.index), text(g.name), g.uuid, state, mig if g.up else DASH)
    return table


def _activity_table(gpus: Iterable[Gpu]) -> Table:
    table = titled_table(
        "Activity", "#", "util", "mem busy", "memory used/total", "power/limit", "temp gpu/mem",
        "MHz sm/mem", "P", "GPM sm/tensor/dram",
    )  # fmt: skip
    for g in gpus:
        if not g.up:
            continue
        power = watts(g.power_watts)
        if g.power_limit_watts is not None:
            power = f"{_num(g.power_watts)}/{watts(g.power_limit_watts)}"
        table.add_row(
            str(g.index),
            pct(g.utilization.gpu),
            pct(g.utilization.memory),
            used_total(g.memory.used_bytes, g.memory.total_bytes),
            power,
            f"{_num(g.temperatures.gpu_celsius)}/{_num(g.temperatures.memory_celsius)} °C",
            f"{mhz(g.clocks.sm_hertz)}/{mhz(g.clocks.memory_hertz)}",
            DASH if g.performance_state is None else f"P{g.performance_state}",
            _gpm(g.gpm),
        )
    return table


def _gpm(gpm: Gpm | None) -> str:
    if gpm is None:
        return DASH
    return f"{pct(gpm.sm_active)}/{pct(gpm.tensor_active)}/{pct(gpm.dram_active)}"


def _mig_tables(gpus: Iterable[Gpu]) -> list[Table]:
    instances = titled_table(
        "MIG GPU instances", "gpu", "GI", "profile", "placement", "memory used/total",
        "GPM sm", "occupancy", "tensor", "dram",
    )  # fmt: skip
    devices = titled_table("MIG devices", "gpu", "GI", "CI", "MIG UUID", "SMs")
    devices.columns[3].no_wrap = True
    for g in gpus:
        for gi in g.mig_instances:
            placement = (
                DASH
                if gi.placement_start is None
                else f"{gi.placement_start}+{text(gi.placement_size)}"
            )
            gpm = gi.gpm or Gpm()
            instances.add_row(
                str(g.index),
                str(gi.id),
                text(gi.profile_name),
                placement,
                used_total(gi.memory_used_bytes, gi.memory_total_bytes),
                pct(gpm.sm_active),
                pct(gpm.sm_occupancy),
                pct(gpm.tensor_active),
                pct(gpm.dram_active),
            )
            for ci in gi.compute_instances:
                devices.add_row(
                    str(g.index), str(gi.id), str(ci.id), text(ci.mig_uuid), text(ci.sm_count)
                )
    return [t for t in (instances, devices) if t.row_count]


def _process_table(gpus: Iterable[Gpu]) -> Table | None:
    table = titled_table("Processes", "gpu", "pid", "name", "kind", "GI/CI", "memory", "sm util")
    for g in gpus:
        for p in g.processes or ():
            mig = (
                DASH
                if p.gpu_instance_id is None
                else f"{p.gpu_instance_id}/{text(p.compute_instance_id)}"
            )
            memory = DASH if p.used_memory_bytes is None else f"{p.used_memory_bytes / MIB:.0f} MiB"
            table.add_row(
                str(g.index), str(p.pid), text(p.name), p.kind, mig, memory, pct(p.sm_utilization)
            )
    return table if table.row_count else None


def _vgpu_tables(gpus: Iterable[Gpu]) -> list[Table]:
    gpus = list(gpus)
    instances = titled_table(
        "vGPU instances", "gpu", "vgpu id", "type", "vm", "license", "framebuffer", "sm util",
        "enc/dec",
    )  # fmt: skip
    for g in gpus:
        for v in g.vgpu_instances:
            instances.add_row(
                str(g.index),
                str(v.vgpu_id),
                text(v.type_name),
                text(v.vm_id),
                text(v.license.state),
                used_total(v.framebuffer_used_bytes, v.framebuffer_total_bytes),
                pct(v.utilization.sm),
                f"{pct(v.utilization.encoder)}/{pct(v.utilization.decoder)}",
            )
    types = titled_table(
        "vGPU types", "gpu", "type id", "name", "class", "framebuffer", "active", "creatable"
    )
    for g in gpus:
        for t in g.vgpu_types:
            types.add_row(
                str(g.index),
                str(t.type_id),
                text(t.name),
                text(t.type_class),
                f"{gib(t.framebuffer_bytes)} GiB" if t.framebuffer_bytes is not None else DASH,
                str(t.active_instances),
                text(t.creatable_instances) if t.creatable else "no",
            )
    return [t for t in (instances, types) if t.row_count]


def _footer(snapshot: Snapshot) -> Text | None:
    failed = [c.name for c in snapshot.collectors if not c.success]
    errors = sum(e.count for e in snapshot.nvml_errors)
    if not failed and not errors:
        return None
    line = Text(style="dim")
    if failed:
        line.append(f"collectors failed: {', '.join(failed)}  ")
    if errors:
        line.append(f"NVML errors: {errors} (see --json for the functions)")
    return line


def snapshot_renderable(snapshot: Snapshot) -> RenderableType:
    from vgpumon.collect.vgpu_render import vgpu_extra_tables

    parts: list[RenderableType] = [_header(snapshot)]
    if not snapshot.gpus:
        parts.append(Text("no GPUs", style="yellow"))
    else:
        parts.append(_identity_table(snapshot.gpus))
        if any(g.up for g in snapshot.gpus):
            parts.append(_activity_table(snapshot.gpus))
    parts.extend(_mig_tables(snapshot.gpus))
    processes = _process_table(snapshot.gpus)
    if processes is not None:
        parts.append(processes)
    parts.extend(_vgpu_tables(snapshot.gpus))
    parts.extend(vgpu_extra_tables(snapshot.gpus))  # scheduler and licenses (vgpu_render)
    footer = _footer(snapshot)
    if footer is not None:
        parts.append(footer)
    return Group(*parts)


def render(snapshot: Snapshot, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            # Piped or redirected: nobody's window to fit, so do not fold UUIDs at 80 columns.
            console = Console(width=160)
    console.print(snapshot_renderable(snapshot))
