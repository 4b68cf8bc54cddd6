"""Many hosts: one row per host (reachability, GPUs by mode, load, alarms); Enter opens one."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable, OpeningTable
from vgpumon.view import rows as vr
from vgpumon.view.columns import CC, HOST_COLUMNS


class FleetScreen(LiveScreen):
    def compose_body(self) -> ComposeResult:
        yield Static(id="title", classes="title")
        yield OpeningTable(id="hosts")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(KeyedTable).focus()

    def host_rows(self) -> list[vr.HostRow]:
        app = self.vapp
        rows = []
        for host in app.host_names:
            update = app.hosts.get(host)
            if update is None:
                rows.append(vr.host_row(host, "connecting", None))
                continue
            snap = update.snapshot
            if snap is None and update.rollup is not None:  # a large fleet's host, summed up
                row = vr.host_row_from_rollup(
                    host, update.state.value, update.rollup, error=update.error, stale=update.stale
                )
            else:
                row = vr.host_row(
                    host, update.state.value, snap, error=update.error, stale=update.stale
                )
            if not app.filter_query.empty:
                kids: list[dict[str, str]] = []
                if snap is not None:
                    kids += [g.fields for g in vr.gpu_rows(host, snap)]
                    for g in snap.gpus:
                        kids += [v.fields for v in vr.vgpu_rows(host, snap, g)]
                        kids += [m.fields for m in vr.mig_rows(host, g, snap)]
                if not app.filter_query.matches(row.fields) and not app.filter_query.matches_any(
                    kids
                ):
                    continue
            rows.append(row)
        if self.sort_key is None:  # by default hosts with problems first (then by name)
            return sorted(rows, key=vr.host_order)
        return self.sorted_rows(rows, HOST_COLUMNS)

    def draw(self) -> None:
        app = self.vapp
        rows = self.host_rows()
        up = sum(1 for r in rows if r.state == "up")
        self.query_one("#title", Static).update(
            Text(f"Fleet: {len(app.host_names)} hosts, {up} up shown · Enter opens a host")
        )
        # The CC column only where some host runs confidential computing.
        has = frozenset({CC}) if any(r.cc for r in rows) else frozenset()
        cols = table_columns(HOST_COLUMNS, self.layout_now, has)
        self.fill(
            self.query_one("#hosts", KeyedTable),
            cols,
            self.lazy_cells(rows, cols),
            main=True,
        )

    def on_keyed_table_row_selected(self) -> None:
        key = self.query_one("#hosts", KeyedTable).highlighted_key
        if key is not None:
            from vgpumon.tui.screens.host import HostScreen

            self.app.push_screen(HostScreen(key))
