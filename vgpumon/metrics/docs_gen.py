"""Generate ``docs/metrics.md`` from the metric table.

The page is never edited by hand: ``python -m vgpumon.metrics.docs_gen`` rewrites it, and a test
fails when the committed file differs from what the table says.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vgpumon.metrics.table import EXPORTER, FAMILIES, SECTIONS, Family

DOC_PATH = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

_INTRO = """\
# vgpumon metrics

Generated from the metric table in `vgpumon/metrics/table.py` by
`python -m vgpumon.metrics.docs_gen`; do not edit by hand (a test compares them).
Rules and the reasoning behind names: `docs/exporter.md`.

- Names are what PromQL sees; counters already end in `_total`. In OpenMetrics the family name of
  a counter drops the `_total` (`# TYPE vgpumon_nvml_errors counter`), its samples keep it.
- `gpu` is the NVML index and `uuid` the GPU UUID; they are on every per-GPU series. Descriptive
  labels live in the `_info` families (value 1): join them with
  `* on (gpu, uuid) group_left(name) vgpumon_gpu_info`.
- A value the driver does not give is absent, never 0. A GPU that is lost or hung keeps only
  `vgpumon_gpu_up 0` and `vgpumon_gpu_info`.
- State sets have one series per state: 1 for the current state, 0 for the others.
- Collector: the `--collector.NAME` whose data fills the family (`exporter`: the exporter itself).
- Agentless hosts (`vgpumon serve --ssh.targets`, `docs/agentless.md`): every family below, each
  series with a `host` label in front; the SSH poll itself is the collector `ssh`.
- Families of your own: NVML field values declared under `fields:` in the serve config
  (`docs/exporter.md`, "Extra NVML fields") are exported beside these, per GPU with `gpu` and
  `uuid`, by the collector `fields`. They are not listed here: the config names them, and it may
  not take a name of this table.
"""


def _row(f: Family) -> str:
    labels = ", ".join(f"`{label}`" for label in f.labels) or "—"
    kind = f"{f.type} (info)" if f.info else f.type
    unit = f.unit or "—"
    return f"| `{f.name}` | {kind} | {unit} | {labels} | {f.collector} | {f.help} |"


def render_markdown() -> str:
    parts = [_INTRO]
    for section in SECTIONS:
        rows = [f for f in FAMILIES if f.section == section]
        if not rows:
            continue
        parts.append(f"\n## {section}\n")
        parts.append("| name | type | unit | labels | collector | help |")
        parts.append("|---|---|---|---|---|---|")
        parts.extend(_row(f) for f in rows)
    count = len(FAMILIES)
    exporter = sum(1 for f in FAMILIES if f.collector == EXPORTER)
    parts.append(f"\n{count} families ({exporter} about the exporter itself).\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--stdout", action="store_true", help=f"print instead of writing {DOC_PATH}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    text = render_markdown()
    if args.stdout:
        sys.stdout.write(text)
    elif args.check:
        current = DOC_PATH.read_text(encoding="utf-8") if DOC_PATH.exists() else ""
        if current != text:
            print(f"{DOC_PATH} is out of date: run python -m vgpumon.metrics.docs_gen")
            return 1
    else:
        DOC_PATH.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
