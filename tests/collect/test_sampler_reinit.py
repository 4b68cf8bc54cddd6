"""After NVML is re-initialised, everything it handed out before is gone, Xid event sets too.

A driver that answers DRIVER_NOT_LOADED for a moment makes the sampler shut NVML down and
initialise it again; Xid events that arrive afterwards must still be counted, which needs a new
event set (the old one is invalid after the re-init).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.collect.xid import SERVICE, XidWatcher
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock

SCENARIO = """
name: reinit-xid
description: the driver disappears for a second; an Xid arrives after it is back
seed: 3
gpus:
  - model: h100-sxm-80gb
    xid_events: [{at: 1.5s, xid: 13}, {at: 5s, xid: 79}]
faults:
  - {kind: error, function: nvmlDeviceGetTemperature, code: driver_not_loaded, from: 2s, until: 3s}
"""


async def test_xid_events_after_a_reinit_are_still_counted(tmp_path: Path) -> None:
    path = tmp_path / "reinit-xid.yaml"
    path.write_text(SCENARIO)
    clock = ManualClock()
    start = clock.now()
    session = open_session(sim=str(path), clock=clock)
    sampler = Sampler(session, SamplerConfig(deadline_seconds=2.0), clock=clock.now)
    watcher = sampler.services[SERVICE]
    assert isinstance(watcher, XidWatcher)

    async def at(t: float) -> None:
        clock.advance(start + t - clock.now())
        await sampler.cycle()

    async def xids_within(seconds: float, expected: dict[int, int]) -> dict[int, int]:
        give_up = time.monotonic() + seconds
        while time.monotonic() < give_up and watcher.counts(uuid) != expected:
            await asyncio.sleep(0.05)
        return watcher.counts(uuid)

    try:
        await at(0.0)
        (uuid,) = [g.uuid for g in sampler.latest.gpus] if sampler.latest else []
        await at(1.6)
        assert await xids_within(3.0, {13: 1}) == {13: 1}
        await at(2.5)  # DRIVER_NOT_LOADED: the library is marked down
        assert sampler.latest is not None and not sampler.latest.health.up
        await asyncio.sleep(1.1)  # the re-init backoff runs in wall time
        await at(3.5)  # shut down, initialised again, GPUs re-acquired
        await at(4.0)
        assert sampler.latest is not None and sampler.latest.health.up
        await at(6.0)  # the Xid at 5 s reaches the new event set
        assert await xids_within(3.0, {13: 1, 79: 1}) == {13: 1, 79: 1}
    finally:
        sampler.close()
