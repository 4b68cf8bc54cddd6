"""The capacity rules file: promtool accepts it and its unit tests pass, a broken rule fails them,
and every metric and label it names is one vgpumon exports."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from dashboard_helpers import metric_names, selector_labels

from vgpumon.metrics.table import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "packaging" / "prometheus" / "vgpumon-capacity.rules.yml"
TESTS = RULES.with_name("vgpumon-capacity.rules.test.yml")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def rules() -> list[dict[str, str]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_promtool_check_rules() -> None:
    result = run(promtool(), "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_test_rules() -> None:
    result = run(promtool(), "test", "rules", str(TESTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_rule_fails_the_promtool_tests(tmp_path: Path) -> None:
    """Summing stranded framebuffer over the wrong family is caught."""
    text = RULES.read_text(encoding="utf-8")
    broken = text.replace(
        "sum by (cluster) (vgpumon_gpu_vgpu_framebuffer_stranded_bytes)",
        "sum by (cluster) (vgpumon_gpu_vgpu_framebuffer_free_bytes)",
    )
    assert broken != text
    (tmp_path / RULES.name).write_text(broken, encoding="utf-8")
    (tmp_path / TESTS.name).write_text(TESTS.read_text(encoding="utf-8"), encoding="utf-8")
    result = run(promtool(), "test", "rules", str(tmp_path / TESTS.name))
    assert result.returncode != 0
    assert "stranded_bytes:cluster_sum" in result.stdout + result.stderr


def test_rules_name_only_what_vgpumon_exports() -> None:
    families = {f.name: f for f in FAMILIES}
    recorded = {r["record"] for r in rules()}
    for rule in rules():
        for name in metric_names(rule["expr"]):
            assert name in families or name in recorded, f"{rule['record']}: {name}"
        for name, labels in selector_labels(rule["expr"]):
            if name in families:
                assert labels <= {*families[name].labels, "instance", "job"}
        # Grouping labels are the families' labels, the target's, the operator's cluster, or
        # the host label an agentless exporter (serve --ssh.targets) puts on each of its hosts'
        # series.
        for group in re.findall(r"(?:by|on) \(([^)]*)\)", rule["expr"]):
            for label in (x.strip() for x in group.split(",") if x.strip()):
                known = {name for f in FAMILIES for name in f.labels}
                assert label in known | {"instance", "job", "cluster", "host"}, label
