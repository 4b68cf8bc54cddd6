"""Sampling NVML into :class:`vgpumon.model.Snapshot` objects: the sampler and its readers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vgpumon.collect.base import SamplerConfig

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher
    from vgpumon.collect.sampler import Sampler
    from vgpumon.model import Snapshot
    from vgpumon.nvml.session import NvmlSession

__all__ = ["Sampler", "SamplerConfig", "take_snapshot"]


def __getattr__(name: str) -> Any:
    # The sampler is imported when first asked for, not with the package: a producer that needs
    # only one of its light modules (nvidia-smi's reports deciding the memory in use,
    # vgpumon.collect.memory_in_use) loads no sampler, its threads' code or its dispatcher.
    if name == "Sampler":
        from vgpumon.collect.sampler import Sampler

        return Sampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# How long a one-shot snapshot waits for the enrichers' first answers (libvirt, the kubelet).
ENRICH_WAIT_SECONDS = 5.0


async def take_snapshot(
    session: NvmlSession,
    *,
    interval: float = 1.0,
    config: SamplerConfig | None = None,
    enrichers: Sequence[Enricher] = (),
    enrich_wait: float = ENRICH_WAIT_SECONDS,
) -> Snapshot:
    """One snapshot of the host, then the sampler is closed (and NVML shut down, or given up on
    after ``CLOSE_TIMEOUT_SECONDS`` when the driver hangs).

    Values that need two samples (GPM) only exist from a second cycle on; when a reader asks for
    one, a second cycle runs ``interval`` seconds after the first. Enrichers get up to
    ``enrich_wait`` seconds for their first read before the first cycle (a one-shot snapshot has
    no later cycle to bring their names in); one still asking then reports failure.
    """
    import asyncio  # here: the sampler process imports this package and runs no event loop

    from vgpumon.collect.sampler import Sampler

    sampler = Sampler(session, config, enrichers=enrichers)
    try:
        for enricher in enrichers:
            enricher.start()
        give_up = time.monotonic() + enrich_wait
        while not all(e.settled() for e in enrichers) and time.monotonic() < give_up:
            await asyncio.sleep(0.01)
        snapshot = await sampler.cycle()
        if sampler.needs_interval and not snapshot.health.wedged:
            await asyncio.sleep(max(0.0, interval))
            snapshot = await sampler.cycle(second_look=True)
        return snapshot
    finally:
        sampler.close()
