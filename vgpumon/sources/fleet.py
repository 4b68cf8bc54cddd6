"""Many sources as one: a fleet of exporters (or any mix of sources) behind one stream.

Each child keeps its own background task and its own connection, so a host that is slow or dead
only delays its own updates: the fleet never waits on one child to hear another. The fleet's part
is bookkeeping: host keys must be unique across children (two targets reaching the same exporter
would otherwise overwrite each other in every table), and every child's updates are passed on
unchanged, in the order each child published them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence

from vgpumon.errors import ConfigError
from vgpumon.sources.base import HostUpdate, SnapshotSource, UpdateHub

log = logging.getLogger(__name__)


class FleetSource:
    """The union of ``sources``; host keys must not repeat."""

    def __init__(self, sources: Sequence[SnapshotSource]) -> None:
        owner: dict[str, SnapshotSource] = {}
        for source in sources:
            for host in source.hosts():
                if host in owner:
                    raise ConfigError(
                        f"host {host!r} is given twice ({owner[host].name} and {source.name}): "
                        "give each target its own name"
                    )
                owner[host] = source
        self.sources: tuple[SnapshotSource, ...] = tuple(sources)
        self._hub = UpdateHub(list(owner))
        self._forwarders: list[asyncio.Task[None]] = []

    @property
    def name(self) -> str:
        count = len(self._hub.hosts())
        return f"{count} host{'s' if count != 1 else ''}"

    def hosts(self) -> Sequence[str]:
        return self._hub.hosts()

    def latest(self) -> Mapping[str, HostUpdate]:
        # The children's own tables: always as new as anything forwarded, even before start().
        return {h: u for source in self.sources for h, u in source.latest().items()}

    def updates(self) -> AsyncIterator[HostUpdate]:
        return self._hub.updates()

    async def start(self) -> None:
        if self._forwarders:
            return
        self._forwarders = [
            asyncio.create_task(self._forward(source), name=f"vgpumon-fleet-{source.name}")
            for source in self.sources
        ]
        await asyncio.sleep(0)  # let every forwarder subscribe before any child publishes
        for source in self.sources:
            await source.start()

    async def _forward(self, source: SnapshotSource) -> None:
        async for update in source.updates():
            self._hub.forward(update)

    async def refresh(self) -> None:
        await asyncio.gather(*(source.refresh() for source in self.sources))

    async def close(self) -> None:
        results = await asyncio.gather(
            *(source.close() for source in self.sources), return_exceptions=True
        )
        for source, result in zip(self.sources, results, strict=True):
            if isinstance(result, BaseException):
                log.warning("closing %s failed: %s", source.name, result)
        for task in self._forwarders:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._forwarders = []
        self._hub.close()
