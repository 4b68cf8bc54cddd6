"""Clocks for the simulator.

Every simulated value is a function of scenario time, so swapping the clock is all it takes to
make a run deterministic: tests drive a :class:`ManualClock`, the exporter and demos a
:class:`WallClock`.
Hangs are the one exception and always wait in wall time, so a stuck worker thread is freed even
when the scenario clock stands still.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Unix seconds."""
        ...


class WallClock:
    """The real time; the default outside tests."""

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that moves only when told to, so tests can reproduce every sample exactly."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a ManualClock cannot go backwards")
        with self._lock:
            self._now += seconds
