"""The dashboards tell agentless hosts apart: one exporter (serve --ssh.targets) serving two ESXi
hosts, each with a GPU 0. promtool evaluates the dashboards' own queries over that exposition: $host
lists both hosts, and a query narrowed to one host returns that host's GPUs only."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import yaml
from ci_helpers import promtool
from dashboard_helpers import generator, instantiate, label_values_query
from export_helpers import rich_snapshot, samples_by_name

from vgpumon.metrics.exposition import render
from vgpumon.metrics.hosts import HOST_FAMILIES, HostSnapshot, HostsView

TARGET = {"instance": "esxi-exporter:9839", "job": "vgpumon"}


def input_series(names: tuple[str, ...]) -> list[dict[str, str]]:
    """Two agentless hosts' samples of ``names`` as promtool input series (constant values)."""
    snapshot = rich_snapshot()
    view = HostsView(
        hosts=(
            HostSnapshot("esxi-1", snapshot),
            HostSnapshot("esxi-2", dataclasses.replace(snapshot, source="other")),
        ),
        source="test",
    )
    samples = samples_by_name(render(view, families=HOST_FAMILIES).decode())
    series = []
    for name in names:
        for labels, value in samples[name]:
            inner = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **TARGET}.items()))
            series.append({"series": f"{name}{{{inner}}}", "values": f"{value}x5"})
    return series


def expr_test(tmp_path: Path, cases: list[tuple[str, float]]) -> subprocess.CompletedProcess[str]:
    rules = tmp_path / "empty.rules.yml"
    rules.write_text("groups: []\n")
    doc: dict[str, Any] = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(("vgpumon_gpu_info", "vgpumon_gpu_up")),
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "2m", "exp_samples": [{"labels": "{}", "value": v}]}
                    for expr, v in cases
                ],
            }
        ],
    }
    path = tmp_path / "test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run(
        [promtool(), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def gpus_per_host() -> int:
    return len(rich_snapshot().gpus)


def test_host_variable_lists_every_agentless_host_and_narrows_the_queries(tmp_path: Path) -> None:
    gen = generator()
    host_values, _ = label_values_query(gen.VARIABLES["host"].query)
    gpu_detail = next(b for b in gen.DASHBOARDS if b.uid == "vgpumon-gpu")
    (identity,) = next(p for p in gpu_detail.panels() if p.title == "GPU").queries
    cases = [
        (f"count({instantiate(host_values)})", 2.0),
        (f"count({instantiate(identity.expr)})", 2.0 * gpus_per_host()),
        (f"count({instantiate(identity.expr, host='esxi-1')})", float(gpus_per_host())),
    ]
    result = expr_test(tmp_path, cases)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_wrong_host_count_fails(tmp_path: Path) -> None:
    """The promtool check can fail: three hosts are not two."""
    gen = generator()
    host_values, _ = label_values_query(gen.VARIABLES["host"].query)
    result = expr_test(tmp_path, [(f"count({instantiate(host_values)})", 3.0)])
    assert result.returncode != 0
