"""One host: a row per GPU, each expandable in place into its MIG or vGPU instances.

``l``/→ expands the highlighted GPU, ``h``/← folds it, ``t`` expands all (tree), Enter opens the
GPU's detail screen. GPU and instance rows share one set of columns, each holding one meaning for
every kind of row (:data:`vgpumon.view.columns.HOST_TREE_COLUMNS`).

With a filter, a GPU stays when it or one of its instances matches, and an
expanded GPU shows only the matching instances.
"""

from __future__ import annotations

import functools
import time
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
from vgpumon.tui.screens.base import LiveScreen, TableSort
from vgpumon.tui.state import TopState
from vgpumon.tui.widgets.graph import Graph
from vgpumon.tui.widgets.keyed_table import Cells, KeyedTable, OpeningTable, Source
from vgpumon.view import format as f
from vgpumon.view import rows as vr
from vgpumon.view.columns import (
    HOST_HOLDER_COLUMNS,
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


def host_title(
    host: str, vapp_hosts: Mapping[str, HostUpdate], multi: bool, palette: Palette
) -> Text:
    update = vapp_hosts.get(host)
    text = Text()
    if multi:
        text.append(f"{printable(host)}  ", style="bold")
    if update is None:
        return text.append("waiting for the first reading…")
    up = update.state.value == "up"
    text.append(update.state.value, style="bold" if up else palette.error)
    if update.error:
        text.append(f"  {printable(update.error)}", style=palette.error)
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
            text.append("  sampler wedged", style=palette.error)
        if update.via is not None:
            # Read from a metrics store: as of the exporter's sample it scraped last.
            when = time.strftime("%H:%M:%S", time.localtime(snap.timestamp))
            text.append(f"  via {update.via}, as of {when}", style=palette.dim)
        if update.stale:
            text.append("  (last known data)", style=palette.warning)
    return text


TREE_MID, TREE_LAST = "├ ", "└ "


def _tree_cells(cells: Cells, last: bool, palette: Palette) -> Cells:
    """An instance row's cells with the tree's branch in front of its first cell."""
    first = cells[0]
    branch = Text(TREE_LAST if last else TREE_MID, style=palette.branch)
    if isinstance(first, Text):
        branch.append_text(first)
    return (branch, *cells[1:])


def gpu_table_rows(
    built: vr.HostRows,
    query: Query,
    expanded: set[str],
    tree: bool,
    layout: Layout,
    palette: Palette,
    order: Sequence[vr.GpuRow],
    cache: CellCache,
) -> tuple[list[Column[Any]], list[tuple[str, Source]]]:
    """Columns and rows (GPUs in ``order`` with their expanded instances) of a host's GPU
    table; every cell, a GPU's or an instance's, comes from :data:`HOST_TREE_COLUMNS`.

    An instance's row is made (and its row model built, :class:`~vgpumon.view.rows.HostRows`)
    only when the table draws it: an expanded host of 768 vGPUs is 784 keys and a screenful of
    rows. A filter reads every instance's fields, so with one the instances are all built."""
    snap = built.snapshot
    columns = table_columns(HOST_TREE_COLUMNS, layout, present(snap))
    names = tuple(c.key for c in columns)

    def child_cells(make: Callable[[], vr.VgpuRow | vr.MigRow], last: bool) -> Cells:
        child = make()
        return cache.get(
            child.key,
            (child, names, layout, palette, last),
            lambda: _tree_cells(row_cells(child, columns, layout, palette), last, palette),
        )

    out: list[tuple[str, Source]] = []
    for row in order:
        gpu: Gpu = built.gpu(row.uuid)
        children: list[tuple[str, Callable[[], vr.VgpuRow | vr.MigRow]]] = [
            (m.key, functools.partial(_same, m)) for m in vr.mig_rows(built.host, gpu, snap)
        ]
        children += [
            (vr.vgpu_key(built.host, gpu, v), functools.partial(built.vgpu, gpu.uuid, i))
            for i, v in enumerate(gpu.vgpu_instances)
        ]
        if not query.empty:
            own = query.matches(row.fields)
            matching = [(k, make) for k, make in children if query.matches(make().fields)]
            if not own and not matching:
                continue
            if not own:
                children = matching
        out.append((row.key, functools.partial(cache.row, row, columns, layout, palette)))
        if children and (tree or row.key in expanded):
            last = len(children) - 1
            out += [
                (key, functools.partial(child_cells, make, i == last))
                for i, (key, make) in enumerate(children)
            ]
    return columns, out


def _same(row: vr.MigRow) -> vr.MigRow:
    return row


class GpuTable(OpeningTable):
    """The host's GPU table and its holders': Enter opens the GPU of the row under the cursor,
    the arrows expand and fold it (a focused widget's bindings win over the screen's, so the
    table binds them, shown in the footer)."""

    # Fold is not in the footer: at 80 columns it would push out "? help" (the help screen
    # lists it with every key).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("right,l", "screen.expand", "expand", key_display="→"),
        Binding("left,h", "screen.collapse", "fold", show=False),
    ]


