"""Capacity: how many more of each vGPU type and MIG profile fit, per host (types × hosts); with a
``fits:TYPE`` filter, the GPUs where one more TYPE can be created now, best fit first.

Both come from :mod:`vgpumon.view.capacity` (``vgpumon.capacity``'s answers, the ones the exporter
and the Capacity dashboard give). Other filter terms narrow the rows (``type:``, ``kind:``) and
``host:`` the host columns; Enter on a GPU of the fit list opens it.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from vgpumon.model import Snapshot
from vgpumon.text import printable
from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view.capacity import CapacityRow, FitRow, capacity_rows, fit_rows, gi_vgpu_rows
from vgpumon.view.columns import (
    CAPACITY_COLUMNS,
    FIT_COLUMNS,
    GI_VGPU_COLUMNS,
    Column,
    capacity_host_column,
)
from vgpumon.view.filter import Query


class CapacityScreen(LiveScreen):
    FOCUS = "capacity"

    def __init__(self) -> None:
        super().__init__()
        self._fits: dict[str, FitRow] = {}  # the fit list as last drawn, by row key

    def compose_body(self) -> ComposeResult:
        yield Static(id="title", classes="title")
        yield KeyedTable(id="capacity")
        yield Static("MIG-backed vGPUs per GPU instance", id="gi-title", classes="section")
        yield KeyedTable(id="gi-vgpus", classes="inner")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(KeyedTable).focus()

    def snapshots(self) -> list[tuple[str, Snapshot | None]]:
        app = self.vapp
        out: list[tuple[str, Snapshot | None]] = []
        for host in app.host_names:
            update = app.hosts.get(host)
            out.append((host, None if update is None else update.snapshot))
        return out

    def draw(self) -> None:
        query = self.vapp.filter_query
        wanted = query.values("fits")
        if wanted:
            self._draw_fits(query, wanted)
        else:
            self._draw_matrix(query)

    def _draw_matrix(self, query: Query) -> None:
        snaps = self.snapshots()
        host_terms = Query(tuple(t for t in query.terms if t[0] == "host"))
        hosts = [h for h, _ in snaps if host_terms.matches({"host": h})]
        rows = [r for r in capacity_rows(snaps) if query.without("host").matches(r.fields)]
        columns: list[Column[CapacityRow]] = [
            *table_columns(CAPACITY_COLUMNS, self.layout_now),
            *(capacity_host_column(h) for h in hosts),
        ]
        rows = self.sorted_rows(rows, columns)
        title = Text("Capacity: how many more fit now, per host · /fits:TYPE: where one fits")
        if not rows:
            title = Text("Capacity: no host offers a vGPU type or MIG profile (or none matches)")
        self.query_one("#title", Static).update(title)
        table = self.query_one("#capacity", KeyedTable)
        self._fits = {}
        self.fill(table, columns, self.lazy_cells(rows, columns), main=True)
        gis = [r for r in gi_vgpu_rows(snaps) if host_terms.matches({"host": r.host})]
        gi_table = self.query_one("#gi-vgpus", KeyedTable)
        gi_table.display = self.query_one("#gi-title").display = bool(gis)
        if gis:
            gi_columns = table_columns(GI_VGPU_COLUMNS, self.layout_now)
            self.fill(gi_table, gi_columns, self.lazy_cells(gis, gi_columns))

    def _draw_fits(self, query: Query, wanted: tuple[str, ...]) -> None:
        """The first ``fits:`` term orders (best fit first); further ones must hold on the same
        GPU; the other terms filter the rows."""
        snaps = self.snapshots()
        first, *more = wanted
        also = {
            (f.host, f.gpu_uuid) for w in more for f in fit_rows(snaps, w)
        }  # GPUs where the other wanted types fit too
        rest = query.without("fits")
        rows = [
            r
            for r in fit_rows(snaps, first)
            if rest.matches(r.fields) and (not more or (r.host, r.gpu_uuid) in also)
        ]
        rows = self.sorted_rows(rows, FIT_COLUMNS)
        self._fits = {r.key: r for r in rows}
        self.query_one("#gi-vgpus").display = self.query_one("#gi-title").display = False
        name = printable(" and ".join(wanted))
        if rows:
            title = Text(f"Where one more {name} fits now, best fit first · Enter opens a GPU")
        else:
            title = Text(f"One more {name} fits on no GPU now (or the name matches no type)")
        self.query_one("#title", Static).update(title)
        columns = table_columns(FIT_COLUMNS, self.layout_now)
        table = self.query_one("#capacity", KeyedTable)
        self.fill(table, columns, self.lazy_cells(rows, columns), main=True)

    def on_keyed_table_row_selected(self) -> None:
        key = self.query_one("#capacity", KeyedTable).highlighted_key
        fit = self._fits.get(key or "") if self.vapp.filter_query.values("fits") else None
        if fit is None:
            return
        from vgpumon.tui.screens.gpu import GpuScreen

        self.app.push_screen(GpuScreen(fit.host, fit.gpu_uuid))
