"""One host: a row per GPU, each expandable in place into its MIG or vGPU instances.

``l``/→ expands the highlighted GPU, ``h``/← folds it, ``t`` expands all (tree), Enter opens the
GPU's detail screen. GPU and instance rows share one set of columns, each holding one meaning for
every kind of row (:data:`vgpumon.view.columns.HOST_TREE_COLUMNS`).

With a filter, a GPU stays when it or one of its instances matches, and an
expanded GPU shows only the matching instances.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.widgets import Static

from vgpumon.feed import HostUpdate
from vgpumon.model import Gpu, Snapshot
from vgpumon.sources.history import gpu_entity
from vgpumon.text import printable
from vgpumon.tui.cells import CellCache, Layout, Palette, row_cells, table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.state import TopState
from vgpumon.tui.widgets.graph import Graph
from vgpumon.tui.widgets.keyed_table import Cells, KeyedTable
from vgpumon.view import format as f
from vgpumon.view import rows as vr
from vgpumon.view.columns import (
    HOST_MIG_COLUMNS,
    HOST_PROCESS_COLUMNS,
    HOST_TREE_COLUMNS,
    HOST_VGPU_COLUMNS,
    HOST_VM_COLUMNS,
    LOCAL,
    Column,
    present,
)
from vgpumon.view.filter import Query


def host_title(host: str, vapp_hosts: Mapping[str, HostUpdate], multi: bool) -> Text:
    update = vapp_hosts.get(host)
    text = Text()
    if multi:
        text.append(f"{printable(host)}  ", style="bold")
    if update is None:
        return text.append("waiting for the first reading…")
    text.append(update.state.value, style="bold" if update.state.value == "up" else "bold red")
    if update.error:
        text.append(f"  {printable(update.error)}", style="red")
    snap = update.snapshot
    if snap is not None:
        d = snap.driver
        text.append(
            printable(
                f"  {snap.source}  driver {f.or_dash(d.driver_version)}"
                f"  CUDA {f.or_dash(d.cuda_driver_version)}"
            )
        )
        if snap.health.wedged:
            text.append("  sampler wedged", style="bold red")
        if update.stale:
            text.append("  (last known data)", style="yellow")
    return text


TREE_MID, TREE_LAST = "├ ", "└ "


def _tree_cells(cells: Cells, last: bool) -> Cells:
    """An instance row's cells with the tree's branch in front of its first cell."""
    first = cells[0]
    branch = Text(TREE_LAST if last else TREE_MID, style="dim")
    if isinstance(first, Text):
        branch.append_text(first)
    return (branch, *cells[1:])


def gpu_table_rows(
    host: str,
    snap: Snapshot,
    query: Query,
    expanded: set[str],
    tree: bool,
    layout: Layout,
    palette: Palette,
    order: list[vr.GpuRow] | None = None,
    key_prefix: str = "",
    cache: CellCache | None = None,
    vgpus_of: Mapping[str, list[vr.VgpuRow]] | None = None,
) -> tuple[list[Column[Any]], list[tuple[str, Callable[[], Cells]]]]:
    """Columns and rows (GPUs with their expanded instances) of a host's GPU table; every cell,
    a GPU's or an instance's, comes from :data:`HOST_TREE_COLUMNS`."""
    columns = table_columns(HOST_TREE_COLUMNS, layout, present(snap))
    cells_of = cache or CellCache()
    names = tuple(c.key for c in columns)
    gpus = {g.uuid: g for g in snap.gpus}
    out: list[tuple[str, Callable[[], Cells]]] = []
    for row in order if order is not None else vr.gpu_rows(host, snap):
        gpu: Gpu = gpus[row.uuid]
        vgpus = vgpus_of[gpu.uuid] if vgpus_of is not None else vr.vgpu_rows(host, snap, gpu)
        migs = vr.mig_rows(host, gpu, snap)
        children: list[vr.VgpuRow | vr.MigRow] = [*migs, *vgpus]
        if not query.empty:
            own = query.matches(row.fields)
            matching = [c for c in children if query.matches(c.fields)]
            if not own and not matching:
                continue
            if not own:
                children = matching
        out.append(
            (
                key_prefix + row.key,
                functools.partial(cells_of.row, row, columns, layout, palette),
            )
        )
        if children and (tree or row.key in expanded):
            for i, child in enumerate(children):
                last = i == len(children) - 1
                signature = (child, names, layout, palette, last)
                cells = functools.partial(
                    cells_of.get,
                    child.key,
                    signature,
                    functools.partial(
                        lambda c, lst: _tree_cells(row_cells(c, columns, layout, palette), lst),
                        child,
                        last,
                    ),
                )
                out.append((key_prefix + child.key, cells))
    return columns, out


class GpuTable(KeyedTable):
    """The host's GPU table: the arrows expand and fold here (DataTable's own left/right would
    scroll sideways, and a focused widget's bindings win over the screen's)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,l", "screen.expand", "expand", show=False),
        Binding("left,h", "screen.collapse", "fold", show=False),
    ]


