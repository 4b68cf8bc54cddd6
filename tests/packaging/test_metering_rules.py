"""The metering rules: promtool accepts and passes them, the cases can fail, every alert has a
runbook section, every family the rules read is one the exporter has, and the OpenCost adapter
emits the names and labels OpenCost queries."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vgpumon.metrics.table import FAMILIES

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "packaging" / "prometheus"
RULES = PROM / "vgpumon-metering.rules.yml"
TESTS = PROM / "vgpumon-metering.rules.test.yml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
sys.path.insert(0, str(ROOT / "packaging" / "kubernetes"))
from generate_prometheusrule import RUNBOOK_BASE  # noqa: E402

# What OpenCost's allocation queries (docs/metering.md, "OpenCost"): the series names, and the
# labels it groups them by.
OPENCOST = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": {"container", "pod", "namespace"},
    "DCGM_FI_DEV_DEC_UTIL": {"container", "pod", "namespace", "device", "modelName", "UUID"},
}


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def run(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def rules() -> list[dict[str, object]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [r for g in doc["groups"] for r in g["rules"]]


def test_promtool_checks_and_tests_the_rules() -> None:
    checked = run(promtool(), "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool(), "test", "rules", str(TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_wrong_rule_fails_the_cases(tmp_path: Path) -> None:
    """GPU-hours counted in minutes instead of hours: the hand-computed totals catch it."""
    text = RULES.read_text(encoding="utf-8")
    broken = text.replace(
        "(increase(vgpumon_pod_busy_seconds_total[1h])) / 3600",
        "(increase(vgpumon_pod_busy_seconds_total[1h])) / 60",
    )
    assert broken != text
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / TESTS.name).write_text(TESTS.read_text(encoding="utf-8"))
    result = run(promtool(), "test", "rules", TESTS.name, cwd=tmp_path)
    assert result.returncode != 0
    assert "vgpumon:pod_gpu_hours:increase1h" in result.stdout + result.stderr


def test_every_alert_links_a_runbook_section() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in RUNBOOKS.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    alerts = [r for r in rules() if "alert" in r]
    assert alerts
    for rule in alerts:
        url = rule["annotations"]["runbook_url"]  # type: ignore[index]
        assert url == f"{RUNBOOK_BASE}#{str(rule['alert']).lower()}"
        assert url.split("#")[1] in headings, f"no runbook section for {rule['alert']}"


def test_the_rules_read_only_families_the_exporter_has() -> None:
    known = {f.name for f in FAMILIES}
    recorded = {str(r["record"]) for r in rules() if "record" in r}
    for rule in rules():
        for name in re.findall(r"\b(vgpumon_[a-z0-9_]+)", str(rule["expr"])):
            assert name in known, f"{name} is not an exporter family"
        for name in re.findall(r"\b(vgpumon:[a-z0-9_:]+)", str(rule["expr"])):
            assert name in recorded, f"{name} is recorded nowhere"


def test_opencost_adapter_emits_what_opencost_reads() -> None:
    """The recorded names, and the labels OpenCost groups by, survive the expressions."""
    tests = yaml.safe_load(TESTS.read_text(encoding="utf-8"))
    seen: dict[str, set[str]] = {}
    for case in tests["tests"]:
        for expr in case.get("promql_expr_test", ()):
            for sample in expr["exp_samples"]:
                name, _, body = sample["labels"].partition("{")
                labels = set(re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="', body))
                seen.setdefault(name, set()).update(labels)
    for name, labels in OPENCOST.items():
        assert name in {str(r.get("record")) for r in rules()}
        assert labels <= seen.get(name, set()), f"{name} lacks {labels - seen.get(name, set())}"
