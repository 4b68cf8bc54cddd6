"""The Usage dashboard: billing panels sum the metering rules' hourly series the way `vgpumon
usage` does, and its idle colours turn red where the metering alerts fire."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import yaml
from dashboard_helpers import METERING_RULES, OUT, instantiate

from vgpumon.sources.usage import query

DOC = OUT / "vgpumon-usage.json"


def panels() -> dict[str, dict[str, Any]]:
    doc = json.loads(DOC.read_text(encoding="utf-8"))
    return {p["title"]: p for p in doc["panels"] if p["type"] != "row"}


def alert_threshold(name: str) -> float:
    doc = yaml.safe_load(METERING_RULES.read_text(encoding="utf-8"))
    rule = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == name)
    match = re.search(r">=\s*([\d\s*]+)$", rule["expr"].strip())
    assert match, rule["expr"]
    return math.prod(float(factor) for factor in match.group(1).split("*"))


def red_from(panel: dict[str, Any], column: str | None = None) -> float:
    if column is None:
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    else:
        override = next(
            o for o in panel["fieldConfig"]["overrides"] if o["matcher"]["options"] == column
        )
        steps = next(p["value"] for p in override["properties"] if p["id"] == "thresholds")["steps"]
    return min(s["value"] for s in steps if s["color"] == "red" and s["value"] is not None)


def test_idle_colours_turn_red_where_the_alerts_fire() -> None:
    found = panels()
    vgpu_alert = alert_threshold("VgpumonVgpuIdle")
    holder_alert = alert_threshold("VgpumonIdleMemoryHolder")
    assert (vgpu_alert, holder_alert) == (4 * 3600, 30 * 60)
    assert red_from(found["Idle vGPUs"], "Idle for") == vgpu_alert
    holders = found["Processes holding memory without using the GPU"]
    assert red_from(holders, "Idle for") == holder_alert
    assert red_from(found["Longest idle memory holder per GPU"]) == holder_alert


def test_billing_sums_whole_hours_as_vgpumon_usage_does() -> None:
    """Over 30 days, a billing query holds exactly the query `vgpumon usage` runs."""
    doc = json.loads(DOC.read_text(encoding="utf-8"))
    hour = next(v for v in doc["templating"]["list"] if v["name"] == "hour")
    assert (hour["type"], hour["query"], hour["hide"]) == ("constant", "1h", 2)
    tenant = panels()["By tenant"]
    days30 = 30 * 86400
    for target, quantity in zip(
        tenant["targets"], ("gpu_hours", "memory_gib_hours", "energy_kwh"), strict=True
    ):
        # As Grafana fills them in for the 30 days from the epoch.
        expr = (
            target["expr"]
            .replace("$__range", f"{days30}s")
            .replace("${__from:date:seconds}", "0")
            .replace("${hour_seconds}", "3600")
            .replace("$hour", "1h")
        )
        assert query("tenant", quantity, 0, days30) in instantiate(expr)
    billing = [
        t["expr"]
        for p in panels().values()
        for t in p["targets"]
        if re.search(r"sum_over_time\(\(vgpumon:\w+:increase1h", t["expr"])
    ]
    assert billing and all("[$__range:$hour]" in e for e in billing)
    assert all("vector(time()) - ${hour_seconds} >= ${__from:date:seconds}" in e for e in billing)