@dataclass(frozen=True)
class Holders:
    """One kind of thing that holds a host's GPUs, listed under the GPU table: the first kind the
    host has is shown (a registry: a new kind is one entry)."""

    title: str
    has: Callable[[Snapshot], bool]
    rows: Callable[[TopState, str, Snapshot, Mapping[str, list[vr.VgpuRow]]], Sequence[Any]]
    columns: Sequence[Column[Any]]


def _processes(app: TopState, host: str, snap: Snapshot) -> list[vr.ProcessRow]:
    local = app.local_processes(p.pid for g in snap.gpus for p in g.processes or ())
    return [p for g in snap.gpus for p in vr.process_rows(host, g, local)]


HOLDERS: tuple[Holders, ...] = (
    Holders(
        "VMs on the GPUs (vGPU instances)",
        lambda snap: any(g.vgpu_instances for g in snap.gpus),
        lambda app, host, snap, vgpus_of: [v for g in snap.gpus for v in vgpus_of[g.uuid]],
        HOST_VGPU_COLUMNS,
    ),
    Holders(
        # An agentless hypervisor (ESXi) lists its VMs as processes: name and framebuffer, by
        # world ID, also when its vGPU report is missing.
        "VMs on the GPUs (the hypervisor's process list)",
        lambda snap: any(p.kind == "vm" for g in snap.gpus for p in g.processes or ()),
        lambda app, host, snap, _v: [r for r in _processes(app, host, snap) if r.kind == "vm"],
        HOST_VM_COLUMNS,
    ),
    Holders(
        "MIG instances",
        lambda snap: any(g.mig_instances for g in snap.gpus),
        lambda app, host, snap, _v: [m for g in snap.gpus for m in vr.mig_rows(host, g, snap)],
        HOST_MIG_COLUMNS,
    ),
    Holders(
        "Processes on the GPUs",
        lambda snap: True,
        lambda app, host, snap, _v: _processes(app, host, snap),
        HOST_PROCESS_COLUMNS,
    ),
)
GRAPHED_GPUS = 4  # live util graphs of the first GPUs, when the terminal has the rows
GRAPHS_FROM_HEIGHT = 32