@dataclass(frozen=True)
class Holders:
    """One kind of thing that holds a GPU, listed under the GPU table: each GPU's holders are of
    the first kind it has, so every GPU's are listed, under it (a registry: a new kind is one
    entry). Where kinds mix, one table holds them all with a kind column
    (:data:`vgpumon.view.columns.HOST_HOLDER_COLUMNS`)."""

    name: str  # in the title where kinds mix
    title: str  # the title where it is the only kind
    has: Callable[[Gpu], bool]
    # (key, the row model's maker) of each of a GPU's: a maker is called for the rows the table
    # draws
    rows: Callable[[TopState, vr.HostRows, Gpu], Sequence[tuple[str, Callable[[], Any]]]]
    columns: Sequence[Column[Any]]


def _ready(rows: Sequence[Any]) -> list[tuple[str, Callable[[], Any]]]:
    return [(r.key, functools.partial(_same, r)) for r in rows]


def _vgpus(app: TopState, built: vr.HostRows, gpu: Gpu) -> list[tuple[str, Callable[[], Any]]]:
    return [
        (vr.vgpu_key(built.host, gpu, v), functools.partial(built.vgpu, gpu.uuid, i))
        for i, v in enumerate(gpu.vgpu_instances)
    ]


def _migs(app: TopState, built: vr.HostRows, gpu: Gpu) -> list[tuple[str, Callable[[], Any]]]:
    return _ready(vr.mig_rows(built.host, gpu, built.snapshot))


def _processes(app: TopState, built: vr.HostRows, gpu: Gpu) -> list[tuple[str, Callable[[], Any]]]:
    local = app.local_processes(p.pid for p in gpu.processes or ())
    return _ready(vr.process_rows(built.host, gpu, local))


def _vms(app: TopState, built: vr.HostRows, gpu: Gpu) -> list[tuple[str, Callable[[], Any]]]:
    return _ready([p for p in vr.process_rows(built.host, gpu, None) if p.kind == "vm"])


HOLDERS: tuple[Holders, ...] = (
    Holders(
        "VMs",
        "VMs on the GPUs (vGPU instances)",
        lambda gpu: bool(gpu.vgpu_instances),
        _vgpus,
        HOST_VGPU_COLUMNS,
    ),
    Holders(
        # An agentless hypervisor (ESXi) lists its VMs as processes: name and framebuffer, by
        # world ID, also when its vGPU report is missing.
        "VMs",
        "VMs on the GPUs (the hypervisor's process list)",
        lambda gpu: any(p.kind == "vm" for p in gpu.processes or ()),
        _vms,
        HOST_VM_COLUMNS,
    ),
    Holders(
        "MIG instances",
        "MIG instances",
        lambda gpu: bool(gpu.mig_instances),
        _migs,
        HOST_MIG_COLUMNS,
    ),
    Holders(
        "processes", "Processes on the GPUs", lambda gpu: True, _processes, HOST_PROCESS_COLUMNS
    ),
)


