"""``vgpumon_scrape_collector_success`` means what node_exporter's does: the collector ran and
succeeded. With NVML down nothing runs, so every collector is 0 (it was 1 while ``vgpumon_up``
was 0, and VgpumonCollectorFailing could never fire)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import resolve_module
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim import ManualClock

SCENARIO = """
name: driver-goes
description: the driver is there for two seconds, then gone (nvmlInit fails from then on)
seed: 3
gpus:
  - model: h100-sxm-80gb
faults:
  - {kind: error, function: nvmlDeviceGetTemperature, code: driver_not_loaded, from: 2s}
  - {kind: error, function: nvmlInit, code: driver_not_loaded, from: 2s}
"""


def _success(snap: Snapshot) -> dict[str, bool]:
    assert snap.collectors, "the collectors are listed, not absent"
    return {c.name: c.success for c in snap.collectors}


async def test_nothing_ran_is_not_success(tmp_path: Path) -> None:
    path = tmp_path / "driver-goes.yaml"
    path.write_text(SCENARIO)
    clock = ManualClock()
    start = clock.now()
    module, source = resolve_module(str(path), None, clock)
    session = NvmlSession(module, source)
    session.init()
    sampler = Sampler(session, SamplerConfig(deadline_seconds=2.0), clock=clock.now)

    async def at(t: float) -> Snapshot:
        clock.advance(start + t - clock.now())
        return await sampler.cycle()

    try:
        first = await at(0.0)
        assert first.health.up and all(_success(first).values())
        lost = await at(2.5)  # the temperature collector meets the vanished driver
        assert not lost.health.up
        assert _success(lost)["device"] is True  # it read the GPU before the driver went
        assert _success(lost)["temperature"] is False
        for t in (2.7, 4.0):  # NVML down: no collector ran
            await asyncio.sleep(1.1)  # the re-init backoff runs in wall time
            down = await at(t)
            assert not down.health.up
            assert not any(_success(down).values()), _success(down)
    finally:
        sampler.close()


async def test_an_exporter_started_without_a_driver_reports_no_collector_success(
    tmp_path: Path,
) -> None:
    """``serve`` before the driver is loaded: ``vgpumon_up 0`` and every collector 0."""
    path = tmp_path / "no-driver.yaml"
    path.write_text(SCENARIO.replace("from: 2s", "from: 0s"))
    clock = ManualClock()
    module, source = resolve_module(str(path), None, clock)
    sampler = Sampler(NvmlSession(module, source), SamplerConfig(), clock=clock.now)
    sampler.start_uninitialised("Driver Not Loaded")
    try:
        snap = await sampler.cycle()
    finally:
        sampler.close()
    assert not snap.health.up
    assert len(snap.collectors) >= 20 and not any(_success(snap).values())
