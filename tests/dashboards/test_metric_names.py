"""Dashboards and rules name only metrics (and selector labels) that vgpumon defines.

Names come from the metric table (vgpumon/metrics/table.py; counters with their ``_total``,
histogram parts as ``_bucket``/``_sum``/``_count`` of a histogram family) or from a recording rule
of packaging/prometheus/vgpumon.rules.yml.
"""

from __future__ import annotations

import pytest
from dashboard_helpers import generator, metric_names, rules, undefined_names


def dashboard_exprs() -> list[tuple[str, str]]:
    gen = generator()
    found = []
    for dashboard in gen.DASHBOARDS:
        for panel, query in dashboard.queries():
            found.append((f"{dashboard.uid} / {panel.title}", query.expr))
        for name in dashboard.variables:
            found.append((f"{dashboard.uid} / ${name}", gen.VARIABLES[name].query))
    return found


def test_every_dashboard_query_names_defined_metrics() -> None:
    exprs = dashboard_exprs()
    assert len(exprs) > 80
    problems = {where: bad for where, expr in exprs if (bad := undefined_names(expr))}
    assert problems == {}


def test_every_rule_names_defined_metrics() -> None:
    problems = {
        rule.get("alert", rule.get("record")): bad
        for rule in rules()
        if (bad := undefined_names(rule["expr"]))
    }
    assert problems == {}


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        # a counter without its _total
        ("increase(vgpumon_gpu_xid_errors[5m])", "vgpumon_gpu_xid_errors"),
        # a typo
        ("vgpumon_gpu_utilisation_ratio", "vgpumon_gpu_utilisation_ratio"),
        # _bucket of a gauge is not a histogram part
        ("vgpumon_gpu_power_watts_bucket", "vgpumon_gpu_power_watts_bucket"),
        # a recording rule that does not exist
        ("vgpumon:gpu_power:sum", "vgpumon:gpu_power:sum"),
        # a label the family does not have
        ('vgpumon_gpu_power_watts{vm_id="x"}', "vgpumon_gpu_power_watts{vm_id}"),
    ],
)
def test_planted_violations_are_caught(expr: str, problem: str) -> None:
    assert problem in undefined_names(expr)


def test_label_values_are_not_taken_for_metric_names() -> None:
    expr = 'vgpumon_up{instance="vgpumon_fake_total:9839"} or vgpumon:mig_memory_used:ratio'
    assert metric_names(expr) == {"vgpumon_up", "vgpumon:mig_memory_used:ratio"}
    assert undefined_names(expr) == []
