"""The vGPU scheduler: policy, ARR and time slice per GPU, and per vGPU the share of the GPU it
received over the last 30 s (from the scheduler log's run-time counters) against what the policy
promises it, with starvation marked."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import rows as vr
from vgpumon.view.columns import SCHEDULER_COLUMNS, SHARE_COLUMNS


class SchedulerScreen(LiveScreen):
    def compose_body(self) -> ComposeResult:
        yield Static("vGPU schedulers", classes="section")
        yield KeyedTable(id="schedulers", classes="inner")
        yield Static("Share received over 30 s against the policy's due", classes="section")
        yield KeyedTable(id="shares")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#shares", KeyedTable).focus()

    def draw(self) -> None:
        app = self.vapp
        layout, _palette = self.layout_now, app.palette
        scheds: list[vr.SchedulerRow] = []
        shares: list[vr.VgpuRow] = []
        for host in app.source.hosts():
            update = app.hosts.get(host)
            if update is None or update.snapshot is None:
                continue
            snap = update.snapshot
            measured = app.shares(host)
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
