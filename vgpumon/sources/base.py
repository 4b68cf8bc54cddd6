"""The one contract every consumer uses to get snapshots: :class:`SnapshotSource`.

A consumer (``vgpumon top``, ``validate --url``, a fleet view) never calls NVML and never knows
whether the snapshots come from a sampler in this process, one exporter over HTTP, or many
exporters at once. It asks a source for the newest :class:`HostUpdate` of each host and waits on
:meth:`SnapshotSource.updates` for the next one, so a UI redraws when data changes instead of
polling blindly.

A *host* is the unit of reachability: one NVML library (local) or one exporter URL (remote). Its
update carries the newest snapshot that host gave (kept while the host is unreachable, so a screen
can show the last known state marked stale) and the connection state with a one-line reason.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from vgpumon.model import Snapshot


class HostState(str, enum.Enum):
    """Where a host's connection stands; the value is what a screen prints."""

    CONNECTING = "connecting"  # no answer yet (first contact, or reconnecting after a failure)
    UP = "up"  # the newest poll returned a snapshot
    UNREACHABLE = "unreachable"  # the newest poll failed; ``error`` says why, retry is scheduled
    CLOSED = "closed"  # the source was closed


@dataclass(frozen=True)
class HostUpdate:
    """One host's newest state, published whenever its snapshot or its state changes."""

    host: str  # stable key and display name: "local", an exporter's HOST:PORT, or its target name
    state: HostState
    snapshot: Snapshot | None = None  # the newest snapshot ever received (kept when unreachable)
    error: str | None = None  # one line, set when ``state`` is UNREACHABLE
    received_at: float | None = None  # time.time() when ``snapshot`` arrived
    sequence: int = 0  # grows by one with every update of this host

    @property
    def stale(self) -> bool:
        """The snapshot shown is older than the host's current state (host not up)."""
        return self.snapshot is not None and self.state is not HostState.UP


@runtime_checkable
class SnapshotSource(Protocol):
    """Snapshots of one or more hosts, as a newest-state table plus a stream of changes."""

    @property
    def name(self) -> str:
        """What the source reads, for titles and error messages."""
        ...

    def hosts(self) -> Sequence[str]:
        """The hosts this source covers, in a stable order."""
        ...

    def latest(self) -> Mapping[str, HostUpdate]:
        """The newest update of every host (never blocks, never does I/O)."""
        ...

    async def start(self) -> None:
        """Begin collecting in the background; returns at once (no first result awaited)."""
        ...

    def updates(self) -> AsyncIterator[HostUpdate]:
        """Every update from now on, in order; ends when the source is closed."""
        ...

    async def refresh(self) -> None:
        """Ask for a new reading of every host now (``r`` in a UI); returns without waiting."""
        ...

    async def close(self) -> None:
        """Stop background work; pending :meth:`updates` iterators end."""
        ...


class UpdateHub:
    """The publishing half shared by sources: newest-state table plus fan-out to subscribers.

    Each subscriber gets a bounded queue; a subscriber that falls behind loses its oldest pending
    updates, never the newest, and never slows the producer (the newest state is always also in
    :meth:`latest`).
    """

    QUEUE_SIZE = 256

    def __init__(self, hosts: Sequence[str]) -> None:
        self._latest: dict[str, HostUpdate] = {
            h: HostUpdate(host=h, state=HostState.CONNECTING) for h in hosts
        }
        self._subscribers: list[asyncio.Queue[HostUpdate | None]] = []
        self._closed = False

    def hosts(self) -> Sequence[str]:
        return tuple(self._latest)

    def latest(self) -> Mapping[str, HostUpdate]:
        return dict(self._latest)

    def publish(
        self,
        host: str,
        state: HostState,
        *,
        snapshot: Snapshot | None = None,
        error: str | None = None,
    ) -> HostUpdate:
        """Record the host's new state (its last snapshot kept when none is given); fan out."""
        old = self._latest.get(host) or HostUpdate(host=host, state=HostState.CONNECTING)
        update = HostUpdate(
            host=host,
            state=state,
            snapshot=snapshot if snapshot is not None else old.snapshot,
            error=error if state is HostState.UNREACHABLE else None,
            received_at=time.time() if snapshot is not None else old.received_at,
            sequence=old.sequence + 1,
        )
        self.forward(update)
        return update

    def forward(self, update: HostUpdate) -> None:
        """Record and fan out an update made elsewhere, unchanged (a fleet passes on its
        children's updates with their own sequence numbers and receive times)."""
        self._latest[update.host] = update
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(update)

    def updates(self) -> AsyncIterator[HostUpdate]:
        """Subscribe now (not at the first ``anext``), so no update between this call and the
        first wait is lost: a consumer can read :meth:`latest` right after subscribing."""
        queue: asyncio.Queue[HostUpdate | None] = asyncio.Queue(self.QUEUE_SIZE)
        if not self._closed:
            self._subscribers.append(queue)
        return self._drain(queue)

    async def _drain(self, queue: asyncio.Queue[HostUpdate | None]) -> AsyncIterator[HostUpdate]:
        if queue not in self._subscribers:
            return
        try:
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield item
        finally:
            if queue in self._subscribers:
                self._subscribers.remove(queue)

    def close(self) -> None:
        self._closed = True
        for host, update in list(self._latest.items()):
            self._latest[host] = HostUpdate(
                host=host,
                state=HostState.CLOSED,
                snapshot=update.snapshot,
                received_at=update.received_at,
                sequence=update.sequence + 1,
            )
        for queue in self._subscribers:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(None)
