"""Badges: the short alarms a row carries (lost, hung, Xid, unlicensed, expiring, starved, idle).

A badge is decided here once, from the snapshot alone (plus the scheduler shares a consumer
measured), so the terminal UI, ``vgpumon snapshot`` and any later front end raise the same alarm
for the same data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# A license that runs out within this many seconds is "expiring" (one week: enough time to renew).
EXPIRING_WITHIN_SECONDS = 7 * 86400

# Idle holders (docs/metering.md, "Idle holders"): the metering stage counts how long a vGPU has
# stayed under the idle ratio while licensed and running, and how long a process has held memory
# with no SM use. The badge shows well before the alerts (4 hours, 30 minutes): it is a hint to
# look, not an alarm; a pause between two jobs stays under it.
IDLE_VGPU_AFTER_SECONDS = 15 * 60
IDLE_PROCESS_AFTER_SECONDS = 5 * 60

# Badge kinds, most severe first; the order is the display order. ``stale``: the sampler is wedged
# and the row shows the last good reading, not a live one.
# ``idle``: a vGPU or process that holds the GPU without using it (below).
# ``recovery``: the driver asks for a reset, reboot or drain; ``memory``: memory beyond repair;
# ``repair``: a repair waits for the next reset (vgpumon.model.Recovery decides each).
KINDS = (
    "lost",
    "hung",
    "recovery",
    "memory",
    "xid",
    "stale",
    "repair",
    "unlicensed",
    "expiring",
    "starved",
    "idle",
)
ERROR_KINDS = frozenset({"lost", "hung", "recovery", "memory", "xid"})
# The short label of each recovery action (the badge says what the driver asks for).
RECOVERY_LABELS = {
    "gpu_reset": "reset!",
    "node_reboot": "reboot!",
    "drain_p2p": "drain-p2p!",
    "drain_and_reset": "drain+reset!",
    "recover_imex_domain": "imex!",
    "bus_reset": "bus-reset!",
    "system_reboot": "reboot!",
}


@dataclass(frozen=True, order=True)
class Badge:
    """One alarm: ``kind`` (for styling and filtering, see :data:`KINDS`) and its short label."""

    rank: int
    kind: str
    label: str

    @property
    def error(self) -> bool:
        """Red (the GPU or its data is at risk) rather than yellow (attention needed)."""
        return self.kind in ERROR_KINDS


def badge(kind: str, label: str | None = None) -> Badge:
    return Badge(KINDS.index(kind), kind, label or kind)


def unlicensed(state: str | None, licensed: bool | None) -> bool:
    """A vGPU whose license state says it runs without a license (restricted or not)."""
    if state is not None:
        return state.startswith("unlicensed")
    return licensed is False


def expiring(expiry: float | None, now: float, state: str | None) -> bool:
    """Licensed, with an expiry date inside :data:`EXPIRING_WITHIN_SECONDS`."""
    if expiry is None or not expiry or (state is not None and state != "licensed"):
        return False
    return expiry - now <= EXPIRING_WITHIN_SECONDS


def idle(seconds: float | None, after: float) -> bool:
    """Idle without a break for at least ``after`` seconds (unknown is not idle)."""
    return seconds is not None and seconds >= after


def recovery(actions: Iterable[str]) -> Badge | None:
    """The recovery badge of the GPUs asking for ``actions``: what they ask for, or
    ``recover!`` where they ask for different things (each GPU's own row says which)."""
    said = {RECOVERY_LABELS.get(a, "recover!") for a in actions}
    if not said:
        return None
    return badge("recovery", said.pop() if len(said) == 1 else "recover!")


def labels(badges: tuple[Badge, ...]) -> str:
    return " ".join(b.label for b in badges)