def holders_of(
    app: TopState, built: vr.HostRows
) -> tuple[str, Sequence[Column[Any]], list[tuple[str, Callable[[], Any]]]]:
    """Every holder of every GPU, GPU by GPU: the title, the columns (the kind's own where one
    kind holds them all, else the mixed table's with its kind column) and the rows."""
    rows: list[tuple[str, Callable[[], Any]]] = []
    kinds: list[Holders] = []
    for gpu in built.snapshot.gpus:
        holders = next(h for h in HOLDERS if h.has(gpu))
        mine = holders.rows(app, built, gpu)
        if mine and holders not in kinds:
            kinds.append(holders)
        rows += mine
    if not kinds:
        return HOLDERS[-1].title, HOLDERS[-1].columns, rows
    if len(kinds) == 1:
        return kinds[0].title, kinds[0].columns, rows
    names = list(dict.fromkeys(h.name for h in kinds))
    return "Holders of the GPUs: " + ", ".join(names), HOST_HOLDER_COLUMNS, rows


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
        yield GpuTable(id="holders")
        with Grid(id="host-graphs"):
            for i in range(GRAPHED_GPUS):
                yield Graph(f"GPU {i} util", f.pct, window=self.vapp.graph_window, id=f"h-util-{i}")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(KeyedTable).focus()

    def draw(self) -> None:
        app = self.vapp
        title = host_title(self.host, app.hosts, app.multi_host, app.palette)
        self.show(self.query_one("#title", Static), title)
        update = app.hosts.get(self.host)
        table = self.query_one("#gpus", KeyedTable)
        built = app.rows(self.host)
        if update is None or update.snapshot is None or built is None:
            table.sync([("index", "#")], [])
            return
        snap = update.snapshot
        columns, cells = gpu_table_rows(
            built,
            app.filter_query,
            self.expanded,
            app.tree_mode,
            self.layout_now,
            app.palette,
            order=self.sorted_rows(built.gpus, HOST_TREE_COLUMNS),
            cache=self.cell_cache,
        )
        self.fill(table, columns, cells, main=True)
        self.set_class(app.tree_mode, "-tree")
        if app.tree_mode:
            # The graphs' display is set inline when they are drawn, which outranks the
            # stylesheet's -tree rule: hidden here too, so the tree gets their rows.
            self.query_one("#host-graphs", Grid).display = False
        else:
            self._draw_holders(built)
            self._draw_graphs(snap)

    def _draw_holders(self, built: vr.HostRows) -> None:
        snap = built.snapshot
        title, kind_columns, rows = holders_of(self.vapp, built)
        query = self.vapp.filter_query
        if not query.empty:
            rows = [(k, make) for k, make in rows if query.matches(make().fields)]
        has = present(snap) | ({LOCAL} if self.vapp.proc_table is not None else set())
        columns = table_columns(kind_columns, self.layout_now, frozenset(has))
        if self.sorts.get("holders", TableSort()).key is not None:
            # Sorted: every row's model is needed to place it (as a filter needs them).
            models = self.sorted_rows([make() for _, make in rows], columns, "holders")
            rows = _ready(models)
        self.show(self.query_one("#holders-title", Static), Text(title))
        table = self.query_one("#holders", KeyedTable)
        self.fill(table, columns, self.lazy_cells(rows, columns), sortable=True)

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
        """The GPU of the row under the cursor of the focused table (the GPU table's when none
        is): an instance, VM or process row counts as its GPU (its key starts ``host/uuid``)."""
        focused = self.focused
        table = focused if isinstance(focused, KeyedTable) else self.query_one("#gpus", KeyedTable)
        key = table.highlighted_key
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

    def on_keyed_table_row_selected(self) -> None:
        self.action_open()  # Enter on either table: the GPU of the focused table's row
