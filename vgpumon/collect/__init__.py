"""Sampling NVML into :class:`vgpumon.model.Snapshot` objects: the sampler and its readers."""

from __future__ import annotations

import asyncio

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.model import Snapshot
from vgpumon.nvml.session import NvmlSession

__all__ = ["Sampler", "SamplerConfig", "take_snapshot"]


async def take_snapshot(
    session: NvmlSession, *, interval: float = 1.0, config: SamplerConfig | None = None
) -> Snapshot:
    """One snapshot of the host, then the sampler is closed (and NVML shut down, or given up on
    after ``CLOSE_TIMEOUT_SECONDS`` when the driver hangs).

    Values that need two samples (GPM) only exist from a second cycle on; when a reader asks for
    one, a second cycle runs ``interval`` seconds after the first.
    """
    sampler = Sampler(session, config)
    try:
        snapshot = await sampler.cycle()
        if sampler.needs_interval and not snapshot.health.wedged:
            await asyncio.sleep(max(0.0, interval))
            snapshot = await sampler.cycle()
        return snapshot
    finally:
        sampler.close()
