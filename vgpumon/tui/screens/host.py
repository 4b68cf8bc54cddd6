"""One host: a row per GPU, each expandable in place into its MIG or vGPU instances.

``l``/→ expands the highlighted GPU, ``h``/← folds it, ``t`` expands all (tree), Enter opens the
GPU's detail screen. With a filter, a GPU stays when it or one of its instances matches, and an
expanded GPU shows only the matching instances.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from vgpumon.model import Gpu, Snapshot
from vgpumon.sources.base import HostUpdate
from vgpumon.tui.cells import CellCache, Layout, Palette, badges_text, gauge, table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import Cells, KeyedTable
from vgpumon.view import format as f
from vgpumon.view import rows as vr
from vgpumon.view.badges import badge
from vgpumon.view.columns import GPU_COLUMNS, Column, present
from vgpumon.view.filter import Query


def host_title(host: str, vapp_hosts: Mapping[str, HostUpdate], multi: bool) -> Text:
    update = vapp_hosts.get(host)
    text = Text()
    if multi:
        text.append(f"{host}  ", style="bold")
    if update is None:
        return text.append("waiting for the first reading…")
    text.append(update.state.value, style="bold" if update.state.value == "up" else "bold red")
    if update.error:
        text.append(f"  {update.error}", style="red")
    snap = update.snapshot
    if snap is not None:
        d = snap.driver
        text.append(
            f"  {snap.source}  driver {f.or_dash(d.driver_version)}"
            f"  CUDA {f.or_dash(d.cuda_driver_version)}"
        )
        if snap.health.wedged:
            text.append("  sampler wedged", style="bold red")
        if update.stale:
            text.append("  (last known data)", style="yellow")
    return text


def _child_cells(
    kind: str,
    row: vr.VgpuRow | vr.MigRow,
    columns: list[Column[vr.GpuRow]],
    layout: Layout,
    palette: Palette,
    last: bool,
) -> Cells:
    branch = "└" if last else "├"
    cells: list[RenderableType] = []
    for c in columns:
        k = c.key
        value: RenderableType = ""
        if k == "pod":  # the same in every kind of row: who the kubelet gave the device to
            value = row.holders.label
        elif isinstance(row, vr.VgpuRow):
            if k == "index":
                value = f"{branch} v{row.vgpu_id}"
            elif k == "name":
                value = f.or_dash(row.vm)
            elif k == "mode":
                value = f.vgpu_type(row.type_name)
            elif k == "util":
                value = gauge(row.sm, f.pct(row.sm), layout.gauge, palette)
            elif k == "memory":
                used = f.used_total(row.framebuffer_used, row.framebuffer_total)
                value = gauge(row.framebuffer_ratio, used, layout.gauge_for(k), palette)
            elif k == "power":
                state = f.license_state(row.license_state)
                value = Text(state, style=palette.warning if row.unlicensed else "")
            elif k == "inst":
                value = f.pct(row.share) if row.share is not None else ""
            elif k == "badges":
                kinds = [
                    ("unlicensed", row.unlicensed),
                    ("expiring", row.expiring),
                    ("starved", row.starved),
                ]
                value = badges_text([badge(n) for n, on in kinds if on], palette)
        else:
            if k == "index":
                value = f"{branch} GI{row.gpu_instance_id}"
            elif k == "name":
                value = f.or_dash(row.profile)
            elif k == "mode":
                value = "MIG instance"
            elif k == "util":
                value = gauge(row.sm_active, f.pct(row.sm_active), layout.gauge, palette)
            elif k == "memory":
                used = f.used_total(row.memory_used, row.memory_total)
                value = gauge(row.memory_ratio, used, layout.gauge_for(k), palette)
            elif k == "gpm":
                value = f"{f.pct(row.sm_active)}/{f.pct(row.dram_active)}"
            elif k == "inst":
                value = f"{row.compute_instances} CI"
        cells.append(Text(value, style=palette.dim) if isinstance(value, str) else value)
    return tuple(cells)


def gpu_table_rows(
    host: str,
    snap: Snapshot,
    shares: dict[tuple[str, int], float],
    query: Query,
    expanded: set[str],
    tree: bool,
    layout: Layout,
    palette: Palette,
    order: list[vr.GpuRow] | None = None,
    key_prefix: str = "",
    cache: CellCache | None = None,
    vgpus_of: Mapping[str, list[vr.VgpuRow]] | None = None,
) -> tuple[list[tuple[str, str]], list[tuple[str, Cells]]]:
    """Columns and rows (GPUs with their expanded instances) of a host's GPU table."""
    columns = table_columns(GPU_COLUMNS, layout, present(snap))
    cells_of = cache or CellCache()
    gpus = {g.uuid: g for g in snap.gpus}
    out: list[tuple[str, Cells]] = []
    for row in order if order is not None else vr.gpu_rows(host, snap, shares):
        gpu: Gpu = gpus[row.uuid]
        vgpus = (
            vgpus_of[gpu.uuid] if vgpus_of is not None else vr.vgpu_rows(host, snap, gpu, shares)
        )
        migs = vr.mig_rows(host, gpu, snap)
        children: list[vr.VgpuRow | vr.MigRow] = [*migs, *vgpus]
        if not query.empty:
            own = query.matches(row.fields)
            matching = [c for c in children if query.matches(c.fields)]
            if not own and not matching:
                continue
            if not own:
                children = matching
        out.append((key_prefix + row.key, cells_of.row(row, columns, layout, palette)))
        if children and (tree or row.key in expanded):
            for i, child in enumerate(children):
                kind = "vgpu" if isinstance(child, vr.VgpuRow) else "mig"
                last = i == len(children) - 1
                ckey = (child, tuple(c.key for c in columns), layout, palette, last)
                cells = cells_of.get(
                    ckey,
                    functools.partial(_child_cells, kind, child, columns, layout, palette, last),
                )
                out.append((key_prefix + child.key, cells))
    return [(c.key, c.label) for c in columns], out


class HostScreen(LiveScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "open GPU"),
        Binding("l,right", "expand", "expand"),
        Binding("h,left", "collapse", "fold"),
    ]
    SORT_COLUMNS = GPU_COLUMNS

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host
        self.expanded: set[str] = set()

    def compose_body(self) -> ComposeResult:
        yield Static(id="title", classes="title")
        yield KeyedTable(id="gpus")

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
        shares = app.shares(self.host)
        vgpus_of = {g.uuid: vr.vgpu_rows(self.host, snap, g, shares) for g in snap.gpus}
        gpu_rows = [vr.gpu_row(self.host, snap, g, shares, vgpus_of[g.uuid]) for g in snap.gpus]
        rows = self.sorted_rows(gpu_rows, GPU_COLUMNS)
        columns, cells = gpu_table_rows(
            self.host,
            snap,
            shares,
            app.filter_query,
            self.expanded,
            app.tree_mode,
            self.layout_now,
            app.palette,
            order=rows,
            cache=self.cell_cache,
            vgpus_of=vgpus_of,
        )
        table.sync(columns, cells)

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

    def action_open(self) -> None:
        key = self._gpu_key()
        if key is None:
            return
        from vgpumon.tui.screens.gpu import GpuScreen

        self.app.push_screen(GpuScreen(self.host, key.split("/", 1)[1]))

    def on_data_table_row_selected(self) -> None:
        self.action_open()
