"""A deterministic vGPU host for tests: a simulated scenario on a manual clock, sampled by vgpumon.

The scheduler-log poller runs without its thread (``interval=None``); :meth:`SimHost.advance`
moves the clock in steps and polls the log at each step, exactly what the poller thread does every
0.1 s on a real host, so the tests see the same reads in the same order every time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import vgpumon.sim as sim
from vgpumon.collect import device, licensing, mig, scheduler, vgpu
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.collect.scheduler import SERVICE, SchedulerLogPoller
from vgpumon.model import Gpu, Snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim.clock import ManualClock
from vgpumon.sim.scenario import Scenario

VGPU_READERS = [
    *device.READERS,
    *mig.READERS,
    *vgpu.READERS,
    *licensing.READERS,
    *scheduler.READERS,
]


@dataclass
class SimHost:
    clock: ManualClock
    module: Any
    session: NvmlSession
    sampler: Sampler
    poller: SchedulerLogPoller

    @property
    def scenario(self) -> Scenario:
        return self.module.scenario

    @property
    def t(self) -> float:
        return self.module._core.t()

    async def cycle(self) -> Snapshot:
        return await self.sampler.cycle()

    def advance(self, seconds: float, poll_every: float | None = 0.1) -> None:
        """Move scenario time, reading the scheduler logs every ``poll_every`` seconds."""
        if poll_every is None:
            self.clock.advance(seconds)
            return
        left = seconds
        while left > 1e-9:
            step = min(poll_every, left)
            self.clock.advance(step)
            left -= step
            for uuid in list(self.poller._gpus):
                self.poller.poll(uuid)

    def gpu_state(self, index: int) -> Any:
        return self.module._core.gpus[index]

    def close(self) -> None:
        self.sampler.close()


def sim_host(scenario: str | Scenario, readers: list[Any] | None = None) -> SimHost:
    clock = ManualClock()
    module = sim.create(scenario, clock=clock)
    session = NvmlSession(module, f"sim:{module.scenario.name}")
    session.init()
    poller = SchedulerLogPoller(session, interval=None)
    sampler = Sampler(
        session,
        SamplerConfig(),
        readers if readers is not None else VGPU_READERS,
        clock=clock.now,
        services={SERVICE: poller},
    )
    return SimHost(clock, module, session, sampler, poller)


def vgpu_errors(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """NVML errors of vGPU functions (the device and MIG readers' own are not under test here)."""
    return {
        (e.function, e.error): e.count
        for e in snapshot.nvml_errors
        if "Vgpu" in e.function or "vgpu" in e.function.lower()
    }


def by_id(gpu: Gpu) -> dict[int, Any]:
    return {v.vgpu_id: v for v in gpu.vgpu_instances}
