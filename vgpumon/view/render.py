"""A readable terminal picture of one :class:`Snapshot` (``vgpumon snapshot``'s default output).

Every table is built from the row models and columns of :mod:`vgpumon.view`, the same ones the
terminal UI shows, so the two never disagree. Values never break across lines: number, size and
identifier columns do not wrap, and at 80 columns the tables drop the columns marked ``wide`` and
let only names fold at their spaces; a value cut at a narrow terminal ends in an ellipsis, and
piped or redirected output is never cut at all. Absent values print as an em dash, never as 0.
Sections that would be empty (MIG, processes, vGPU) are left out, so a bare-metal host gets two
short tables.
"""

from __future__ import annotations

import datetime
import io
import sys
from collections.abc import Callable, Sequence

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from vgpumon.model import Snapshot
from vgpumon.text import printable
from vgpumon.view import format as f
from vgpumon.view import rows as r
from vgpumon.view.columns import (
    GPU_COLUMNS,
    HOST_COLUMNS,
    MIG_COLUMNS,
    PROCESS_COLUMNS,
    VGPU_COLUMNS,
    present,
)
from vgpumon.view.tables import HOST, WIDE_AT, row_table, titled_table
from vgpumon.view.vgpu_render import vgpu_extra_tables


def _header(snapshot: Snapshot) -> Text:
    when = datetime.datetime.fromtimestamp(snapshot.timestamp, tz=datetime.timezone.utc)
    d = snapshot.driver
    line = Text()
    line.append(printable(snapshot.source), style="bold")
    versions = (
        f"  driver {f.or_dash(d.driver_version)}  NVML {f.or_dash(d.nvml_version)}"
        f"  CUDA {f.or_dash(d.cuda_driver_version)}"
    )
    line.append(f"{printable(versions)}\n{when:%Y-%m-%d %H:%M:%S} UTC")
    h = snapshot.health
    if h.wedged:
        line.append("  sampler wedged: showing the last good data", style="bold red")
    if h.hung_gpus:
        line.append(printable(f"  hung: {', '.join(h.hung_gpus)}"), style="red")
    return line


def _identity_table(snapshot: Snapshot) -> Table:
    table = titled_table("GPUs", "#", "uuid", "MIG / state")
    table.add_column("name", overflow="fold")
    for g in snapshot.gpus:
        mig = f.flag(g.mig_mode_current, "enabled", "disabled")
        if g.mig_mode_pending is not None and g.mig_mode_pending != g.mig_mode_current:
            mig += f" (pending {f.flag(g.mig_mode_pending, 'enabled', 'disabled')})"
        state = mig if g.up else f"down: {f.or_dash(g.down_reason)}"
        table.add_row(str(g.index), g.uuid, state, f.or_dash(g.name))
    return table


def _activity_table(snapshot: Snapshot, wide: bool) -> Table:
    gpus = r.gpu_rows(HOST, snapshot)
    columns = [c for c in GPU_COLUMNS if c.key != "name"]
    return row_table("Activity", columns, gpus, wide=wide, has=present(snapshot))


def _mig_tables(snapshot: Snapshot, wide: bool) -> list[Table]:
    migs = [(g, m) for g in snapshot.gpus for m in r.mig_rows(HOST, g, snapshot)]
    out: list[Table] = []
    if migs:
        out.append(
            row_table(
                "MIG GPU instances",
                MIG_COLUMNS,
                [m for _, m in migs],
                wide=wide,
                has=present(snapshot),
                lead=("#",),
                lead_cells=[(str(g.index),) for g, _ in migs],
            )
        )
    devices = titled_table("MIG devices", "gpu", "GI", "CI", "MIG UUID", "SMs")
    for g in snapshot.gpus:
        for gi in g.mig_instances:
            for ci in gi.compute_instances:
                devices.add_row(
                    str(g.index),
                    str(gi.id),
                    str(ci.id),
                    f.or_dash(ci.mig_uuid),
                    f.or_dash(ci.sm_count),
                )
    if devices.row_count:
        out.append(devices)
    return out


def _process_table(snapshot: Snapshot, wide: bool) -> Table | None:
    procs = [(g, p) for g in snapshot.gpus for p in r.process_rows(HOST, g)]
    if not procs:
        return None
    return row_table(
        "Processes",
        PROCESS_COLUMNS,
        [p for _, p in procs],
        wide=wide,
        lead=("#",),
        lead_cells=[(str(g.index),) for g, _ in procs],
    )


