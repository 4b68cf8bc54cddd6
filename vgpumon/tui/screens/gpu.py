"""One GPU: fixed-axis history graphs, its vGPU or MIG table, the chosen instance's graphs, and
its processes.

Graph axes are fixed: ratios on 0-100 %, power on 0 to the board's limit, memory on 0 to its size,
temperature on 0-100 °C, so the height of a line means the same thing on every screen and at every
moment. The instance graphs follow the highlighted row of the vGPU or MIG table.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid, VerticalScroll
from textual.widgets import Static

from vgpumon.model import Gpu
from vgpumon.sources.history import gpu_entity, mig_entity, vgpu_entity
from vgpumon.text import printable
from vgpumon.tui.cells import badges_text, table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.graph import Graph
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import format as f
from vgpumon.view import rows as vr
from vgpumon.view.columns import LOCAL, MIG_COLUMNS, PROCESS_COLUMNS, VGPU_COLUMNS, present

TEMPERATURE_TOP = 100.0  # °C: the top of the temperature axis (GPUs throttle well below)


def _gib(v: float | None) -> str:
    return f.DASH if v is None else f"{v / f.GIB:.0f}G"


def _w(v: float | None) -> str:
    return f.DASH if v is None else f"{v:.0f}W"


def _c(v: float | None) -> str:
    return f.DASH if v is None else f"{v:.0f}°C"


# (widget id, title, formatter, metric, metric whose latest value is the axis top or a fixed top)
GPU_GRAPHS = (
    ("g-util", "util", f.pct, "util", 1.0),
    ("g-mem", "memory", _gib, "memory_used", "memory_total"),
    ("g-power", "power", _w, "power", "power_limit"),
    ("g-temp", "temp", _c, "temperature", TEMPERATURE_TOP),
    ("g-sm", "GPM sm", f.pct, "gpm_sm", 1.0),
    ("g-dram", "GPM dram", f.pct, "gpm_dram", 1.0),
    ("g-tensor", "GPM tensor", f.pct, "gpm_tensor", 1.0),
)


class GpuScreen(LiveScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("K", "signal", "signal", show=False)]

    def __init__(self, host: str, uuid: str) -> None:
        super().__init__()
        self.host = host
        self.uuid = uuid

    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="title", classes="title")
            with Grid(id="graphs"):
                for wid, title, fmt, _metric, top in GPU_GRAPHS:
                    hi = top if isinstance(top, float) else None
                    yield Graph(title, fmt, hi=hi, window=self.vapp.graph_window, id=wid)
            yield Static("vGPU instances", id="vgpu-title", classes="section")
            yield KeyedTable(id="vgpus", classes="inner")
            yield Static("MIG instances", id="mig-title", classes="section")
            yield KeyedTable(id="migs", classes="inner")
            with Grid(id="instance-graphs"):
                yield Graph("instance sm", f.pct, window=self.vapp.graph_window, id="i-sm")
                yield Graph("instance memory", _gib, window=self.vapp.graph_window, id="i-mem")
            yield Static("Processes", classes="section")
            yield KeyedTable(id="procs", classes="inner")

    def on_mount(self) -> None:
        super().on_mount()
        self._focus_instances()

    def _focus_instances(self) -> None:
        """Focus the vGPU or MIG table (whichever the GPU has), not scrolling the graphs away."""
        focused = self.focused
        if isinstance(focused, KeyedTable) and focused.display and focused.row_count:
            return
        tables = [t for t in self.query(KeyedTable) if t.display and t.row_count]
        if tables:
            self.set_focus(tables[0], scroll_visible=False)

    def draw(self) -> None:
        app = self.vapp
        update = app.hosts.get(self.host)
        snap = None if update is None else update.snapshot
        gpu = None if snap is None else snap.gpu(self.uuid)
        title = self.query_one("#title", Static)
        built = app.rows(self.host)
        if snap is None or gpu is None or built is None:
            self.show(title, Text("this GPU is not in the newest reading"))
            return
        row = next(r for r in built.gpus if r.uuid == gpu.uuid)
        # Text, not markup: "[lost]" and a driver's own strings show as written.
        # Alarms before the UUID, which is the first thing to wrap on a narrow terminal.
        head = Text(printable(f"GPU {row.index}  {f.or_dash(row.name)}  {row.mode_label}"))
        if row.cc not in (None, "off"):
            warn = row.cc in ("not ready", "devtools")
            head.append(printable(f"  CC {row.cc}"), style=app.palette.warning if warn else "")
        if row.badges:
            head.append("  ")
            head.append_text(badges_text(row.badges, app.palette))
        stale = not gpu.up or snap.health.wedged or (update is not None and update.stale)
        if stale:
            head.append("  last known values (stale)", style=app.palette.warning)
        head.append(f"  {printable(row.uuid)}", style=app.palette.dim)
        self.show(title, head)
        now = snap.timestamp
        hist = app.history
        for wid, _title, _fmt, metric, top in GPU_GRAPHS:
            graph = self.query_one(f"#{wid}", Graph)
            hi = (
                top if isinstance(top, float) else hist.latest(self.host, gpu_entity(gpu.uuid), top)
            )
            graph.show(hist.series(self.host, gpu_entity(gpu.uuid), metric), now, hi, stale=stale)
            if wid in ("g-sm", "g-dram", "g-tensor"):
                graph.display = gpu.gpm is not None or any(m.gpm for m in gpu.mig_instances)
        layout = self.layout_now
        query = app.filter_query

        vgpus = built.vgpus(gpu.uuid)
        if not query.empty:
            vgpus = [v for v in vgpus if query.matches(v.fields)]
        vgpus = self.sorted_rows(vgpus, VGPU_COLUMNS)
        vcols = table_columns(VGPU_COLUMNS, layout, present(snap))
        vtable = self.query_one("#vgpus", KeyedTable)
        has_vgpus = bool(gpu.vgpu_instances)
        self.fill(vtable, vcols, self.lazy_cells(vgpus, vcols), main=has_vgpus)
        vtable.display = self.query_one("#vgpu-title").display = has_vgpus

        migs = [m for m in vr.mig_rows(self.host, gpu, snap) if query.matches(m.fields)]
        migs = self.sorted_rows(migs, MIG_COLUMNS)
        mcols = table_columns(MIG_COLUMNS, layout, present(snap))
        mtable = self.query_one("#migs", KeyedTable)
        has_migs = bool(gpu.mig_instances)
        self.fill(mtable, mcols, self.lazy_cells(migs, mcols), main=has_migs)
        mtable.display = self.query_one("#mig-title").display = has_migs

        self._focus_instances()
        self._instance_graphs(vtable if has_vgpus else mtable, now)

        local = app.local_processes(p.pid for p in gpu.processes or ())
        procs = vr.process_rows(self.host, gpu, local)
        has = frozenset({LOCAL}) if local is not None else frozenset()
        pcols = table_columns(PROCESS_COLUMNS, layout, has)
        if not has_vgpus and not has_migs:
            procs = self.sorted_rows(procs, PROCESS_COLUMNS)
        self.fill(
            self.query_one("#procs", KeyedTable),
            pcols,
            self.lazy_cells(procs, pcols),
            main=not has_vgpus and not has_migs,
        )

    def _instance_graphs(self, table: KeyedTable, now: float) -> None:
        grid = self.query_one("#instance-graphs")
        key = table.highlighted_key if table.display else None
        gpu = self._gpu()
        grid.display = key is not None and gpu is not None
        if key is None or gpu is None:
            return
        parts = key.split("/")
        kind, ident = parts[-2], int(parts[-1])
        hist = self.vapp.history
        sm, mem = self.query_one("#i-sm", Graph), self.query_one("#i-mem", Graph)
        if kind == "vgpu":
            entity = vgpu_entity(self.uuid, ident)
            sm.title, mem.title = f"vGPU {ident} sm", f"vGPU {ident} framebuffer"
            vgpu = next((v for v in gpu.vgpu_instances if v.vgpu_id == ident), None)
            total = None if vgpu is None else vgpu.framebuffer_total_bytes
            sm.show(hist.series(self.host, entity, "sm"), now, 1.0)
            mem.show(hist.series(self.host, entity, "framebuffer_used"), now, total)
        else:
            entity = mig_entity(self.uuid, ident)
            sm.title, mem.title = f"GI {ident} GPM sm", f"GI {ident} memory"
            gi = next((m for m in gpu.mig_instances if m.id == ident), None)
            total = None if gi is None else gi.memory_total_bytes
            sm.show(hist.series(self.host, entity, "gpm_sm"), now, 1.0)
            mem.show(hist.series(self.host, entity, "memory_used"), now, total)

    def action_signal(self) -> None:
        self.signal_process("procs")

    def _gpu(self) -> Gpu | None:
        update = self.vapp.hosts.get(self.host)
        return None if update is None or update.snapshot is None else update.snapshot.gpu(self.uuid)

    def on_keyed_table_row_highlighted(self, event: KeyedTable.RowHighlighted) -> None:
        if event.table.id in ("vgpus", "migs"):
            self.refresh_data()
