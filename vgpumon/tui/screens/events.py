"""The event log, newest first: Xid errors, GPUs lost and back, license changes, vGPUs created and
destroyed, a wedged sampler, hosts unreachable and back (derived in :mod:`vgpumon.view.events`)."""

from __future__ import annotations

import datetime

from rich.text import Text
from textual.app import ComposeResult

from vgpumon.text import printable
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable

SHOWN = 500


class EventsScreen(LiveScreen):
    FOCUS = "events"

    def compose_body(self) -> ComposeResult:
        yield KeyedTable(id="events")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(KeyedTable).focus()

    def draw(self) -> None:
        app = self.vapp
        palette = app.palette
        style = {"error": palette.error, "warning": palette.warning, "info": ""}
        rows = []
        for seq, e in reversed(app.events):
            fields = {"host": e.host, "state": e.severity, "name": e.text}
            if not app.filter_query.matches(fields):
                continue
            when = datetime.datetime.fromtimestamp(e.timestamp, tz=datetime.timezone.utc)
            rows.append(
                (
                    str(seq),
                    (
                        Text(f"{when:%H:%M:%S}"),
                        Text(printable(e.host)),
                        Text(e.severity, style=style[e.severity]),
                        Text(printable(e.text)),
                    ),
                )
            )
            if len(rows) >= SHOWN:
                break
        columns = [("time", "time UTC"), ("host", "host"), ("severity", "level"), ("text", "event")]
        self.query_one("#events", KeyedTable).sync(columns, rows)
