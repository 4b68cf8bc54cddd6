"""Badges: the short alarms a GPU row carries (lost, hung, Xid, unlicensed, expiring, starved).

A badge is decided here once, from the snapshot alone (plus the scheduler shares a consumer
measured), so the terminal UI, ``vgpumon snapshot`` and any later front end raise the same alarm
for the same data.
"""

from __future__ import annotations

from dataclasses import dataclass

# A license that runs out within this many seconds is "expiring" (one week: enough time to renew).
EXPIRING_WITHIN_SECONDS = 7 * 86400

# Badge kinds, most severe first; the order is the display order. ``stale``: the sampler is wedged
# and the row shows the last good reading, not a live one.
KINDS = ("lost", "hung", "xid", "stale", "unlicensed", "expiring", "starved")
ERROR_KINDS = frozenset({"lost", "hung", "xid"})


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


def labels(badges: tuple[Badge, ...]) -> str:
    return " ".join(b.label for b in badges)
