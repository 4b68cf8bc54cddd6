"""Every documented metric family is read by a dashboard panel or a rule, or listed in
dashboards/unused.yml with the reason it is in neither: a family nobody looks at is either a
missing panel or a family that should not exist."""

from __future__ import annotations

import json
from typing import Any

import yaml
from dashboard_helpers import OUT, UNUSED, metric_names, rules

from vgpumon.metrics.table import FAMILIES


def dashboard_names(skip: str = "") -> set[str]:
    """Metric names every query of the committed dashboards reads (but those of ``skip``)."""
    names: set[str] = set()
    for path in sorted(OUT.glob("*.json")):
        if path.name == skip:
            continue
        for panel in json.loads(path.read_text(encoding="utf-8"))["panels"]:
            for target in panel.get("targets", []):
                names |= metric_names(target["expr"])
    return names


def used_names() -> set[str]:
    names = dashboard_names()
    for rule in rules():
        names |= metric_names(rule["expr"])
    # Recording rules count as uses of what they record from (and their names are not families).
    return names


def family_is_used(family: str, names: set[str]) -> bool:
    return any(
        n == family or n in {f"{family}_bucket", f"{family}_sum", f"{family}_count"} for n in names
    )


def unused_list() -> dict[str, Any]:
    doc = yaml.safe_load(UNUSED.read_text(encoding="utf-8"))
    return {entry["family"]: entry for entry in doc["families"]}


def test_every_family_is_in_a_panel_a_rule_or_the_unused_list() -> None:
    names = used_names()
    listed = unused_list()
    unseen = sorted(
        f.name for f in FAMILIES if not family_is_used(f.name, names) and f.name not in listed
    )
    assert unseen == [], "add a panel or a rule, or list it in dashboards/unused.yml with why"


def test_the_unused_list_gives_reasons_and_lists_only_unused_families() -> None:
    names = used_names()
    families = {f.name for f in FAMILIES}
    for name, entry in unused_list().items():
        assert name in families, f"{name}: not a family (renamed or removed?)"
        assert not family_is_used(name, names), f"{name}: used now; remove it from the list"
        assert len(entry.get("reason", "")) > 20, f"{name}: say why"


def test_a_family_in_no_panel_is_caught() -> None:
    """The coverage check can fail: without the GPU detail dashboard, fan speed is unseen."""
    names = dashboard_names(skip="vgpumon-gpu.json")
    assert not family_is_used("vgpumon_gpu_fan_speed_ratio", names)
    assert family_is_used("vgpumon_gpu_fan_speed_ratio", used_names())
