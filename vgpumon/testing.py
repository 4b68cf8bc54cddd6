"""Deterministic simulated hosts for tests and benchmarks: a scenario on a manual clock, sampled.

Kept in the package (not under ``tests/``) so that ``bench/`` and the test suite share one harness
without the benchmarks importing test modules. The scheduler-log poller runs without its thread
(``interval=None``); :meth:`SimHost.advance` moves the clock in steps and polls the log at each
step, exactly what the poller thread does every 0.1 s on a real host, so every run sees the same
reads in the same order.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import vgpumon
import vgpumon.sim as sim
from vgpumon.collect import device, licensing, mig, scheduler, vgpu
from vgpumon.collect.base import Reader, SamplerConfig
from vgpumon.collect.registry import every_cycle
from vgpumon.collect.sampler import Sampler
from vgpumon.collect.scheduler import SERVICE, SchedulerLogPoller
from vgpumon.model import Snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim.clock import ManualClock
from vgpumon.sim.scenario_specs import Scenario

VGPU_READERS: list[Reader] = [
    *device.READERS,
    *mig.READERS,
    *vgpu.READERS,
    *licensing.READERS,
    *scheduler.READERS,
]

# Files are told apart by where the package lies, not by a "/vgpumon/" in the path: the checkout
# (and the virtual environment inside it) may itself live in a folder named vgpumon.
PACKAGE_DIR = os.path.dirname(vgpumon.__file__) + os.sep
SIM_DIR = os.path.join(PACKAGE_DIR, "sim") + os.sep

# The churn stress scenario: after this warm-up (200 VMs) every bounded cache (the simulator's
# sample history, the collector's tables) is full, so memory measured later shows growth per
# event, not caches filling.
CHURN_SCENARIO = "churn-1000"
CHURN_WARM_UP = 20.0


def stress_scenario_text(name: str) -> str:
    """The YAML of a stress scenario shipped beside the built-ins (not listed as one)."""
    path = resources.files("vgpumon.sim").joinpath("scenarios").joinpath("stress")
    path = path.joinpath(f"{name}.yaml")
    return path.read_text(encoding="utf-8")


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


SimHostFactory = Callable[..., SimHost]
"""The type of the ``sim_host`` test fixture: ``sim_host(scenario, readers=None, config=None)``."""


def sim_host(
    scenario: str | Scenario,
    readers: Sequence[Reader] | None = None,
    config: SamplerConfig | None = None,
) -> SimHost:
    """A sampled simulated host; the caller closes it (the test fixture ``sim_host`` does)."""
    clock = ManualClock()
    module = sim.create(scenario, clock=clock)
    session = NvmlSession(module, f"sim:{module.scenario.name}")
    session.init()
    poller = SchedulerLogPoller(session, interval=None)
    sampler = Sampler(
        session,
        # every cadenced value every step unless the test says otherwise: what a step shows is
        # then the scenario at that time
        config or SamplerConfig(cadences=every_cycle()),
        readers if readers is not None else VGPU_READERS,
        clock=clock.now,
        services={SERVICE: poller},
    )
    return SimHost(clock, module, session, sampler, poller)


def settle_memory() -> None:
    """Collect garbage and empty CPython's attribute-lookup cache before a tracemalloc snapshot.

    That cache keeps a reference to the name string of each recent attribute lookup (a few
    thousand entries at most), so what it holds depends on what ran before, other tests
    included, and would show up as noise in the growth of whichever module allocated the name.
    """
    gc.collect()
    clear = getattr(sys, "_clear_type_cache", None)
    if clear is not None:
        clear()
