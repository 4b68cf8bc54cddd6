"""Shared pieces for the validate tests: a timer on the simulator's manual clock, a sim run."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from vgpumon.collect.base import Reader
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock, Scenario
from vgpumon.validate.drivers import LoadDriver, SimDriver
from vgpumon.validate.readings import Target
from vgpumon.validate.run import Plan, Progress, Report, Timing, Validation
from vgpumon.validate.sources import SamplerSource
from vgpumon.validate.steps import Tolerances, default_ladder, select_steps

FAST = Timing(settle_s=2.0, window_s=3.0, sample_interval_s=0.5, grace_s=2.0)


class ManualTimer:
    """Sleeping moves the simulator's clock instead of waiting; ``on_advance`` runs after each
    move (an exporter's sampler cycles there)."""

    def __init__(
        self,
        clock: ManualClock,
        on_advance: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        self.clock = clock
        self.on_advance = on_advance
        self.slept = 0.0

    def now(self) -> float:
        return self.clock.now()

    async def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.clock.advance(seconds)
            self.slept += seconds
        if self.on_advance is not None:
            await self.on_advance(self.clock.now())
        await asyncio.sleep(0)


class SimRun:
    """A simulator with a manual clock, the in-process source over it, and its driver."""

    def __init__(self, scenario: str | Scenario, *, readers: Sequence[Reader] | None = None):
        self.clock = ManualClock()
        if isinstance(scenario, str):
            self.session = open_session(sim=scenario, clock=self.clock)
        else:
            from vgpumon.nvml.session import NvmlSession
            from vgpumon.sim import create

            module = create(scenario, clock=self.clock)
            self.session = NvmlSession(module, f"sim:{scenario.name}")
            self.session.init()
        self.module: Any = self.session.module
        self.source = SamplerSource(self.session, readers=readers, clock=self.clock.now)
        self.timer = ManualTimer(self.clock)

    def validation(
        self,
        device: str,
        *,
        steps: str | None = None,
        driver: LoadDriver | Callable[[Target], LoadDriver] | None = None,
        tolerances: Tolerances | None = None,
        timing: Timing = FAST,
        progress: Progress | None = None,
        **ladder: Any,
    ) -> Validation:
        plan = Plan(
            device=device,
            steps=select_steps(default_ladder(**ladder), steps),
            timing=timing,
            tolerances=tolerances or Tolerances(),
        )
        return Validation(
            plan,
            self.source,
            driver or (lambda target: SimDriver(self.module, target)),
            timer=self.timer,
            progress=progress,
        )

    async def run(self, device: str, **kwargs: Any) -> Report:
        return await self.validation(device, **kwargs).run()
