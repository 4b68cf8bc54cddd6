"""This host's GPUs through a sampler running in this process (``--sim`` or ``--nvml-module`` too).

The sampler is a snapshot feed (:class:`vgpumon.feed.SnapshotFeed`): it runs its own loop, as
under ``serve``, and each snapshot it publishes is one update of the single host ``local``. NVML
calls run in the sampler's worker threads, so the event loop (and a UI on it) never waits on the
driver; a wedged driver shows as a wedged snapshot, not as a frozen screen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

from vgpumon.collect import Sampler
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.enrich.base import Enricher
from vgpumon.model import Snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sources.base import HostState, HostUpdate, UpdateHub

log = logging.getLogger(__name__)

LOCAL_HOST = "local"


class LocalSource:
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
        self.host = host
        self._hub = UpdateHub([host])
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self.sampler.on_snapshot(self._publish)

    @property
    def name(self) -> str:
        return f"this host ({self.session.source})"

    def hosts(self) -> Sequence[str]:
        return self._hub.hosts()

    def latest(self) -> Mapping[str, HostUpdate]:
        return self._hub.latest()

    def updates(self) -> AsyncIterator[HostUpdate]:
        return self._hub.updates()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(
                self.sampler.run(self._stop), name=f"vgpumon-source-{self.host}"
            )

    async def refresh(self) -> None:
        self.sampler.refresh()

    async def cycle_once(self) -> HostUpdate:
        """Run one sampling cycle now and publish it (tests and one-shot consumers)."""
        await self.sampler.cycle()  # published by the sampler's listener
        return self._hub.latest()[self.host]

    def _publish(self, snapshot: Snapshot) -> HostUpdate:
        state = HostState.UP if snapshot.health.up or snapshot.gpus else HostState.UNREACHABLE
        error = None if state is HostState.UP else "NVML is not initialised"
        return self._hub.publish(self.host, state, snapshot=snapshot, error=error)

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._hub.close()
        await asyncio.to_thread(self.sampler.close)
