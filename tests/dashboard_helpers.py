"""For tests/dashboards and tests/e2e: the dashboard source, the rules, PromQL metric names."""

from __future__ import annotations

import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ci_helpers import in_ci

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = ROOT / "dashboards"
GENERATOR = DASHBOARDS / "generate.py"
OUT = DASHBOARDS / "grafana"
UNUSED = DASHBOARDS / "unused.yml"
RULES = ROOT / "packaging" / "prometheus" / "vgpumon.rules.yml"
METERING_RULES = RULES.with_name("vgpumon-metering.rules.yml")
CAPACITY_RULES = RULES.with_name("vgpumon-capacity.rules.yml")
FLEET_RULES = RULES.with_name("vgpumon-fleet.rules.yml")
# Every rule file the packaging ships (Prometheus loads them all; the PrometheusRule carries them).
RULE_FILES = (RULES, METERING_RULES, CAPACITY_RULES, FLEET_RULES)

# Built-in simulator scenario of each scenario kind a dashboard query names.
SCENARIOS = {
    "vgpu": "kvm-vgpu-timesliced",
    "mig": "h100-mig-gpm",
    "baremetal": "baremetal-8xh100",
    "nvlink": "hgx-8xh100-nvlink",
    "guest": "vgpu-guest",
    "lost": "fault-gpu-lost",
    "metering": "metering-known-load",
    "capacity-homogeneous": "capacity-l40s-homogeneous",
    "capacity-heterogeneous": "capacity-l40s-heterogeneous",
    "capacity-mig": "capacity-a100-mig",
    "driver-surfaces": "driver-surfaces",
}

MATCH_ALL = {
    "$job": ".*",
    "$cluster": ".*",
    "$instance": ".*",
    "$host": ".*",
    "$gpu": ".*",
    "$vm": ".*",
}
# Grafana's interval variables, at the scale of a test that scrapes every second.
# $hour, the Usage dashboard's hidden constant, is the metering rules' hour: their series are
# evaluated every second here, so range totals step by the second.
INTERVALS = {
    "$__rate_interval": "1m",
    "$__range": "1m",
    "$hour": "1s",
    "${hour_seconds}": "1",
    "${__from:date:seconds}": "0",
}


@cache
def generator() -> ModuleType:
    """The dashboards package (dashboards/vgpumon_dashboards), built with the Grafana Foundation
    SDK: a dev-time dependency, so its tests skip where it is not installed (Python < 3.11)."""
    try:
        import grafana_foundation_sdk  # noqa: F401 - only whether the dev extra is there
    except ImportError:
        if in_ci() and sys.version_info >= (3, 11):
            pytest.fail("CI must install the dev extra (grafana-foundation-sdk)")
        pytest.skip("needs the dev extra's Grafana Foundation SDK (Python 3.11 or later)")
    if str(DASHBOARDS) not in sys.path:
        sys.path.insert(0, str(DASHBOARDS))
    import vgpumon_dashboards

    return vgpumon_dashboards


def rules(*paths: Path) -> list[dict[str, Any]]:
    """The rules of ``paths`` (default: every rule file)."""
    found = []
    for path in paths or RULE_FILES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        found += [rule for group in doc["groups"] for rule in group["rules"]]
    return found


def recording_rule_names(*paths: Path) -> set[str]:
    return {rule["record"] for rule in rules(*paths) if "record" in rule}


def instantiate(expr: str, **values: str) -> str:
    """Replace the dashboards' variables: match-all unless given (instance="host:port")."""
    for name, value in {**MATCH_ALL, **INTERVALS}.items():
        expr = expr.replace(name, values.get(name.lstrip("$"), value))
    return expr


def label_values_query(definition: str) -> tuple[str, str]:
    """A variable's query as (PromQL, label whose values the variable lists): Grafana's
    ``label_values(expr, label)`` or ``query_result(expr)`` with a ``/label="(...)"/`` regex."""
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", definition.strip(), re.S)
    if match:
        return f"group by ({match.group(2)}) ({match.group(1)})", match.group(2)
    match = re.fullmatch(r"query_result\((.*)\)", definition.strip(), re.S)
    assert match, definition
    return match.group(1), ""


def variable_values(variable: Any, results: list[dict[str, Any]]) -> set[str]:
    """What Grafana lists for ``variable`` given the results of :func:`label_values_query`."""
    _, label = label_values_query(variable.query)
    if label:
        return {r["metric"][label] for r in results if r["metric"].get(label)}
    pattern = re.compile(variable.regex.strip("/"))
    values = set()
    for r in results:
        # query_result's text form: name{label="value", ...} value timestamp
        labels = ", ".join(f'{k}="{v}"' for k, v in sorted(r["metric"].items()))
        found = pattern.search("{" + labels + "}")
        if found and found.group(1):
            values.add(found.group(1))
    return values


STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
METRIC = re.compile(r"(?<![\w:])(vgpumon[_:][A-Za-z0-9_:]*)")
SELECTOR = re.compile(r"(?<![\w:])(vgpumon_[A-Za-z0-9_]*)\s*\{([^}]*)\}")
LABEL_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")


def metric_names(expr: str) -> set[str]:
    """Every vgpumon metric a PromQL expression names (label values removed first)."""
    return set(METRIC.findall(STRING.sub('""', expr)))


def selector_labels(expr: str) -> list[tuple[str, set[str]]]:
    """(metric, label names its selector matches on) for each ``name{...}`` in the expression."""
    found = []
    for name, body in SELECTOR.findall(STRING.sub('""', expr)):
        found.append((name, set(LABEL_MATCHER.findall(body))))
    return found


def undefined_names(expr: str) -> list[str]:
    """Metric names and selector labels of ``expr`` that vgpumon does not define."""
    from vgpumon.metrics.table import COUNTER, FAMILIES

    families = {f.name: f for f in FAMILIES}
    recorded = recording_rule_names()
    problems = []
    for name in sorted(metric_names(expr)):
        if name in families or name in recorded:
            continue
        base = next(
            (name[: -len(s)] for s in ("_bucket", "_sum", "_count") if name.endswith(s)), None
        )
        histogram = families.get(base or "")
        if histogram is not None and histogram.type not in ("gauge", COUNTER):
            continue
        problems.append(name)
    for name, labels in selector_labels(expr):
        family = families.get(name)
        if family is not None:
            # Target labels (instance, job, the file_sd example's cluster) and the agentless
            # exporter's host label come on top of the family's own.
            unknown = labels - set(family.labels) - {"instance", "job", "cluster", "host"}
            problems.extend(f"{name}{{{label}}}" for label in sorted(unknown))
    return problems
