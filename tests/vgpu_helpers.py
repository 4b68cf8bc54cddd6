"""Small functions the vGPU tests share (the sampled simulated host itself is
``vgpumon.testing.sim_host``, and the ``sim_host`` fixture in tests/collect/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vgpumon.model import Gpu, Snapshot


def vgpu_errors(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """NVML errors of vGPU functions (the device and MIG readers' own are not under test here)."""
    return {
        (e.function, e.error): e.count
        for e in snapshot.nvml_errors
        if "Vgpu" in e.function or "vgpu" in e.function.lower()
    }


def by_id(gpu: Gpu) -> dict[int, Any]:
    return {v.vgpu_id: v for v in gpu.vgpu_instances}


CONTENTION = str(Path(__file__).resolve().parent / "fixtures/scenarios/vgpu-contention.yaml")


def sampled(scenario: str, seconds: float, *, cycle_every: float = 5.0) -> Snapshot:
    """The snapshot after ``seconds`` of a simulated host, its scheduler logs read every 0.1 s as
    the poller does and sampled every ``cycle_every`` seconds (the share verdicts need a minute)."""
    import asyncio

    from vgpumon.sim.scenario import load_scenario
    from vgpumon.testing import sim_host

    async def run() -> Snapshot:
        host = sim_host(load_scenario(scenario))
        try:
            snap = await host.cycle()
            t = 0.0
            while t < seconds:
                host.advance(cycle_every)
                t += cycle_every
                snap = await host.cycle()
            return snap
        finally:
            host.close()

    return asyncio.run(run())
