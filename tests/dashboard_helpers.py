"""For tests/dashboards and tests/e2e: the dashboard source, the rules, PromQL metric names."""

from __future__ import annotations

import importlib.util
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
GENERATOR = ROOT / "dashboards" / "generate.py"
RULES = ROOT / "packaging" / "prometheus" / "vgpumon.rules.yml"

# Built-in simulator scenario of each scenario kind a dashboard query names.
SCENARIOS = {
    "vgpu": "kvm-vgpu-timesliced",
    "mig": "h100-mig-gpm",
    "baremetal": "baremetal-8xh100",
    "license": "vgpu-license-expiry",
}

MATCH_ALL = {"$instance": ".*", "$gpu": ".*", "$vm": ".*"}
# Grafana's interval variables, at the scale of a test that scrapes every second.
INTERVALS = {"$__rate_interval": "1m", "$__range": "1m"}


@cache
def generator() -> ModuleType:
    """dashboards/generate.py is a script, not a package module: load it by path."""
    spec = importlib.util.spec_from_file_location("vgpumon_dashboards_generate", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building classes
    spec.loader.exec_module(module)
    return module


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def recording_rule_names() -> set[str]:
    return {rule["record"] for rule in rules() if "record" in rule}


def instantiate(expr: str, **values: str) -> str:
    """Replace the dashboards' variables: match-all unless given (instance="host:port")."""
    for name, value in {**MATCH_ALL, **INTERVALS}.items():
        expr = expr.replace(name, values.get(name.lstrip("$"), value))
    return expr


def label_values_query(definition: str) -> str:
    """Grafana's ``label_values(expr, label)`` as the PromQL query that lists the same values."""
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", definition.strip())
    assert match, definition
    return f"group by ({match.group(2)}) ({match.group(1)})"


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
            unknown = labels - set(family.labels) - {"instance", "job"}
            problems.extend(f"{name}{{{label}}}" for label in sorted(unknown))
    return problems
