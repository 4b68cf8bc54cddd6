"""Summarize ``vgpumon validate --url --json`` runs side by side (bench/device/run_checks.sh).

    python3 bench/device/validate_url_summary.py OUT/validate-url-1.json OUT/validate-url-2.json
    python3 bench/device/validate_url_summary.py --wait-ready http://127.0.0.1:9839

Prints a markdown table (step, check, expected, the measured value of each run, status) and each
run's notes, counts and elapsed time: what docs/validation.md records for a device run. With
``--wait-ready URL`` it waits (at most 60 s) for the exporter's ``/-/ready`` and prints its
``vgpumon_sampler_*`` series (the interval and cadences the run will read).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path


def wait_ready(base: str) -> int:
    for _ in range(120):
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as resp:
                resp.read()
            break
        except OSError:
            time.sleep(0.5)
    with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
        body = resp.read().decode()
    print("\n".join(line for line in body.splitlines() if line.startswith("vgpumon_sampler_")))
    return 0


def main(paths: list[str]) -> int:
    if paths[:1] == ["--wait-ready"]:
        return wait_ready(paths[1])
    runs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    head = " | ".join(f"run {i}" for i in range(1, len(runs) + 1))
    print(f"| step | check | expected | {head} |")
    print("|---|---|---|" + "---|" * len(runs))
    rows: dict[tuple[str, str, str], list[str]] = {}
    for i, run in enumerate(runs):
        for step in run["steps"]:
            seen: dict[str, int] = {}
            for check in step["checks"]:
                # A process check's subject names its pid, which differs between runs: rows are
                # matched by the check's place in its step instead.
                nth = seen[check["check"]] = seen.get(check["check"], 0) + 1
                key = (step["name"], check["check"], str(nth))
                cells = rows.setdefault(key, ["" for _ in runs] + [check["expected"]])
                subject = f" [{check['subject']}]" if check.get("subject") else ""
                cells[i] = f"{check['measured']}{subject} ({check['status']})"
    for (step, check, _), cells in rows.items():
        print(f"| {step} | {check} | {cells[-1]} | " + " | ".join(cells[:-1]) + " |")
    for i, run in enumerate(runs, 1):
        print(f"\nrun {i}: exit {run['exit_code']}, counts {run['counts']}, {run['elapsed_s']} s")
        for note in run["notes"]:
            print(f"  note: {note}")
        for failure in run["failures"]:
            print(f"  failure: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
