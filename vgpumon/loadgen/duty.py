"""Duty-cycle arithmetic: how long each period's kernels spin and how many clock cycles that is.

The spin kernels count SM clock cycles (``clock64``), which is exact while the clock holds still but
wrong by the ratio of clocks when the GPU boosts, throttles or idles down. Two mechanisms keep the
duty right: :class:`ClockEstimator` re-measures cycles per second from every launch (each kernel
reports its own cycle count and ``%globaltimer`` nanoseconds), and :class:`DutyController` carries
the busy time a period missed (or overshot) into the next one, so the long-run duty converges to
the target even across a clock change. Both are pure Python, so the loop is testable without a GPU.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

MIN_CLOCK_HZ = 20e6
MAX_CLOCK_HZ = 10e9
MIN_LAUNCH_S = 20e-6
"""Busy time below this is not worth a launch (launch overhead is a few microseconds)."""

MAX_KERNEL_S = 0.1
"""Longest single launch: long busy phases are split so a stop request waits at most this long and
the clock estimate is refreshed at least this often."""

MIN_IDLE_S = 0.0005
"""A duty below 1 always leaves this much idle per period, so the periodic schedule never queues
kernels back to back (duty 1 uses the continuous schedule instead)."""


def plausible_clock(hz: float) -> bool:
    return math.isfinite(hz) and MIN_CLOCK_HZ <= hz <= MAX_CLOCK_HZ


def clock_from_timer(cycles: int, ns: int, wall_s: float) -> float | None:
    """SM clock from a launch's cycle count and ``%globaltimer`` span; None if the timer is bad.

    The kernel's span can never exceed the host's wall time around a synchronous launch (plus
    slack for timer granularity), but it may be far shorter: another context time-slicing the GPU
    or a slow launch stretches only the host's side. So only an impossible span (zero, longer than
    the wall) or an impossible clock rejects the timer.
    """
    if cycles <= 0 or ns <= 0 or ns > wall_s * 1e9 * 1.05 + 1e6:
        return None
    hz = cycles / (ns * 1e-9)
    return hz if plausible_clock(hz) else None


def split_busy(busy_s: float, max_kernel_s: float = MAX_KERNEL_S) -> list[float]:
    """Equal launches of at most ``max_kernel_s`` adding up to ``busy_s`` (none if tiny)."""
    if busy_s < MIN_LAUNCH_S:
        return []
    n = max(1, math.ceil(busy_s / max_kernel_s - 1e-9))
    return [busy_s / n] * n


def cycles_for(seconds: float, clock_hz: float) -> int:
    """Spin length in SM cycles for a busy time at the estimated clock (at least 1)."""
    if not plausible_clock(clock_hz):
        raise ValueError(f"implausible SM clock {clock_hz!r} Hz")
    return max(1, round(seconds * clock_hz))


@dataclass
class ClockEstimator:
    """Cycles per second of the SM clock, from (cycles, nanoseconds) pairs the kernels measured.

    The median of the last few samples ignores one launch that straddled a clock change; a window of
    three still follows a real change within three launches (at most 0.3 s with the default
    period).
    """

    hz: float
    window: int = 3
    _samples: deque[float] = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        if not plausible_clock(self.hz):
            raise ValueError(f"implausible initial SM clock {self.hz!r} Hz")

    def update(self, cycles: int, ns: int) -> float:
        """Fold in one measurement (ignored if implausible); return the current estimate."""
        if cycles > 0 and ns > 0:
            sample = cycles / (ns * 1e-9)
            if plausible_clock(sample):
                self._samples.append(sample)
                while len(self._samples) > self.window:
                    self._samples.popleft()
                self.hz = statistics.median(self._samples)
        return self.hz


@dataclass
class DutyController:
    """Busy time per period for a target duty, correcting the error of earlier periods.

    ``debt_s`` is target minus achieved busy time so far (positive: the GPU ran less than asked).
    It is added to the next period's busy time, bounded so one period is never asked for more than
    fits (period minus MIN_IDLE_S) and the debt cannot wind up without limit (one period).
    """

    duty: float
    period_s: float
    debt_s: float = 0.0

    @property
    def continuous(self) -> bool:
        """Duty 1: kernels are queued back to back with no idle phase at all."""
        return self.duty >= 1.0

    @property
    def target_busy_s(self) -> float:
        return self.duty * self.period_s

    def next_busy_s(self) -> float:
        if self.continuous:
            return self.period_s
        if self.duty <= 0.0:
            return 0.0
        ceiling = max(0.0, self.period_s - MIN_IDLE_S)
        return min(ceiling, max(0.0, self.target_busy_s + self.debt_s))

    def record(self, achieved_s: float) -> None:
        """Account one finished period whose kernels were busy for ``achieved_s`` in total."""
        if self.continuous or self.duty <= 0.0:
            self.debt_s = 0.0
            return
        limit = self.period_s
        self.debt_s = max(-limit, min(limit, self.debt_s + self.target_busy_s - achieved_s))

    def retarget(self, duty: float, period_s: float) -> None:
        """Change the target; earlier debt belongs to the old target and is dropped."""
        self.duty = duty
        self.period_s = period_s
        self.debt_s = 0.0