def _vgpu_tables(snapshot: Snapshot, wide: bool) -> list[Table]:
    out: list[Table] = []
    vgpus = [v for g in snapshot.gpus for v in r.vgpu_rows(HOST, snapshot, g)]
    if vgpus:
        # A one-shot snapshot has no share verdict yet (it needs half a minute of the scheduler's
        # counters: docs/verdicts.md); license state and expiry have their own table below.
        skip = {"share", "license", "expires"}
        columns = [c for c in VGPU_COLUMNS if c.key not in skip]
        out.append(
            row_table(
                "vGPU instances",
                columns,
                vgpus,
                wide=wide,
                has=present(snapshot),
                lead=("#",),
                lead_cells=[(str(v.gpu_index),) for v in vgpus],
            )
        )
    types = titled_table("vGPU types", "gpu", "type id", "framebuffer", "active", "creatable")
    types.add_column("name", overflow="fold")
    if wide:
        types.add_column("class", no_wrap=True)
    for g in snapshot.gpus:
        for t in g.vgpu_types:
            cells = [
                str(g.index),
                str(t.type_id),
                f.size(t.framebuffer_bytes),
                str(t.active_instances),
                f.or_dash(t.creatable_instances) if t.creatable else "no",
                f.or_dash(t.name),
            ]
            if wide:
                cells.append(f.or_dash(t.type_class))
            types.add_row(*cells)
    if types.row_count:
        out.append(types)
    return out


def _footer(snapshot: Snapshot) -> Text | None:
    failed = [c.name for c in snapshot.collectors if not c.success]
    errors = sum(e.count for e in snapshot.nvml_errors)
    if not failed and not errors:
        return None
    line = Text(style="dim")
    if failed:
        line.append(printable(f"collectors failed: {', '.join(failed)}  "))
    if errors:
        line.append(f"NVML errors: {errors} (see --json for the functions)")
    return line


def snapshot_renderable(snapshot: Snapshot, width: int = 80) -> RenderableType:
    wide = width >= WIDE_AT
    parts: list[RenderableType] = [_header(snapshot)]
    if not snapshot.gpus:
        parts.append(Text("no GPUs", style="yellow"))
    else:
        parts.append(_identity_table(snapshot))
        parts.append(_activity_table(snapshot, wide))
    parts.extend(_mig_tables(snapshot, wide))
    processes = _process_table(snapshot, wide)
    if processes is not None:
        parts.append(processes)
    parts.extend(_vgpu_tables(snapshot, wide))
    parts.extend(vgpu_extra_tables(snapshot, wide))  # scheduler and licenses (vgpu_render)
    footer = _footer(snapshot)
    if footer is not None:
        parts.append(footer)
    return Group(*parts)


# Wider than any table: piped or redirected output has no window to fit.
UNLIMITED_WIDTH = 100_000


def render(snapshot: Snapshot, console: Console | None = None) -> None:
    """Print the picture: at a terminal, fitted to its width (a value that does not fit ends in
    an ellipsis, never silently); piped or redirected, every table as wide as its content, so
    no character is lost, and no line padded with spaces."""
    _print(lambda width: snapshot_renderable(snapshot, width), console)


def hosts_renderable(rows: Sequence[r.HostRow], title: str, width: int = 80) -> RenderableType:
    """The fleet as ``top`` lists it first: a row per host, problem hosts first."""
    ordered = sorted(rows, key=r.host_order)
    return row_table(title, HOST_COLUMNS, ordered, wide=width >= WIDE_AT)


def render_hosts(rows: Sequence[r.HostRow], title: str, console: Console | None = None) -> None:
    """Print the fleet table as :func:`render` prints a snapshot."""
    _print(lambda width: hosts_renderable(rows, title, width), console)


def _print(make: Callable[[int], RenderableType], console: Console | None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            buffer = Console(width=UNLIMITED_WIDTH, file=io.StringIO(), color_system=None)
            buffer.print(make(UNLIMITED_WIDTH))
            text = buffer.file.getvalue()  # type: ignore[attr-defined]
            sys.stdout.write("".join(line.rstrip() + "\n" for line in text.splitlines()))
            return
    console.print(make(console.width))
