"""Named feeds of one host each, joined into one feed of :class:`~vgpumon.feed.Fleet` news.

:class:`FleetFeed` is what ``top`` reads for any set of hosts (this host's sampler as a fleet of
one, exporters over HTTP, agentless hosts over SSH) and what ``serve --ssh.targets`` renders
(:mod:`vgpumon.sources.agentless`). Each host keeps its own feed and its own loop, so a host that
is slow or dead only delays its own news. The fleet's part is bookkeeping, done as each host's
feed speaks:

* a new snapshot makes the host ``up``, unless ``judge`` finds that the snapshot itself says the
  host is down (then ``unreachable`` with the judge's reason, the snapshot shown);
* a failed attempt of a :class:`~vgpumon.feed.FallibleFeed` makes it ``unreachable`` with the
  feed's one-line reason, its last snapshot kept (shown as stale);
* when :meth:`FleetFeed.run` ends, a poll or cycle in flight is cancelled, every host is
  ``closed`` and what the hosts' feeds hold is freed (``closers``, on the loop that ran them).

Every change is one new :class:`~vgpumon.feed.Fleet`, told to the listeners at once; hosts that
did not change keep their :class:`~vgpumon.feed.HostUpdate` object. What counts as news, and
when to retry, is each host's feed's business (an exporter polled twice within one of its cycles
has nothing new; a dead one is retried with backoff).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from vgpumon.errors import ConfigError
from vgpumon.feed import FallibleFeed, Fleet, HostState, HostUpdate, SnapshotFeed, tell
from vgpumon.model import Snapshot

log = logging.getLogger(__name__)

LOCAL_HOST = "local"  # the one host of ``top`` on this machine's GPUs
# Why a snapshot shows its host as down although it arrived (None: it is up).
Judge = Callable[[Snapshot], str | None]
# Frees what a host's feed holds (a session, a transport) once the fleet has stopped.
Closer = Callable[[], Awaitable[object] | object]


def nvml_down(snapshot: Snapshot) -> str | None:
    """A sampler's snapshot whose NVML is not up and that read no GPU shows its host down (this
    host's sampler and a remote exporter's alike)."""
    return None if snapshot.health.up or snapshot.gpus else "NVML is not initialised"


class FleetFeed:
    """The hosts of ``feeds`` (``(host, feed)`` pairs, in the order shown); host names must not
    repeat (two targets reaching the same exporter would overwrite each other in every table)."""

    def __init__(
        self,
        feeds: Sequence[tuple[str, SnapshotFeed[Snapshot]]],
        *,
        name: str | None = None,
        judge: Judge | None = None,
        closers: Sequence[Closer] = (),
        clock: Callable[[], float] = time.time,
    ) -> None:
        owner: dict[str, SnapshotFeed[Snapshot]] = {}
        for host, feed in feeds:
            if host in owner:
                raise ConfigError(
                    f"host {host!r} is given twice ({owner[host].name} and {feed.name}): "
                    "give each target its own name"
                )
            owner[host] = feed
        self.feeds = owner
        self._name = name
        self._judge = judge
        self._closers = tuple(closers)
        self._clock = clock
        self._hosts = {host: HostUpdate(host=host, state=HostState.CONNECTING) for host in owner}
        self._fleet: Fleet | None = None
        self._listeners: list[Callable[[Fleet], object]] = []
        for host, feed in owner.items():
            feed.on_snapshot(self._arrived_for(host))
            if isinstance(feed, FallibleFeed):
                feed.on_failure(self._failed_for(host))

    # ------------------------------------------------------------------ the feed shape

    @property
    def name(self) -> str:
        if self._name is not None:
            return self._name
        if len(self.feeds) == 1:
            return next(iter(self.feeds.values())).name
        count = len(self.feeds)
        return f"{count} host{'s' if count != 1 else ''}"

    @property
    def latest(self) -> Fleet:
        """Every host's newest state (all ``connecting`` before any news)."""
        if self._fleet is None:
            self._fleet = Fleet(self.name, tuple(self._hosts.values()))
        return self._fleet

    @property
    def not_ready_reason(self) -> str | None:
        """Ready once every host has answered or failed once (one still connecting is unknown)."""
        waiting = sum(1 for u in self._hosts.values() if u.state is HostState.CONNECTING)
        if waiting == len(self._hosts):
            return "first sampling cycle not done"
        return f"{waiting} host(s) not answered yet" if waiting else None

    def on_snapshot(self, listener: Callable[[Fleet], object]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> None:
        """Ask every host's feed for a reading now (``r`` in ``top``)."""
        for feed in self.feeds.values():
            feed.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Run every host's feed until ``stop`` is set (or this run is cancelled); then stop
        them, mark the hosts closed and free what their feeds hold. One feed whose loop fails is
        logged; the others go on."""
        tasks = [
            asyncio.create_task(self._run_one(host, feed, stop), name=f"vgpumon-feed-{host}")
            for host, feed in self.feeds.items()
        ]
        try:
            await stop.wait()
        finally:
            # A poll or cycle in flight is cancelled: stopping never waits on a peer's time limit
            # (a hung exporter, a slow SSH host). What it held is freed below.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for host, update in list(self._hosts.items()):
                self._hosts[host] = HostUpdate(
                    host=host,
                    state=HostState.CLOSED,
                    snapshot=update.snapshot,
                    received_at=update.received_at,
                    sequence=update.sequence + 1,
                )
            self._changed()
            await self._close()

    # ------------------------------------------------------------------ bookkeeping

    @staticmethod
    async def _run_one(host: str, feed: SnapshotFeed[Snapshot], stop: asyncio.Event) -> None:
        try:
            await feed.run(stop)
        except asyncio.CancelledError:
            raise
        except Exception:  # the loop's own bug: logged, the other hosts go on
            log.exception("the feed of %s failed", host)

    async def _close(self) -> None:
        for closer in self._closers:
            try:
                result = closer()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("freeing what a feed held failed")

    def _arrived_for(self, host: str) -> Callable[[Snapshot], None]:
        def arrived(snapshot: Snapshot) -> None:
            reason = self._judge(snapshot) if self._judge is not None else None
            state = HostState.UP if reason is None else HostState.UNREACHABLE
            self._set(host, state, snapshot, reason)

        return arrived

    def _failed_for(self, host: str) -> Callable[[str], None]:
        def failed(reason: str) -> None:
            self._set(host, HostState.UNREACHABLE, None, reason)

        return failed

    def _set(
        self, host: str, state: HostState, snapshot: Snapshot | None, error: str | None
    ) -> None:
        old = self._hosts[host]
        self._hosts[host] = HostUpdate(
            host=host,
            state=state,
            snapshot=snapshot if snapshot is not None else old.snapshot,
            error=error if state is HostState.UNREACHABLE else None,
            received_at=self._clock() if snapshot is not None else old.received_at,
            sequence=old.sequence + 1,
        )
        self._changed()

    def _changed(self) -> None:
        self._fleet = None
        tell(self._listeners, self.latest)


def this_host(
    sampler: SnapshotFeed[Snapshot],
    *,
    host: str = LOCAL_HOST,
    closers: Sequence[Closer] = (),
    clock: Callable[[], float] = time.time,
) -> FleetFeed:
    """This machine's sampler (``top`` without ``--url``/``--ssh.targets``) as the one host of a
    fleet."""
    return FleetFeed(
        [(host, sampler)],
        name=f"this host ({sampler.name})",
        judge=nvml_down,
        closers=closers,
        clock=clock,
    )
