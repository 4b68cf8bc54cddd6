"""This host's GPUs through a sampler running in this process (``--sim`` or ``--nvml-module`` too).

The sampler cycles every ``interval`` seconds in a background task; each finished cycle is one
update of the single host ``local``. NVML calls run in the sampler's worker threads, so the event
loop (and a UI on it) never waits on the driver; a wedged driver shows as a wedged snapshot, not
as a frozen screen.
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
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()

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
            self._task = asyncio.create_task(self._run(), name=f"vgpumon-source-{self.host}")

    async def refresh(self) -> None:
        self._wake.set()

    async def cycle_once(self) -> HostUpdate:
        """Run one sampling cycle now and publish it (tests and one-shot consumers)."""
        snapshot = await self.sampler.cycle()
        state = HostState.UP if snapshot.health.up or snapshot.gpus else HostState.UNREACHABLE
        error = None if state is HostState.UP else "NVML is not initialised"
        return self._hub.publish(self.host, state, snapshot=snapshot, error=error)

    async def _run(self) -> None:
        interval = self.sampler.config.interval_seconds
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                await self.cycle_once()
            except Exception as exc:  # a failed cycle is a state, not a crash
                log.exception("sampling cycle failed")
                self._hub.publish(self.host, HostState.UNREACHABLE, error=str(exc).splitlines()[0])
            remaining = max(0.0, interval - (time.monotonic() - started))
            self._wake.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=remaining)

    async def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._hub.close()
        await asyncio.to_thread(self.sampler.close)
