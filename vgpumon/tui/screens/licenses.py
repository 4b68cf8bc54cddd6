"""Every vGPU license of the host or fleet (and a guest's licensed features), most urgent first:
unlicensed, then the soonest expiry."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import rows as vr
from vgpumon.view.columns import LICENSE_COLUMNS


class LicensesScreen(LiveScreen):
    FOCUS = "licenses"

    def compose_body(self) -> ComposeResult:
        yield Static("Licenses, most urgent first", classes="section")
        yield KeyedTable(id="licenses")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(KeyedTable).focus()

    def draw(self) -> None:
        app = self.vapp
        rows: list[vr.LicenseRow] = []
        for host in app.host_names:
            update = app.hosts.get(host)
            if update is not None and update.snapshot is not None:
                rows += vr.all_license_rows(host, update.snapshot)
        if not app.filter_query.empty:
            rows = [r for r in rows if app.filter_query.matches(r.fields)]
        rows = sorted(rows, key=lambda r: (r.urgency, r.host, r.gpu_index))
        rows = self.sorted_rows(rows, LICENSE_COLUMNS)
        layout = self.layout_now
        columns = [
            c for c in table_columns(LICENSE_COLUMNS, layout) if c.key != "host" or app.multi_host
        ]
        self.fill(
            self.query_one("#licenses", KeyedTable),
            columns,
            self.lazy_cells(rows, columns),
            main=True,
        )
