"""validate on a terminal, with rich: the live display while it runs and the final table.

The live display goes to stderr (and only to a terminal), so ``--json`` output and the final table
on stdout stay clean for pipes; each finished step leaves one summary line above the live area.
rich is a dependency of vgpumon, so there is no second, plain-text drawing of the table: a pipe
gets the same table at a fixed width (see :func:`print_report`).
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from vgpumon.loadgen.spec import format_bytes
from vgpumon.text import printable
from vgpumon.validate.readings import Reading
from vgpumon.validate.report import summary_line
from vgpumon.validate.run import NOT_RUN, Progress, Report, StepResult
from vgpumon.validate.steps import ERROR, FAIL, PASS, SKIP, Step, pct
from vgpumon.view.tables import TextTable

STYLES = {PASS: "green", FAIL: "bold red", SKIP: "yellow", ERROR: "bold red", NOT_RUN: "dim"}
ICONS = {PASS: "✔", FAIL: "✘", SKIP: "–", ERROR: "✘", NOT_RUN: "·"}


def _status_text(status: str) -> Text:
    return Text(status.upper() if status != NOT_RUN else status, style=STYLES.get(status, ""))


def _reading_text(reading: Reading | None) -> str:
    if reading is None:
        return ""
    parts = []
    if reading.utilization is not None:
        parts.append(f"util {pct(reading.utilization)}")
    if reading.gpm_sm_active is not None:
        parts.append(f"GPM SM {pct(reading.gpm_sm_active)}")
    if reading.memory_used_bytes is not None:
        parts.append(f"mem {format_bytes(reading.memory_used_bytes)}")
    if reading.processes is not None:
        parts.append(f"{len(reading.processes)} process(es)")
    if reading.error:
        parts.append(f"error: {reading.error}")
    return ", ".join(parts)


def step_summary(result: StepResult) -> Text:
    """One line for a finished step: its status and what it measured."""
    line = Text()
    line.append(f"{ICONS.get(result.status, '?')} ", style=STYLES.get(result.status, ""))
    line.append(f"{result.step.name:<14}", style="bold")
    line.append_text(_status_text(result.status))
    if result.error:
        line.append(f"  {printable(result.error)}", style="red")
        return line
    shown = []
    for check in result.checks:
        if check.status == SKIP or check.check.startswith("process"):
            continue
        shown.append(f"{check.label} {check.measured}")
    bad = [c for c in result.checks if c.status in (FAIL, ERROR)]
    if shown:
        line.append(printable("  " + ", ".join(shown)))
    if bad:
        line.append(f"  ({len(bad)} failed)", style="red")
    return line


class RichProgress(Progress):
    """Live progress on a terminal: the current step, its phase, the latest reading."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._live: Live | None = None
        self._total = 0
        self._index = 0
        self._step: Step | None = None
        self._phase = ""
        self._fraction: float | None = None
        self._reading: Reading | None = None
        self._spinner = Spinner("dots")

    def __enter__(self) -> RichProgress:
        self._live = Live(
            self, console=self.console, refresh_per_second=8, transient=True, redirect_stdout=False
        )
        self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __rich__(self) -> RenderableType:
        if self._step is None:
            return Text("vgpumon validate: starting…", style="dim")
        head = Table.grid(padding=(0, 1))
        head.add_row(
            self._spinner,
            Text(f"{self._step.name}", style="bold"),
            Text(f"({self._index + 1}/{self._total})", style="dim"),
            Text(self._step.description, style="dim"),
        )
        status = Table.grid(padding=(0, 1))
        bar: RenderableType = (
            ProgressBar(
                total=1.0,
                completed=self._fraction,
                width=30,
                complete_style="cyan",
                finished_style="green",
            )
            if self._fraction is not None
            else Text("")
        )
        status.add_row(Text(f"  {self._phase}"), bar)
        reading = _reading_text(self._reading)
        if reading:
            return Group(head, status, Text(f"  {reading}", style="dim"))
        return Group(head, status)

    def started(self, report: Report) -> None:
        self._total = len(report.plan.steps)
        target = report.target.describe() if report.target is not None else "?"
        # Text, never markup, and printable: the target's names come from the exporter read.
        self.console.print(Text(printable(f"vgpumon validate: {target}"), style="bold"))
        readings = f"  readings: {report.source}; load: {report.driver}"
        self.console.print(Text(printable(readings), style="dim"))
        for note in report.notes:
            self.console.print(Text(printable(f"  note: {note}"), style="dim"))

    def step_started(self, index: int, step: Step) -> None:
        self._index, self._step = index, step
        self._phase, self._fraction, self._reading = "", None, None

    def phase(self, step: Step, text: str, fraction: float | None = None) -> None:
        self._phase, self._fraction = text, fraction

    def reading(self, step: Step, reading: Reading, fraction: float) -> None:
        self._phase, self._fraction, self._reading = "measuring", fraction, reading

    def step_finished(self, result: StepResult) -> None:
        self.console.print(step_summary(result))

    def finished(self, report: Report) -> None:
        self._step = None


def report_table(report: Report) -> Table:
    """Every check of every step: expected, measured, result, and why."""
    table = TextTable(title="vgpumon validate", title_justify="left", show_lines=False)
    table.add_column("step", style="bold", no_wrap=True)
    table.add_column("check")
    table.add_column("expected")
    table.add_column("measured")
    table.add_column("result", no_wrap=True)
    table.add_column("note", overflow="fold")
    for i, result in enumerate(report.steps):
        if i:
            table.add_section()
        if not result.checks:
            table.add_row(
                result.step.name, "", "", "", _status_text(result.status), result.error or ""
            )
            continue
        for j, check in enumerate(result.checks):
            table.add_row(
                result.step.name if j == 0 else "",
                check.label if check.check != "step" else "step",
                check.expected,
                check.measured,
                _status_text(check.status),
                check.reason,
            )
    return table


def print_report(report: Report, *, stream: TextIO | None = None, width: int | None = None) -> None:
    """The final table, notes, summary and failures on ``stream`` (stdout).

    ``width`` None is the terminal's; a pipe or a file is given one wide enough that every row
    stays on one line.
    """
    console = Console(file=stream or sys.stdout, width=width)
    if report.target is not None:
        console.print(Text(printable(f"target: {report.target.describe()}")))
    console.print(Text(printable(f"readings: {report.source}; load: {report.driver}")))
    console.print(report_table(report))
    for note in report.notes:
        console.print(Text(printable(f"note: {note}"), style="dim"))
    console.print(Text(summary_line(report), style=STYLES[PASS if report.ok else FAIL]))
    if report.aborted:
        console.print(Text(printable(f"stopped early: {report.aborted}"), style="bold red"))
    for check in report.failures():
        console.print(Text(printable(check.message), style="red"))
