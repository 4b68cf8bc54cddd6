"""A validate run's final report as data: the JSON document and the one-line summary.

Both are plain text with no terminal styling, so ``--json`` output and scripts that read the
summary line do not depend on how the table is drawn (:mod:`vgpumon.validate.display`, rich).
"""

from __future__ import annotations

import json
from typing import Any

from vgpumon.validate.run import NOT_RUN, Report
from vgpumon.validate.steps import ERROR, FAIL, PASS, SKIP

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
