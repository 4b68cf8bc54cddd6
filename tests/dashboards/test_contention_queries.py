"""The vGPU host dashboard's starvation tables read the exporter's one verdict (docs/verdicts.md):
the starved vGPUs are those whose share state is starved, and the neighbours above their due are
the vGPUs of the same scheduler that received more than their due. promtool evaluates the
dashboard's own queries on hand-made exported series."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboard_helpers import RULES, generator, instantiate

STEP = 15  # seconds between samples
# (uuid, {vgpu_id: (state, due, received, waited)}) as the exporter publishes them
GPUS = (
    # Equal share, due 1/3 each: vGPU 3 waited half the time and received 1/12 (starved);
    # vGPU 1 received 2/3, a third above its due; vGPU 2 received under its due but is ok.
    (
        "GPU-0",
        {
            1: ("ok", 1 / 3, 2 / 3, 0.0),
            2: ("ok", 1 / 3, 0.25, 0.0),
            3: ("starved", 1 / 3, 1 / 12, 0.5),
        },
    ),
    # Nobody starved: no contention whatever the split.
    ("GPU-1", {4: ("ok", 0.5, 0.7, 0.0), 5: ("ok", 0.5, 0.3, 0.0)}),
    # Best effort, due 1/3: vGPU 7 starved, vGPU 6 received 0.7; vGPU 8 has no verdict.
    (
        "GPU-2",
        {
            6: ("ok", 1 / 3, 0.7, 0.0),
            7: ("starved", 1 / 3, 0.2, 0.2),
            8: ("missed_entries", 1 / 3, 0.1, 0.0),
        },
    ),
)
STATES = ("starved", "ok", "short_window", "missed_entries", "unknown_policy")
TARGET = 'instance="h:9839", job="vgpumon"'


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def series() -> list[dict[str, str]]:
    out = []
    for gpu, (uuid, vgpus) in enumerate(GPUS):
        where = f'{TARGET}, gpu="{gpu}", uuid="{uuid}"'
        for vgpu_id, (state, due, received, waited) in vgpus.items():
            one = f'{where}, vgpu_id="{vgpu_id}"'
            out.append(
                {
                    "series": f'vgpumon_vgpu_info{{{one}, vm_id="id-{vgpu_id}", '
                    f'vm_name="vm-{vgpu_id}", vgpu_type="T"}}',
                    "values": "1x12",
                }
            )
            out += [
                {
                    "series": f'vgpumon_vgpu_scheduler_share_state{{{one}, state="{st}"}}',
                    "values": f"{int(st == state)}x12",
                }
                for st in STATES
            ]
            for name, value in (("due", due), ("received", received), ("waited", waited)):
                out.append(
                    {
                        "series": f"vgpumon_vgpu_scheduler_{name}_share_ratio{{{one}}}",
                        "values": f"{value}x12",
                    }
                )
    return out


def panel_queries(title: str) -> list[str]:
    board = next(b for b in generator().DASHBOARDS if b.uid == "vgpumon-vgpu-host")
    panel = next(p for p in board.panels() if p.title == title)
    return [instantiate(q.expr) for q in panel.queries]


def evaluate(tmp_path: Path, cases: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    shutil.copy(RULES, tmp_path / RULES.name)
    test = {
        "rule_files": [RULES.name],
        "evaluation_interval": f"{STEP}s",
        "tests": [
            {"interval": f"{STEP}s", "input_series": series(), "promql_expr_test": cases},
        ],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test, sort_keys=False))
    return subprocess.run(
        [promtool(), "test", "rules", "test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def per_vgpu(expr: str, values: dict[str, float]) -> dict[str, Any]:
    """``expr`` per (vm_name, vgpu_id), in thousandths, at the end of the series."""
    return {
        "expr": f"round(1000 * sum by (vm_name, vgpu_id) ({expr}))",
        "eval_time": f"{STEP * 12}s",
        "exp_samples": [
            {"labels": f'{{vgpu_id="{v}", vm_name="vm-{v}"}}', "value": round(1000 * x)}
            for v, x in values.items()
        ],
    }


def test_starved_vgpus_and_the_neighbours_above_their_due(tmp_path: Path) -> None:
    ran, due, waited = panel_queries("Starved vGPUs")
    n_ran, n_due, n_above = panel_queries("Neighbours above their due")
    cases = [
        per_vgpu(ran, {"3": 1 / 12, "7": 0.2}),
        per_vgpu(due, {"3": 1 / 3, "7": 1 / 3}),
        per_vgpu(waited, {"3": 0.5, "7": 0.2}),
        per_vgpu(n_ran, {"1": 2 / 3, "6": 0.7}),
        per_vgpu(n_due, {"1": 1 / 3, "6": 1 / 3}),
        per_vgpu(n_above, {"1": 1 / 3, "6": 0.7 - 1 / 3}),
    ]
    result = evaluate(tmp_path, cases)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_expectation_fails(tmp_path: Path) -> None:
    """The check can fail: vGPU 2 (under its due, but ok by the exporter's verdict) is not
    starved."""
    ran, _, _ = panel_queries("Starved vGPUs")
    result = evaluate(tmp_path, [per_vgpu(ran, {"2": 0.25, "3": 1 / 12, "7": 0.2})])
    assert result.returncode != 0 and "vgpu_id" in result.stdout + result.stderr


def test_vgpus_without_a_verdict_say_why(tmp_path: Path) -> None:
    (expr,) = panel_queries("vGPUs without a share verdict")
    case = {
        "expr": f"count by (vm_name, vgpu_id, state) ({expr})",
        "eval_time": f"{STEP * 12}s",
        "exp_samples": [
            {"labels": '{state="missed_entries", vgpu_id="8", vm_name="vm-8"}', "value": 1}
        ],
    }
    result = evaluate(tmp_path, [case])
    assert result.returncode == 0, result.stdout + result.stderr
