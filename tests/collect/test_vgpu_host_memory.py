"""On a vGPU host every running time-sliced vGPU holds its whole profile on the physical GPU.

So the host's memory used is the sum of the running vGPUs' framebuffer sizes (plus whatever host
processes hold: none in these scenarios), as the host's nvidia-smi reports it. Expectations are
computed from the scenario file.
"""

from __future__ import annotations

import asyncio

import pytest
import yaml

from vgpumon import sim
from vgpumon.collect import take_snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim.scenario import builtin_text
from vgpumon.units import parse_size


def _expected_used(gpu_spec: dict) -> int:
    sizes = {}
    for t in gpu_spec["vgpu"]["types"]:  # instances name their type by name or by id
        sizes[t["name"]] = sizes[t["id"]] = parse_size(t["framebuffer"])
    return sum(sizes[i["type"]] for i in gpu_spec["vgpu"]["instances"])


@pytest.mark.parametrize("scenario", ["kvm-vgpu-timesliced"])
def test_host_memory_used_is_the_running_vgpus_profiles(scenario: str) -> None:
    spec = yaml.safe_load(builtin_text(scenario))
    session = NvmlSession(sim.create(scenario, clock=sim.ManualClock()), f"sim:{scenario}")
    session.init()
    snap = asyncio.run(take_snapshot(session, interval=0.0))
    for gpu, gpu_spec in zip(snap.gpus, spec["gpus"], strict=True):
        expected = _expected_used(gpu_spec)
        assert expected > 0
        assert gpu.memory.used_bytes == expected
        assert gpu.memory.free_bytes == gpu.memory.total_bytes - expected - (
            gpu.memory.reserved_bytes or 0
        )
