"""The one shape of a snapshot stream that every consumer drives: :class:`SnapshotFeed`.

A feed makes snapshots in its own loop (:meth:`SnapshotFeed.run`) and says when there is a new
one (:meth:`SnapshotFeed.on_snapshot`); a consumer reads the newest (:attr:`SnapshotFeed.latest`)
and never drives NVML, SSH or HTTP itself. A feed that reads over a network can fail to get a
snapshot at all; it is a :class:`FallibleFeed` and says so (:meth:`FallibleFeed.on_failure`),
keeping its last snapshot.

The feeds of one host (their news is a :class:`~vgpumon.model.Snapshot`):

* the sampler, this host's GPUs (``vgpumon.collect.sampler``); NVML trouble is inside its
  snapshots (``health``), so it never fails to make one;
* one exporter over HTTP (``vgpumon.sources.remote.RemoteFeed``), a :class:`FallibleFeed`;
* one agentless host, its ``nvidia-smi`` over SSH (``vgpumon.sources.ssh.SshHostFeed``), a
  :class:`FallibleFeed`. The two that poll a peer share their loop and listeners
  (``vgpumon.sources.polled.PolledFeed``).

A feed of several hosts has a :class:`Fleet` for news: every host's newest state
(:class:`HostUpdate`: connecting, up, unreachable with the reason and the last snapshot kept,
closed), in a stable order. ``vgpumon.sources.fleet.FleetFeed`` joins named feeds of one host
into such a feed; a feed that reads many hosts at once (a Prometheus server) can be one directly.

Who reads what:

* ``serve`` renders one feed: the sampler, or the agentless hosts' fleet
  (``vgpumon.sources.agentless.AgentlessFeed``, the fleet as the exporter renders it);
* ``top`` shows one feed of :class:`Fleet` news, whatever its hosts are: this host's sampler as a
  fleet of one, exporters, agentless hosts, or the hosts a Prometheus server scrapes
  (``vgpumon.sources.prometheus_fleet``, which reads only what is shown: :class:`Focused`)
  (docs/tui.md, "Data path"). Nothing else stands between
  a feed and ``top``: no second protocol, no loop of a consumer's own.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:  # the sampler process imports this module and needs no event loop
    import asyncio

from vgpumon.model import HostRollup, Snapshot

log = logging.getLogger(__name__)

S = TypeVar("S", covariant=True)
N = TypeVar("N")


class SnapshotFeed(Protocol[S]):
    """Snapshots of type ``S``, made in :meth:`run` until ``stop`` is set."""

    @property
    def name(self) -> str:
        """What the feed reads, for logs and titles."""
        ...

    @property
    def latest(self) -> S | None:
        """The newest snapshot; None before the first."""
        ...

    @property
    def not_ready_reason(self) -> str | None:
        """Why the feed is not ready to be served (``/-/ready``), in words; None when it is."""
        ...

    def on_snapshot(self, listener: Callable[[S], object]) -> None:
        """Call ``listener`` on the event loop with each new snapshot (quick, never blocking)."""
        ...

    def refresh(self) -> None:
        """Make the next snapshot now instead of at the next interval."""
        ...

    async def run(self, stop: asyncio.Event) -> None:
        """Make snapshots until ``stop`` is set."""
        ...


@runtime_checkable
class FallibleFeed(SnapshotFeed[S], Protocol[S]):
    """A feed whose attempt to get a snapshot can fail (a network between it and the GPUs).

    After a failure :attr:`latest` still holds the last snapshot (a screen shows it as stale) and
    :attr:`not_ready_reason` says why; the next snapshot (:meth:`on_snapshot`) ends the failure,
    even one with the same content as before.
    """

    def on_failure(self, listener: Callable[[str], object]) -> None:
        """Call ``listener`` on the event loop with a one-line reason when an attempt failed."""
        ...


def tell(listeners: Iterable[Callable[[N], object]], news: N) -> None:
    """Call every listener with ``news`` (a snapshot, a failure's reason); a listener that raises
    is logged and the others still hear it: a consumer's bug must not stop a feed."""
    for listener in listeners:
        try:
            listener(news)
        except Exception:
            log.exception("a listener of a snapshot feed failed")


class HostState(str, enum.Enum):
    """Where a host of a fleet stands; the value is what a screen prints."""

    CONNECTING = "connecting"  # no answer yet (first contact)
    UP = "up"  # the newest attempt gave a snapshot that says the host is up
    UNREACHABLE = "unreachable"  # the newest attempt failed, or its snapshot says the host is down
    CLOSED = "closed"  # the feed has stopped


@dataclass(frozen=True)
class HostUpdate:
    """One host's newest state in a :class:`Fleet`; a new object whenever it changes."""

    host: str  # stable key and display name: "local", an exporter's HOST:PORT, or its target name
    state: HostState
    snapshot: Snapshot | None = None  # the newest snapshot ever received (kept when unreachable)
    error: str | None = None  # one line, set when ``state`` is UNREACHABLE
    received_at: float | None = None  # time.time() when ``snapshot`` arrived
    sequence: int = 0  # grows by one with every change of this host
    # Where the snapshot was read when a feed reads hosts from a metrics store: VIA_STORE (as of
    # its last scrape, vgpumon.sources.prometheus_fleet) or VIA_LIVE (that host's own exporter,
    # opened live); None for a feed of hosts read each from itself.
    via: str | None = None
    # The host summed up by the fleet rules, where a metrics store gives only that for it
    # (a large fleet's hosts not shown in full); ``snapshot`` is then None.
    rollup: HostRollup | None = None

    @property
    def stale(self) -> bool:
        """The snapshot shown is older than the host's current state (host not up)."""
        held = self.snapshot is not None or self.rollup is not None
        return held and self.state is not HostState.UP


VIA_STORE = "Prometheus"
VIA_LIVE = "its exporter (live)"

# What a consumer shows (:class:`Focus`): the screens a feed that reads a metrics store fetches
# for (vgpumon.sources.prometheus_fleet says which families each reads). A feed that reads hosts
# themselves gets every reading whatever is shown, and needs no focus.
SCREENS = ("fleet", "host", "scheduler", "licenses", "capacity", "usage", "events")


@dataclass(frozen=True)
class Focus:
    """What a consumer shows now: the screen (one of :data:`SCREENS`), the hosts it shows in
    full (a host's screens), and whether a filter reads every row's text."""

    screen: str = "fleet"
    hosts: tuple[str, ...] = ()
    filtering: bool = False


@runtime_checkable
class Focused(Protocol):
    """A feed that reads only what is shown (:class:`Focus`), and can read one host from the
    host itself instead (:meth:`live`)."""

    def focus(self, focus: Focus) -> None:
        """Read what ``focus`` shows from the next refresh on (sooner where it needs more)."""
        ...

    def live(self, host: str, on: bool) -> None:
        """Read ``host`` from its own exporter (on) or back from the store (off)."""
        ...


@dataclass(frozen=True)
class Fleet:
    """The news of a feed of hosts: each host's newest state, in a stable order.

    A host whose state did not change keeps the very same :class:`HostUpdate` object from one
    Fleet to the next, so a consumer finds what changed by identity, without comparing snapshots.
    """

    name: str  # what the feed reads, for titles ("this host (sim:...)", "20 hosts")
    hosts: tuple[HostUpdate, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(u.host for u in self.hosts)