class HostScreen(LiveScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "open GPU"),
        Binding("l,right", "expand", "expand"),
        Binding("h,left", "collapse", "fold"),
        Binding("K", "signal", "signal", show=False),
    ]

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host
        self.expanded: set[str] = set()

    def compose_body(self) -> ComposeResult:
        yield Static(id="title", classes="title")
        yield GpuTable(id="gpus")
        yield Static(id="holders-title", classes="section")
        yield KeyedTable(id="holders")
        with Grid(id="host-graphs"):
            for i in range(GRAPHED_GPUS):
                yield Graph(f"GPU {i} util", f.pct, window=self.vapp.graph_window, id=f"h-util-{i}")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(KeyedTable).focus()

    def draw(self) -> None:
        app = self.vapp
        self.query_one("#title", Static).update(host_title(self.host, app.hosts, app.multi_host))
        update = app.hosts.get(self.host)
        table = self.query_one("#gpus", KeyedTable)
        if update is None or update.snapshot is None:
            table.sync([("index", "#")], [])
            return
        snap = update.snapshot
        vgpus_of = {g.uuid: vr.vgpu_rows(self.host, snap, g) for g in snap.gpus}
        gpu_rows = [vr.gpu_row(self.host, snap, g, vgpus_of[g.uuid]) for g in snap.gpus]
        rows = self.sorted_rows(gpu_rows, HOST_TREE_COLUMNS)
        columns, cells = gpu_table_rows(
            self.host,
            snap,
            app.filter_query,
            self.expanded,
            app.tree_mode,
            self.layout_now,
            app.palette,
            order=rows,
            cache=self.cell_cache,
            vgpus_of=vgpus_of,
        )
        self.fill(table, columns, cells, main=True)
        self.set_class(app.tree_mode, "-tree")
        if not app.tree_mode:
            self._draw_holders(snap, vgpus_of)
            self._draw_graphs(snap)

    def _draw_holders(self, snap: Snapshot, vgpus_of: Mapping[str, list[vr.VgpuRow]]) -> None:
        holders = next(h for h in HOLDERS if h.has(snap))
        query = self.vapp.filter_query
        rows = [
            r for r in holders.rows(self.vapp, self.host, snap, vgpus_of) if query.matches(r.fields)
        ]
        has = present(snap) | ({LOCAL} if self.vapp.proc_table is not None else set())
        columns = table_columns(holders.columns, self.layout_now, frozenset(has))
        self.query_one("#holders-title", Static).update(Text(holders.title))
        self.fill(
            self.query_one("#holders", KeyedTable),
            columns,
            [(r.key, self.cells(r, columns)) for r in rows],
        )

    def _draw_graphs(self, snap: Snapshot) -> None:
        grid = self.query_one("#host-graphs", Grid)
        grid.display = self.size.height >= GRAPHS_FROM_HEIGHT and bool(snap.gpus)
        if not grid.display:
            return
        hist = self.vapp.history
        for i, graph in enumerate(self.query(Graph)):
            gpu = snap.gpus[i] if i < len(snap.gpus) else None
            graph.display = gpu is not None
            if gpu is not None:
                graph.title = f"GPU {gpu.index} util"
                series = hist.series(self.host, gpu_entity(gpu.uuid), "util")
                graph.show(series, snap.timestamp, 1.0, stale=not gpu.up)

    def _gpu_key(self) -> str | None:
        """The GPU row key under the cursor (an instance row counts as its GPU)."""
        key = self.query_one("#gpus", KeyedTable).highlighted_key
        if key is None:
            return None
        parts = key.split("/")
        return "/".join(parts[:2]) if len(parts) >= 2 else key

    def action_expand(self) -> None:
        key = self._gpu_key()
        if key is not None:
            self.expanded.add(key)
            self.refresh_data()

    def action_collapse(self) -> None:
        key = self._gpu_key()
        if key is not None:
            self.expanded.discard(key)
            self.refresh_data()
            table = self.query_one("#gpus", KeyedTable)
            if key in table.held_keys:
                table.move_cursor(row=table.held_keys.index(key))

    def action_signal(self) -> None:
        self.signal_process("holders")

    def action_open(self) -> None:
        key = self._gpu_key()
        if key is None:
            return
        from vgpumon.tui.screens.gpu import GpuScreen

        self.app.push_screen(GpuScreen(self.host, key.split("/", 1)[1]))

    def on_data_table_row_selected(self) -> None:
        self.action_open()
