"""Usage: GPU-hours, memory GiB-hours and kWh per VM, pod, namespace or tenant (docs/metering.md).

Two windows. *Since start*: the usage counters in the newest snapshot of each host (the metering
stage's, summed over the hosts of a fleet), no Prometheus needed. *Last hour* and *last day*
(with ``top --prometheus``): the metering rules' hourly series over the whole hours, the queries
``vgpumon usage`` runs, fetched in a worker at most once a minute per window and grouping; the
screen never waits on Prometheus. ``b`` changes the grouping, ``w`` the window.
"""

from __future__ import annotations

import dataclasses
import time
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from vgpumon.sources.usage import GROUPS, UsageReport, report_from_snapshot
from vgpumon.text import printable
from vgpumon.tui.cells import table_columns
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import rows as vr
from vgpumon.view.columns import USAGE_COLUMNS
from vgpumon.view.metering import merge_reports, usage_lines

HOUR = 3600.0
# Window name -> hours back from the last whole hour (0: since each counter began).
WINDOWS = {"since start": 0, "last hour": 1, "last day": 24}
REFETCH_SECONDS = 60.0  # the rules' series change once an hour; a minute is fresh enough


class UsageScreen(LiveScreen):
    FOCUS = "usage"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "next_group", "by"),
        Binding("w", "next_window", "window"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.by = "vm"
        self.window = "since start"
        # (by, window) -> (when asked, report or the reason there is none)
        self.fetched: dict[tuple[str, str], tuple[float, UsageReport | str]] = {}

    def compose_body(self) -> ComposeResult:
        yield Static("", id="usage-title", classes="section")
        yield KeyedTable(id="usage")
        yield Static("", id="usage-idle", classes="title")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#usage", KeyedTable).focus()

    @property
    def windows(self) -> list[str]:
        """Since start always; the hourly windows only with a Prometheus to ask."""
        if self.vapp.usage is None:
            return ["since start"]
        return list(WINDOWS)

    def action_next_group(self) -> None:
        groups = list(GROUPS)
        self.by = groups[(groups.index(self.by) + 1) % len(groups)]
        self.refresh_data()

    def action_next_window(self) -> None:
        windows = self.windows
        i = windows.index(self.window) if self.window in windows else -1
        self.window = windows[(i + 1) % len(windows)]
        self.refresh_data()

    def draw(self) -> None:
        report, note = self._report()
        where = "this host" if not self.vapp.multi_host else "the fleet"
        if WINDOWS[self.window]:
            where = "all hosts Prometheus meters"
        title = f"Usage by {self.by}, {self.window} ({where})"
        lines = [] if report is None else usage_lines(report)
        lines = [u for u in lines if self.vapp.filter_query.matches(u.fields)]
        # The first column is named for the grouping (VM, pod, namespace, tenant).
        named = (dataclasses.replace(USAGE_COLUMNS[0], label=self.by), *USAGE_COLUMNS[1:])
        columns = table_columns(named, self.layout_now)
        rows = self.sorted_rows(lines, named)
        if report is not None and not lines and not note:
            note = f" · nothing metered by {self.by} yet"
        self.fill(
            self.query_one("#usage", KeyedTable),
            columns,
            self.lazy_cells(rows, columns),
            main=True,
        )
        # Text, not markup: the note may be a Prometheus error, which says what it likes.
        self.query_one("#usage-title", Static).update(Text(printable(f"{title}{note}")))
        self.query_one("#usage-idle", Static).update(Text(self._idle_summary()))

    def _report(self) -> tuple[UsageReport | None, str]:
        app = self.vapp
        if not WINDOWS[self.window]:
            reports = [
                report_from_snapshot(u.snapshot, self.by)
                for u in app.hosts.values()
                if u.snapshot is not None
            ]
            report = merge_reports(reports, self.by)
            metered = any(
                g.metering is not None
                for u in app.hosts.values()
                for g in (u.snapshot.gpus if u.snapshot else ())
            )
            return report, "" if metered else " · no usage metering in this data"
        key = (self.by, self.window)
        held = self.fetched.get(key)
        now = time.time()
        if held is None or now - held[0] >= REFETCH_SECONDS:
            self.fetched[key] = (now, held[1] if held else "asking Prometheus…")
            self.run_worker(self._fetch(key, now), group="usage", exit_on_error=False)
        found = self.fetched[key][1]
        if isinstance(found, str):
            return None, f" · {found}"
        return found, ""

    async def _fetch(self, key: tuple[str, str], now: float) -> None:
        client = self.vapp.usage
        assert client is not None
        by, window = key
        end = (now // HOUR) * HOUR
        try:
            found: UsageReport | str = await client.report(by, end - WINDOWS[window] * HOUR, end)
        except Exception as exc:  # noqa: BLE001 - any failure is shown, never a crash
            found = _shortened(" ".join(str(exc).split())) or type(exc).__name__
        self.fetched[key] = (now, found)
        self.refresh_data()

    def _idle_summary(self) -> str:
        """The idle holders the badges mark, and the dead ones, over every host."""
        idle = dead = 0
        for u in self.vapp.hosts.values():
            for g in u.snapshot.gpus if u.snapshot else ():
                idle += vr.idle_holders(g)
                dead += (g.metering.dead_holders or 0) if g.metering else 0
        return f"Idle holders (badge:idle): {idle} · dead holders: {dead}"


def _shortened(text: str, head: int = 60, tail: int = 100) -> str:
    """``text`` on one title line: its start (who failed) and its end, where a server's own
    words come after the query it refused (a usage query alone is over 100 characters)."""
    if len(text) <= head + tail + 1:
        return text
    return f"{text[:head]}…{text[-tail:]}"
