"""Snapshots of the built-in scenarios for the view tests, read with a manual clock."""

from __future__ import annotations

import asyncio
import functools

from vgpumon.collect import Sampler
from vgpumon.collect.base import SamplerConfig
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock, builtin_scenarios

HANG_FREE = [s for s in builtin_scenarios() if "hang" not in s]


@functools.cache
def snapshot_of(scenario: str, at: float = 1.0) -> Snapshot:
    """The scenario at scenario time ``at`` (cycles at 0 s and at ``at``); the snapshot's clock is
    the scenario's, so license expiry times and "now" agree."""
    clock = ManualClock()
    start = clock.now()
    session = open_session(sim=scenario, clock=clock)

    async def run() -> Snapshot:
        sampler = Sampler(session, SamplerConfig(deadline_seconds=5.0), clock=clock.now)
        try:
            await sampler.cycle()
            clock.advance(start + at - clock.now())
            return await sampler.cycle()
        finally:
            sampler.close()

    return asyncio.run(run())
