"""This host's GPUs through a sampler running in this process (``--sim`` or ``--nvml-module`` too).

The sampler is a snapshot feed (:class:`vgpumon.feed.SnapshotFeed`): it runs its own loop, as
under ``serve``, and :class:`~vgpumon.sources.feed_source.FeedSource` makes each snapshot it
publishes one update of the single host ``local``. NVML calls run in the sampler's worker threads,
so the event loop (and a UI on it) never waits on the driver; a wedged driver shows as a wedged
snapshot, not as a frozen screen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from vgpumon.collect import Sampler
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.enrich.base import Enricher
from vgpumon.nvml.session import NvmlSession
from vgpumon.sources.base import HostUpdate
from vgpumon.sources.feed_source import FeedSource, nvml_down

LOCAL_HOST = "local"


class LocalSource(FeedSource):
    """Snapshots from an in-process :class:`Sampler` over ``session``."""

    def __init__(
        self,
        session: NvmlSession,
        config: SamplerConfig | None = None,
        *,
        host: str = LOCAL_HOST,
        clock: Callable[[], float] = time.time,
        enrichers: Sequence[Enricher] = (),
    ) -> None:
        self.session = session
        # Enrichers (VM names from libvirt, pods from the kubelet) as ``serve`` has them.
        self.sampler = Sampler(session, config, clock=clock, enrichers=enrichers)
        super().__init__(self.sampler, host, name=f"this host ({session.source})", judge=nvml_down)

    async def cycle_once(self) -> HostUpdate:
        """Run one sampling cycle now and publish it (tests and one-shot consumers)."""
        await self.sampler.cycle()  # published through the sampler's listener
        return self.latest()[self.host]

    async def close_feed(self) -> None:
        await asyncio.to_thread(self.sampler.close)  # NVML shutdown may block: off the loop
