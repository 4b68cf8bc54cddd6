"""The fleet rules file (vgpumon-fleet.rules.yml): promtool accepts it and its unit tests pass, a
broken rule fails them, it keeps every target label (never ``by``), names only what vgpumon
exports, gives ``top --prometheus`` every figure it reads, and its badges read the verdicts.
(That each host's figures are the fleet screen's row of it: tests/e2e/test_top_prometheus_e2e.py.)
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from ci_helpers import promtool
from dashboard_helpers import FLEET_RULES, metric_names

from vgpumon.metrics.table import FAMILIES
from vgpumon.sources.prometheus_fleet import BY_CC, BY_MODE, RECOVERY, ROLLUP_QUERIES, ROLLUPS, XIDS
from vgpumon.view import badges

TESTS = FLEET_RULES.with_name("vgpumon-fleet.rules.test.yml")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def rules() -> list[dict[str, str]]:
    doc = yaml.safe_load(FLEET_RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def expr(record: str) -> str:
    return next(r["expr"] for r in rules() if r.get("record") == record)


def test_promtool_checks_and_tests_the_rules() -> None:
    checked = run(promtool(), "check", "rules", str(FLEET_RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool(), "test", "rules", str(TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_broken_rule_fails_the_promtool_tests(tmp_path: Path) -> None:
    """Counting a lost GPU's mode as the MIG one is caught."""
    text = FLEET_RULES.read_text(encoding="utf-8")
    broken = text.replace('"mode", "unknown"', '"mode", "mig"')
    assert broken != text
    (tmp_path / FLEET_RULES.name).write_text(broken, encoding="utf-8")
    (tmp_path / TESTS.name).write_text(TESTS.read_text(encoding="utf-8"), encoding="utf-8")
    result = run(promtool(), "test", "rules", str(tmp_path / TESTS.name))
    assert result.returncode != 0
    assert "count_by_mode" in result.stdout + result.stderr


def test_every_rule_keeps_the_target_labels() -> None:
    """Aggregations are ``without`` vgpumon's own labels: instance, job, cluster and a
    federated Prometheus' external labels all stay on each host's series."""
    families = {f.name: f for f in FAMILIES}
    own = {label for f in FAMILIES for label in f.labels}
    for rule in rules():
        text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', rule["expr"])
        assert not re.search(r"\bby\s*\(", text), rule["record"]
        for group in re.findall(r"without \(([^)]*)\)", text):
            dropped = {x.strip() for x in group.split(",") if x.strip()}
            assert dropped <= own, (rule["record"], dropped - own)
        for name in metric_names(rule["expr"]):
            assert name in families or name.startswith("vgpumon:"), (rule["record"], name)


def test_top_reads_every_figure_the_rules_record() -> None:
    records = {r["record"] for r in rules()}
    read = set(ROLLUP_QUERIES) - {"vgpumon_sampler_wedged", "vgpumon_up"}
    # The rule top does not read is a step of others: a vGPU's lease overdue (two counts).
    steps = {"vgpumon:vgpu_license_expiring:info"}
    assert read | steps == records
    assert {*ROLLUPS, BY_MODE, BY_CC, RECOVERY, XIDS} == read


def test_the_host_memory_sums_the_exporter_s_memory_in_use_and_works_nothing_out() -> None:
    """What a GPU holds on a host of MIG-backed vGPUs is decided by the exporter
    (vgpumon.collect.memory_in_use) and exported; the rule sums that family and reads nothing
    it could decide it again from."""
    record = "vgpumon:host_gpu_memory_used_bytes:sum"
    assert metric_names(expr(record)) == {"vgpumon_gpu_memory_in_use_bytes"}


def test_the_badges_read_the_exporter_s_verdicts_and_thresholds() -> None:
    """Overdue leases are the collector's verdict, read, never decided again here; idle
    holders are counted at the badge's thresholds."""
    assert expr("vgpumon:vgpu_license_expiring:info").strip() == (
        "vgpumon_vgpu_license_renewal_overdue == 1"
    )
    for record in (
        "vgpumon:host_licenses_expiring:count",
        "vgpumon:host_vgpus_license_problem:count",
    ):
        assert "expiry_timestamp" not in expr(record)
    assert "vgpumon_guest_license_renewal_overdue == 1" in expr(
        "vgpumon:host_licenses_expiring:count"
    )
    idle = expr("vgpumon:host_idle_holders:count")
    assert f"vgpumon_vgpu_idle_seconds >= {badges.IDLE_VGPU_AFTER_SECONDS}" in idle
    assert f"vgpumon_process_idle_seconds >= {badges.IDLE_PROCESS_AFTER_SECONDS}" in idle
