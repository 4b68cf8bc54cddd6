"""The churn scenario over 30 minutes, through every alert rule: VMs shut down are no alert.

``vgpu-churn`` starts a VM every 2 s and shuts it down 7 s later, 900 VMs in half an hour. The
sampler reads the simulated host every second, as ``serve`` does, with the VMs' states as libvirt
gives them (each VM runs while its vGPU is listed and is destroyed with it: shut down) through the
same departure tracker the libvirt enricher runs; the exporter's series are taken every 15 s, as a
scrape would take them. promtool then
evaluates every alert of vgpumon.rules.yml over the 30 simulated minutes: none fires (the old
VgpumonVgpuVanished, which watched vgpumon_vgpu_info disappear, fired for every VM). A control
run keeps one VM running after its vGPU went away: that one, and only it, is VgpumonVgpuVanished.
"""

from __future__ import annotations

import asyncio
import re
from functools import cache
from pathlib import Path
from typing import Any

from rules_cases import RULES, alerts, render, run_promtool_test

from vgpumon.collect import device, vgpu
from vgpumon.collect.enrich.domains import Domain, Inventory
from vgpumon.collect.vanished import DepartureTracker, with_vms
from vgpumon.metrics.table import FAMILIES, ExportOptions
from vgpumon.testing import sim_host

STEP = 15  # seconds between scrapes
CYCLE = 1  # seconds between sampling cycles
MINUTES = 30
CONTROL_MINUTES = 10
TARGET = {"instance": "churn:9839", "job": "vgpumon", "cluster": "c1"}
READ = re.compile(r"\bvgpumon_[a-z0-9_]+")
CHURN_IDS = 1000000  # the churned VMs' vGPU ids start here (vgpumon/sim/scenarios/vgpu-churn.yaml)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    pairs = {**TARGET, **{n: v for n, v in zip(names, values, strict=True) if v != ""}}
    return ",".join(f'{k}="{v}"' for k, v in pairs.items())


@cache
def churn_series(keep_one_running: bool, minutes: int = MINUTES) -> dict[str, str]:
    """promtool input series (series -> values) of ``minutes`` of the churn host."""
    wanted = set(READ.findall(RULES.read_text(encoding="utf-8")))
    families = [f for f in FAMILIES if f.name in wanted]
    steps = minutes * 60 // STEP + 1
    points: dict[str, list[float | None]] = {}

    async def run() -> None:
        host = sim_host("vgpu-churn", readers=[*device.READERS, *vgpu.READERS])
        tracker = DepartureTracker()
        kept: Domain | None = None
        try:
            for second in range((steps - 1) * STEP + 1):
                snap = await host.cycle()
                listed = [v for g in snap.gpus for v in g.vgpu_instances if v.vm_id]
                domains = {
                    str(v.vm_id).lower(): Domain(
                        name=f"vm-{v.vgpu_id}", uuid=str(v.vm_id).lower(), state="running"
                    )
                    for v in listed
                }
                if keep_one_running and kept is None and second == 60:
                    # The VM of a churned vGPU listed now keeps running after its vGPU is gone.
                    first = next(v for v in listed if v.vgpu_id >= CHURN_IDS)
                    kept = domains[str(first.vm_id).lower()]
                if kept is not None:
                    domains[kept.uuid] = kept
                snap = with_vms(snap, Inventory.build(list(domains.values())), tracker)
                host.advance(CYCLE, poll_every=None)
                if second % STEP:
                    continue
                step = second // STEP
                for family in families:
                    for values, value in family.samples(snap, ExportOptions()):
                        key = f"{family.name}{{{_labels(family.labels, values)}}}"
                        points.setdefault(key, [None] * steps)[step] = value
                points.setdefault(f"up{{{_labels((), ())}}}", [None] * steps)[step] = 1.0
        finally:
            host.close()

    asyncio.run(run())
    return {k: " ".join("_" if v is None else repr(v) for v in vs) for k, vs in points.items()}


def _evaluate(tmp_path: Path, series: dict[str, str], cases: list[dict[str, Any]]) -> str:
    test = {
        "rule_files": [RULES.name],
        "evaluation_interval": f"{STEP}s",
        "tests": [
            {
                "interval": f"{STEP}s",
                "input_series": [{"series": s, "values": v} for s, v in series.items()],
                "alert_rule_test": cases,
            }
        ],
    }
    return run_promtool_test(tmp_path, RULES, test, timeout=300)


def test_thirty_minutes_of_churn_raise_no_alert(tmp_path: Path) -> None:
    series = churn_series(keep_one_running=False)
    stopped = next(v for s, v in series.items() if 'reason="vm_stopped"' in s)
    assert float(stopped.split()[-1]) > 850  # a VM every 2 s for 30 minutes, each shut down
    vanished = [v for s, v in series.items() if s.startswith("vgpumon_gpu_vgpus_vanished")]
    assert vanished and {x for v in vanished for x in v.split()} <= {"0.0", "_"}
    cases = [
        {"eval_time": f"{m}m", "alertname": name, "exp_alerts": []}
        for name in alerts()
        for m in range(5, MINUTES + 1, 5)
    ]
    _evaluate(tmp_path, series, cases)


def test_a_vm_left_running_without_its_vgpu_is_the_one_vanished_alert(tmp_path: Path) -> None:
    series = churn_series(keep_one_running=True, minutes=CONTROL_MINUTES)
    rule = alerts()["VgpumonVgpuVanished"]
    labels = dict(TARGET)
    expected = {
        "exp_labels": {**labels, "alertname": "VgpumonVgpuVanished", **rule["labels"]},
        "exp_annotations": {k: render(v, labels, "1") for k, v in rule["annotations"].items()},
    }
    cases = [
        {"eval_time": f"{m}m", "alertname": "VgpumonVgpuVanished", "exp_alerts": [expected]}
        for m in (7, CONTROL_MINUTES)
    ]
    _evaluate(tmp_path, series, cases)
