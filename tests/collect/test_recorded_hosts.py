"""The real H200 recorded with `vgpumon record` (bench/results/device-2026-11-21) replays.

The fixture is what `vgpumon record` wrote on a real H200; replaying it through the simulator
must give back the host that nvidia-smi described there (name, memory, pass-through, MIG off,
driver), with identities masked and no vGPU section.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from vgpumon import sim
from vgpumon.collect import take_snapshot
from vgpumon.nvml.session import NvmlSession

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "recorded"
FIXTURE = RECORDED / "h200__580.159.04__passthrough.yaml"
# What nvidia-smi -q printed on that machine (bench/results/device-2026-11-21/env.txt).
NVIDIA_SMI = {
    "name": "NVIDIA H200",
    "memory_total_mib": 143771,
    "driver": "580.159.04",
    "virtualization": "passthrough",
}


def test_recorded_h200_replays_as_the_real_host() -> None:
    recorded = yaml.safe_load(FIXTURE.read_text())
    session = NvmlSession(sim.create(str(FIXTURE), clock=sim.ManualClock()), "sim:recorded")
    session.init()
    snap = asyncio.run(take_snapshot(session, interval=0.0))
    (gpu,) = snap.gpus
    assert gpu.name == NVIDIA_SMI["name"]
    assert gpu.memory.total_bytes == NVIDIA_SMI["memory_total_mib"] * 2**20
    assert gpu.memory.total_bytes == recorded["gpus"][0]["memory"]["total"]
    assert gpu.virtualization_mode == NVIDIA_SMI["virtualization"]
    assert gpu.mig_mode_current is False
    assert snap.driver.driver_version == NVIDIA_SMI["driver"]
    assert gpu.uuid == recorded["gpus"][0]["uuid"] == "GPU-00000000-0000-4000-8000-000000000000"
    assert gpu.serial == recorded["gpus"][0]["serial"]
    assert gpu.power_limit_watts == recorded["gpus"][0]["power"]["limit"]
    assert not gpu.vgpu_instances and not gpu.vgpu_types and not gpu.vgpu_schedulers
    assert gpu.fan_speed is None  # the H200 has no fans: absent, not 0


def test_recorded_fixture_holds_no_real_identity() -> None:
    text = FIXTURE.read_text()
    assert "b8f64ea3" not in text  # the real UUID's first group
    recorded = yaml.safe_load(text)
    assert all(set(gpu["serial"]) == {"0"} for gpu in recorded["gpus"])  # masked serials
