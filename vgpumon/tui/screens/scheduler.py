"""The vGPU scheduler: policy, ARR and time slice per GPU, per vGPU the share of the GPU it
received over the last 30 s (from the scheduler log's run-time counters) against what the policy
promises it, with starvation marked, and contention: for each vGPU the metering stage found
starved over its minute, the neighbours that ran above their due (docs/metering.md)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import rows as vr
from vgpumon.view.columns import CONTENTION_COLUMNS, SCHEDULER_COLUMNS, SHARE_COLUMNS
from vgpumon.view.metering import ContentionLine, contention_lines

CONTENTION_TITLE = "Starved in the last minute, and who ran above their due"
NO_CONTENTION = "Contention: no vGPU starved in the last minute"
NOT_METERED = "Contention: not known (no usage metering in this data)"


class SchedulerScreen(LiveScreen):
    def compose_body(self) -> ComposeResult:
        yield Static("vGPU schedulers", classes="section")
        yield KeyedTable(id="schedulers", classes="inner")
        yield Static("Share received over 30 s against the policy's due", classes="section")
        yield KeyedTable(id="shares")
        yield Static(CONTENTION_TITLE, id="contention-title", classes="section")
        yield KeyedTable(id="contention", classes="inner")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#shares", KeyedTable).focus()

    def draw(self) -> None:
        app = self.vapp
        layout, _palette = self.layout_now, app.palette
        scheds: list[vr.SchedulerRow] = []
        shares: list[vr.VgpuRow] = []
        contention: list[ContentionLine] = []
        for host in app.host_names:
            update = app.hosts.get(host)
            if update is None or update.snapshot is None:
                continue
            snap = update.snapshot
            measured = app.shares(host)
            contention += [
                c
                for c in contention_lines(host, snap, snap.gpus)
                if app.filter_query.matches(c.fields)
            ]
            for g in snap.gpus:
                scheds += vr.scheduler_rows(host, snap, g, measured)
                if g.vgpu_schedulers:
                    shares += [
                        v
                        for v in vr.vgpu_rows(host, snap, g, measured)
                        if app.filter_query.matches(v.fields)
                    ]
        scols = table_columns(SCHEDULER_COLUMNS, layout)
        self.fill(
            self.query_one("#schedulers", KeyedTable),
            scols,
            [(s.key, self.cells(s, scols)) for s in scheds],
        )
        vcols = table_columns(SHARE_COLUMNS, layout)
        rows = self.sorted_rows(shares, SHARE_COLUMNS)
        self.fill(
            self.query_one("#shares", KeyedTable),
            vcols,
            [(v.key, self.cells(v, vcols)) for v in rows],
            main=True,
        )
        metered = any(
            g.metering is not None
            for u in app.hosts.values()
            for g in (u.snapshot.gpus if u.snapshot else ())
        )
        self.query_one("#contention-title", Static).update(
            CONTENTION_TITLE if contention else NO_CONTENTION if metered else NOT_METERED
        )
        table = self.query_one("#contention", KeyedTable)
        table.display = bool(contention)
        ccols = table_columns(CONTENTION_COLUMNS, layout)
        self.fill(table, ccols, [(c.key, self.cells(c, ccols)) for c in contention])
