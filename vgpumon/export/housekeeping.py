"""Periodic memory housekeeping of ``vgpumon serve``: a full collection, then ``malloc_trim``.

Once every :data:`HOUSEKEEPING_SECONDS`, right after a publish (the moment furthest from the next
render), and once at start-up: ``gc.collect()`` for what waits in reference cycles, then
``malloc_trim(0)`` (:func:`vgpumon.allocator.trim`) to give free heap pages back, so resident
memory follows what the process holds instead of its high-water mark. It holds the event loop
while it runs, so it must stay short (it walks only what was made since the start-up freeze).
Why and what it saves: docs/exporter.md, "Memory".
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable

from vgpumon import allocator

log = logging.getLogger(__name__)

HOUSEKEEPING_SECONDS = 60.0  # at most once per this, after a publish


class Housekeeping:
    """Runs :meth:`run` after a publish once :attr:`period` seconds have passed since the last.

    ``clock``, ``collect`` and ``trim`` are parameters so tests can drive it on a fake clock.
    """

    def __init__(
        self,
        period: float = HOUSEKEEPING_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
        collect: Callable[[], object] = gc.collect,
        trim: Callable[[], bool] = allocator.trim,
    ) -> None:
        self.period = period
        self._clock = clock
        self._collect = collect
        self._trim = trim
        self._last = clock()  # the first run is one period after start, not at once
        self.runs = 0
        self.last_duration_seconds = 0.0

    def after_publish(self) -> bool:
        """Run the housekeeping if it is due; returns whether it ran."""
        if self._clock() - self._last < self.period:
            return False
        self.run()
        return True

    def run(self) -> None:
        """Collect every generation, then give free heap pages back to the system."""
        started = time.perf_counter()
        self._collect()
        released = self._trim()
        self.last_duration_seconds = time.perf_counter() - started
        self._last = self._clock()
        self.runs += 1
        log.debug(
            "memory housekeeping: %.1f ms (heap pages released: %s)",
            self.last_duration_seconds * 1000,
            released,
        )
