"""A hung call costs its collector, not the GPU (issue 12: one hang took 171 series down).

GPU 0's temperature call hangs from the start; every other call answers. The GPU stays up with
everything but its temperatures, the temperature collector is reported failed while the call is
stuck, and once the call returns the temperatures come back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.collect.base import FunctionReader
from vgpumon.collect.registry import enabled_readers
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock

SCENARIO = """
name: hung-temperature
description: GPU 0's temperature call hangs; the rest of the GPU answers
seed: 4
gpus:
  - model: h100-sxm-80gb
    count: 2
    load: {duty: 0.5}
faults:
  - {kind: hang, function: nvmlDeviceGetTemperature, gpus: [0], from: 0s}
"""


@pytest.mark.parametrize("dispatch", ["parallel", "serial", "auto"])
async def test_a_hung_call_takes_down_its_collector_not_the_gpu(
    tmp_path: Path, dispatch: str
) -> None:
    path = tmp_path / "hung-temperature.yaml"
    path.write_text(SCENARIO)
    clock = ManualClock()
    session = open_session(sim=str(path), clock=clock)
    sampler = Sampler(
        session, SamplerConfig(deadline_seconds=0.5, dispatch=dispatch), clock=clock.now
    )
    module = session.module
    try:
        first = await sampler.cycle()
        gpu = first.gpus[0]
        assert gpu.up and gpu.name is not None and gpu.memory.total_bytes is not None
        assert gpu.power_watts is not None  # read before the hung collector
        assert gpu.temperatures.gpu_celsius is None
        failed = {c.name for c in first.collectors if not c.success}
        assert failed == {"temperature"}
        assert first.health.hung_gpus == ()

        clock.advance(1.0)
        second = await sampler.cycle()
        gpu = second.gpus[0]
        assert gpu.up and gpu.temperatures.gpu_celsius is None
        assert gpu.clocks.sm_hertz is not None  # read after the hung collector, by a new worker
        assert second.gpus[1].temperatures.gpu_celsius is not None

        module.release_hangs()
        await asyncio.sleep(0.2)  # the stuck call returns in its worker
        clock.advance(1.0)
        await sampler.cycle()
        clock.advance(1.0)
        healed = await sampler.cycle()
        assert healed.gpus[0].temperatures.gpu_celsius is not None
        assert all(c.success for c in healed.collectors)
    finally:
        module.release_hangs()
        sampler.close()


GPU_STOPS = """
name: gpu-stops-answering
description: GPU 0 stops answering any call; the system calls still answer
seed: 4
gpus:
  - model: h100-sxm-80gb
    count: 2
    load: {duty: 0.5}
faults:
  - {kind: hang, function: '*', gpus: [0], from: 2s}
"""


async def test_a_gpu_whose_calls_all_hang_is_hung_not_half_read(tmp_path: Path) -> None:
    """Collectors that call no NVML in a cycle (static values read once) may finish before the
    first call that hangs: the GPU is still one that does not answer, reported hung with its last
    data, not a GPU "up" with half its values missing."""
    path = tmp_path / "gpu-stops.yaml"
    path.write_text(GPU_STOPS)
    clock = ManualClock()
    session = open_session(sim=str(path), clock=clock)
    config = SamplerConfig(deadline_seconds=0.5)
    # First a collector that makes no NVML call this cycle (as one whose values are all cached).
    quiet = FunctionReader("quiet", lambda ctx, out: None)
    readers = [quiet, *enabled_readers(config)]
    sampler = Sampler(session, config, readers, clock=clock.now)
    try:
        first = await sampler.cycle()
        assert first.gpus[0].up and first.gpus[0].power_watts is not None
        clock.advance(3.0)
        stuck = await sampler.cycle()
        gpu = stuck.gpus[0]
        assert (gpu.up, gpu.down_reason) == (False, "hung")
        assert stuck.health.hung_gpus == (gpu.uuid,)
        assert stuck.gpus[1].up and stuck.gpus[1].power_watts is not None
    finally:
        session.module.release_hangs()
        sampler.close()
