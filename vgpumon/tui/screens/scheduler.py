"""The vGPU scheduler: policy, ARR and time slice per GPU; per vGPU the share of the engine it
received over the window against what the policy makes it due, and the collector's verdict
(starved, ok, or why there is none); and contention: beside each starved vGPU, the neighbours that
received more than their due. Every verdict is the snapshot's (docs/verdicts.md), so this screen,
the host screen's badges and the alert agree."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from vgpumon.text import printable
from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import rows as vr
from vgpumon.view.columns import (
    CONTENTION_COLUMNS,
    ENCODER_SHARE_COLUMNS,
    SCHEDULER_COLUMNS,
    SHARE_COLUMNS,
)
from vgpumon.view.format import share_state as format_share_state
from vgpumon.view.metering import ContentionLine, contention_lines

ENCODER_TITLE = "Encoder share over the last minute against the policy's due, per engine"
SHARES_TITLE = "Share received over the last minute against the policy's due"
CONTENTION_TITLE = "Starved in the last minute, and who ran above their due"
NO_CONTENTION = "Contention: no vGPU starved in the last minute"
NO_COUNTERS = "Contention: not known (no scheduler counters in this data)"
UNDECIDED = "Contention: none starved where known; {reason}"


class SchedulerScreen(LiveScreen):
    FOCUS = "scheduler"

    def compose_body(self) -> ComposeResult:
        yield Static("vGPU schedulers", classes="section")
        yield KeyedTable(id="schedulers", classes="inner")
        yield Static(ENCODER_TITLE, id="encoder-title", classes="section")
        yield KeyedTable(id="encoders", classes="inner")
        yield Static(SHARES_TITLE, classes="section")
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
        query = app.filter_query
        encoders: list[vr.EncoderShareRow] = []
        for host in app.host_names:
            update = app.hosts.get(host)
            built = app.rows(host)
            if update is None or update.snapshot is None or built is None:
                continue
            snap = update.snapshot
            contention += [
                c for c in contention_lines(host, snap, snap.gpus) if query.matches(c.fields)
            ]
            for g in snap.gpus:
                scheds += vr.scheduler_rows(host, snap, g)
                encoders += [e for e in vr.encoder_share_rows(host, g) if query.matches(e.fields)]
                if g.vgpu_schedulers:
                    vgpus = built.vgpus(g.uuid)
                    shares += (
                        vgpus if query.empty else [v for v in vgpus if query.matches(v.fields)]
                    )
        scols = table_columns(SCHEDULER_COLUMNS, layout)
        self.fill(
            self.query_one("#schedulers", KeyedTable),
            scols,
            self.lazy_cells(scheds, scols),
        )
        vcols = table_columns(SHARE_COLUMNS, layout)
        rows = self.sorted_rows(shares, SHARE_COLUMNS)
        self.fill(
            self.query_one("#shares", KeyedTable),
            vcols,
            self.lazy_cells(rows, vcols),
            main=True,
        )
        etable = self.query_one("#encoders", KeyedTable)
        etable.display = self.query_one("#encoder-title").display = bool(encoders)
        ecols = table_columns(ENCODER_SHARE_COLUMNS, layout)
        erows = self.sorted_rows(encoders, ENCODER_SHARE_COLUMNS)
        self.fill(etable, ecols, self.lazy_cells(erows, ecols))
        # Text, never markup: the reason a share has no verdict comes from the host's snapshot.
        title = Text(printable(_contention_title(contention, scheds)))
        self.show(self.query_one("#contention-title", Static), title)
        table = self.query_one("#contention", KeyedTable)
        table.display = bool(contention)
        ccols = table_columns(CONTENTION_COLUMNS, layout)
        self.fill(table, ccols, self.lazy_cells(contention, ccols))


def _contention_title(contention: list[ContentionLine], scheds: list[vr.SchedulerRow]) -> str:
    if contention:
        return CONTENTION_TITLE
    if not scheds:
        return NO_COUNTERS
    undecided = next((s.undecided for s in scheds if s.undecided), None)
    if undecided is not None:
        return UNDECIDED.format(reason=format_share_state(undecided))
    return NO_CONTENTION
