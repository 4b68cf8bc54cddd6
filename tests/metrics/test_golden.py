"""Golden expositions: every built-in scenario, fixed simulator clock, two cycles.

``tests/golden/<scenario>.prom`` is the text-format exposition of the snapshot after the second
cycle. Regenerate after an intended change with::

    VGPUMON_UPDATE_GOLDENS=1 pytest tests/metrics/test_golden.py

which rewrites every golden file and removes those of scenarios that no longer exist; review the
diff like code. Timing-dependent values are made deterministic before rendering: the sampler and
the simulator share one ``ManualClock`` (sample timestamps), and durations measured with the real
clock (per-collector and cycle durations) are set to 0. ``vgpumon_build_info`` carries the Python
version of whoever runs the tests, so it is left out here and checked in test_export_exposition.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from ci_helpers import in_ci
from export_helpers import samples_by_name

from vgpumon import sim
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.metering import MeteringStage
from vgpumon.collect.registry import every_cycle
from vgpumon.collect.sampler import Sampler
from vgpumon.metrics.exposition import render
from vgpumon.metrics.table import ExportOptions
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session
from vgpumon.sim.clock import ManualClock

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("VGPUMON_UPDATE_GOLDENS") == "1"
SCENARIOS = tuple(sorted(sim.builtin_scenarios()))
OPTIONS = ExportOptions(processes=True)  # goldens cover the opt-in families too
LEFT_OUT = ("vgpumon_build_info",)
CYCLE_GAP_SECONDS = 1.0
# Bounds the wait for a scenario's hung GPU; ten times what a cycle of the largest scenario takes.
DEADLINE_SECONDS = 2.0


def deterministic(snapshot: Snapshot) -> Snapshot:
    """Zero what the real clock measured; everything else comes from the simulator's clock."""
    collectors = tuple(dataclasses.replace(c, duration_seconds=0.0) for c in snapshot.collectors)
    health = dataclasses.replace(
        snapshot.health,
        last_cycle_duration_seconds=(
            None if snapshot.health.last_cycle_duration_seconds is None else 0.0
        ),
    )
    return dataclasses.replace(snapshot, collectors=collectors, health=health)


async def _two_cycles(name: str) -> Snapshot:
    clock = ManualClock()
    session = open_session(sim=name, clock=clock)
    # With the metering stage, as serve runs it: the goldens hold the usage counters too.
    sampler = Sampler(
        session,
        # every value read every cycle: two cycles show every value (the cadences' defaults are
        # serve's business, tested with the collectors)
        SamplerConfig(deadline_seconds=DEADLINE_SECONDS, cadences=every_cycle()),
        clock=clock.now,
        enrichers=[MeteringStage()],
    )
    try:
        await sampler.cycle()
        clock.advance(CYCLE_GAP_SECONDS)
        snapshot = await sampler.cycle()
    finally:
        sampler.close()
        # Free worker threads that a hang scenario left inside a call.
        release = getattr(session.module, "release_hangs", None)
        if callable(release):
            release()
    return snapshot


@functools.cache
def exposition(name: str) -> str:
    snapshot = deterministic(asyncio.run(_two_cycles(name)))
    text = render(snapshot, options=OPTIONS).decode()
    kept = []
    skipping = False
    for line in text.splitlines(keepends=True):
        if line.startswith("# HELP "):
            skipping = line.split()[2] in LEFT_OUT
        if not skipping:
            kept.append(line)
    return "".join(kept)


def golden_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.prom"


def test_there_are_scenarios() -> None:
    assert SCENARIOS, "vgpumon.sim.builtin_scenarios() lists the built-in scenarios"


@pytest.mark.parametrize("name", SCENARIOS)
def test_exposition_matches_golden(name: str) -> None:
    text = exposition(name)
    path = golden_path(name)
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden for {name}: run VGPUMON_UPDATE_GOLDENS=1 pytest {__file__}"
    assert path.read_text(encoding="utf-8") == text, (
        f"{path.name} differs from the exposition; if the change is intended, regenerate with "
        "VGPUMON_UPDATE_GOLDENS=1 and review the diff"
    )


def test_no_orphaned_goldens() -> None:
    orphans = sorted(p.name for p in GOLDEN_DIR.glob("*.prom") if p.stem not in SCENARIOS)
    if UPDATE:
        for name in orphans:
            (GOLDEN_DIR / name).unlink()
        orphans = []
    assert orphans == [], "golden files of scenarios that no longer exist"


@pytest.mark.parametrize("name", SCENARIOS)
def test_values_obey_the_contract_in_every_scenario(name: str) -> None:
    samples = samples_by_name(exposition(name))
    assert samples.get("vgpumon_up") == [({}, 1.0)] or "fault" in name
    for sample_name, series in samples.items():
        for labels, value in series:
            assert "hostname" not in labels
            if sample_name.endswith("_ratio"):
                assert 0.0 <= value <= 1.0, (sample_name, labels, value)
            if sample_name.endswith("_info"):
                assert value == 1.0, (sample_name, labels)
            if sample_name.startswith("vgpumon_gpu_"):
                assert labels.get("gpu") and labels.get("uuid"), (sample_name, labels)


def _promtool() -> str | None:
    found = shutil.which("promtool")
    if found is None and in_ci():
        pytest.fail("promtool is required in CI (Debian package prometheus; see .ci/run)")
    return found


@pytest.mark.parametrize("name", SCENARIOS)
def test_promtool_accepts_the_golden(name: str) -> None:
    promtool = _promtool()
    if promtool is None:
        pytest.skip("promtool not installed")
    path = golden_path(name)
    if not path.exists():
        pytest.skip("golden missing (reported by test_exposition_matches_golden)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=path.read_bytes(), capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
