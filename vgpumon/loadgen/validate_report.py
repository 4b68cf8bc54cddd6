"""A validate run's final report: JSON, and a table (rich where installed, plain text otherwise).

The plain form exists for minimal images (a rented GPU machine, a container with only the runtime
dependencies someone chose): a validation must still be readable there.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from vgpumon.loadgen.validate_run import NOT_RUN, Report
from vgpumon.loadgen.validate_steps import ERROR, FAIL, PASS, SKIP

REPORT_VERSION = 1


def report_json(report: Report) -> str:
    data: dict[str, Any] = {"report_version": REPORT_VERSION, **report.to_dict()}
    return json.dumps(data, indent=2, sort_keys=False)


def summary_line(report: Report) -> str:
    counts = report.counts()
    text = (
        f"{'PASS' if report.ok else 'FAIL'}: {counts[PASS]} passed, {counts[FAIL]} failed, "
        f"{counts[SKIP]} skipped, {counts[ERROR]} errors"
    )
    if counts[NOT_RUN]:
        text += f", {counts[NOT_RUN]} steps not run"
    return text + f" in {report.elapsed_s:.1f} s"


def plain_report(report: Report) -> str:
    """The final table as fixed-width text."""
    lines = []
    if report.target is not None:
        lines.append(f"target: {report.target.describe()}")
    lines.append(f"readings: {report.source}; load: {report.driver}")
    rows = [("step", "check", "expected", "measured", "result", "note")]
    for result in report.steps:
        if not result.checks:
            rows.append((result.step.name, "", "", "", result.status.upper(), result.error or ""))
        for j, check in enumerate(result.checks):
            rows.append(
                (
                    result.step.name if j == 0 else "",
                    check.label,
                    check.expected,
                    check.measured,
                    check.status.upper(),
                    check.reason,
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(5)]
        lines.append("  ".join([*cells, row[5]]).rstrip())
    lines.extend(f"note: {note}" for note in report.notes)
    lines.append(summary_line(report))
    if report.aborted:
        lines.append(f"stopped early: {report.aborted}")
    lines.extend(check.message for check in report.failures())
    return "\n".join(lines) + "\n"


def rich_available() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def print_report(report: Report, *, stream: TextIO | None = None, width: int | None = None) -> None:
    """The table on ``stream`` (stdout): rich's when rich is installed, plain text otherwise."""
    out = stream or sys.stdout
    if not rich_available():
        out.write(plain_report(report))
        return
    from rich.console import Console

    from vgpumon.loadgen.validate_display import print_rich_report

    print_rich_report(report, Console(file=out, width=width))
