"""A license lease not renewed when due: the one license verdict (docs/licensing.md).

The expiry NVML reports for a licensed vGPU or guest feature (``licenseExpiry``, status VALID) is
the end of the current *lease* from the NVIDIA License System: a networked client leases its
license, renews the lease while it runs and can reach the license service, and returns it at shut
down. On a healthy host the expiry therefore keeps moving forward and always lies within one lease
of now: "expires within a week" is no problem at all when the lease is a week long and renewed
long before its end. What an operator can act on is a lease that is *not* renewed: the guest
cannot reach the license service, and when the lease runs out the guest loses its license.

The rule: each lease is seen first at some time ``first`` with an end ``expiry`` (a renewal moves
the end, which starts a new lease). A lease is **overdue** once more than
:data:`OVERDUE_FRACTION` of it, as seen, has passed without a renewal, or once its end has passed
while the guest still says licensed. NVIDIA's documents do not say when within a lease the client
renews; any client that renews in the first half of its lease is never called overdue. After
vgpumon starts, the lease as seen is the part left at the first reading, so a lease that was
already late is called overdue after half of what was left.
"""

from __future__ import annotations

from collections.abc import Hashable

OVERDUE_FRACTION = 0.5


class LeaseTracker:
    """The leases of one GPU's licenses (vGPUs on a host, features in a guest), by key."""

    def __init__(self) -> None:
        self._seen: dict[Hashable, tuple[float, float]] = {}  # key -> (lease end, first seen)

    def overdue(
        self, key: Hashable, now: float, licensed: bool | None, expiry: float | None
    ) -> bool | None:
        """Whether the license's lease is overdue for renewal; None where there is no lease
        (not licensed, or no expiry: permanent, not applicable, not available)."""
        if not licensed or expiry is None:
            self._seen.pop(key, None)
            return None
        seen = self._seen.get(key)
        if seen is None or seen[0] != expiry:  # a new lease, or a renewal moved its end
            seen = self._seen[key] = (expiry, now)
        end, first = seen
        if now >= end:
            return True
        return now - first > OVERDUE_FRACTION * (end - first)

    def keep(self, keys: set[Hashable]) -> None:
        """Forget the licenses no longer there (a vGPU destroyed)."""
        for key in [k for k in self._seen if k not in keys]:
            del self._seen[key]
