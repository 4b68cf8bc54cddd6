"""The rules file: promtool accepts it, every alert fires on a broken host and not on a healthy one,
every alert links a runbook section that exists, and the Xid sets match the exporter's catalog."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from ci_helpers import promtool
from rules_cases import (
    CASES,
    ROOT,
    RULES,
    TEST_FILE,
    alerts,
    promtool_tests,
    render_test_file,
)

from vgpumon.export.connections import ConnectionGuard
from vgpumon.export.limits import ServerLimits
from vgpumon.export.serverstats import server_families
from vgpumon.metrics.table import HTTP_SERVER_PREFIX, XID_CATALOG, XID_CRITICAL

sys.path.insert(0, str(ROOT / "packaging" / "kubernetes"))
from generate_prometheusrule import RUNBOOK_BASE

RUNBOOKS = ROOT / "docs" / "runbooks.md"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_check_rules() -> None:
    result = run(promtool(), "check", "rules", str(RULES))
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_promtool_tests_are_the_cases() -> None:
    assert TEST_FILE.read_text(encoding="utf-8") == render_test_file(), (
        "run python tests/packaging/rules_cases.py"
    )


def test_promtool_test_rules() -> None:
    result = run(promtool(), "test", "rules", str(TEST_FILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_rule_fails_the_promtool_tests(tmp_path: Path) -> None:
    """The promtool cases can fail: a GPU-lost alert that never fires is caught."""
    broken = RULES.read_text(encoding="utf-8").replace(
        "expr: vgpumon_gpu_up == 0", "expr: vgpumon_gpu_up == 2"
    )
    assert broken != RULES.read_text(encoding="utf-8")
    rules = tmp_path / "broken.rules.yml"
    rules.write_text(broken)
    test_file = tmp_path / "broken.test.yml"
    test_file.write_text(yaml.safe_dump(promtool_tests(rules), sort_keys=False))
    result = run(promtool(), "test", "rules", str(test_file))
    assert result.returncode != 0
    assert "VgpumonGpuLost" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    cased = {c.alert for c in CASES}
    assert cased == set(alerts()), "one case per alert"
    for case in CASES:
        assert case.fired, f"{case.alert}: no firing case"
        assert case.good, f"{case.alert}: no healthy host"
        assert all(c.alert != case.alert or c is case for c in CASES), "one case per alert"


def runbook_anchors() -> set[str]:
    anchors = set()
    for line in RUNBOOKS.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 -]", "", title).replace(" ", "-"))
    return anchors


def test_every_alert_links_its_runbook_section() -> None:
    """Absolute links (clickable in Alertmanager and Grafana), all from the one base."""
    anchors = runbook_anchors()
    for name, rule in alerts().items():
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOK_BASE}#{name.lower()}", url
        assert name.lower() in anchors, f"docs/runbooks.md has no section {name}"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert {"summary", "description"} <= set(rule["annotations"]), name


def runbook_sections() -> dict[str, str]:
    text = RUNBOOKS.read_text(encoding="utf-8")
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return {p.splitlines()[0].strip().lower(): p for p in parts}


def test_every_runbook_says_what_it_means_what_to_check_and_what_to_do() -> None:
    sections = runbook_sections()
    for name in alerts():
        body = sections[name.lower()]
        for heading in ("**Meaning**", "**Check**", "**Act**"):
            assert heading in body, f"runbook {name} lacks {heading}"


def test_xid_sets_in_the_rules_are_the_exporters_catalog() -> None:
    rules = alerts()
    critical = "|".join(str(x) for x in XID_CRITICAL)
    assert f'xid=~"{critical}"' in rules["VgpumonXidCritical"]["expr"]
    assert f'xid!~"{critical}"' in rules["VgpumonXidInformational"]["expr"]
    assert set(XID_CRITICAL) <= set(XID_CATALOG)


def test_counters_alerts_take_increase_of_exist_before_their_first_event() -> None:
    """increase() needs an earlier sample: a counter an alert watches must be exposed at 0 on a
    healthy host, or its first event would never fire (the golden exposition of a healthy
    bare-metal host and of an NVLink board, taken before any scenario event, show what a fresh
    exporter serves)."""
    golden = "".join(
        (ROOT / "tests" / "golden" / f"{name}.prom").read_text(encoding="utf-8")
        for name in ("baremetal-8xh100", "hgx-8xh100-nvlink")  # NVLink: only the HGX board
    )
    watched = {
        name
        for rule in alerts().values()
        for name in re.findall(r"(?:increase|rate)\((vgpumon_\w+_total)", rule["expr"])
    }
    assert "vgpumon_gpu_xid_errors_total" in watched
    for name in watched:
        if name.startswith(HTTP_SERVER_PREFIX):  # the server's own counts, not a snapshot's
            fresh, _ = server_families(ConnectionGuard(ServerLimits()))()
            assert re.search(rf"^{name}(\{{[^}}]*\}})? 0\.0$", fresh, flags=re.M), name
            continue
        zeros = re.findall(rf"^{name}\{{[^}}]*\}} 0\.0$", golden, flags=re.M)
        assert zeros, f"{name} is not exposed at 0 before its first event"
