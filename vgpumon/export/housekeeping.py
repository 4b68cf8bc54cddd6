"""Periodic memory housekeeping of ``vgpumon serve``: a full collection, then ``malloc_trim``.

Why: a serving exporter makes a new snapshot every interval and renders it to bodies of up to a
few megabytes (16 GPUs x 48 vGPUs). Reference counting frees almost all of it, but what sits in
a reference cycle (an exception's traceback, a closed connection's protocol and transport)
waits for the collector's oldest generation, which runs rarely; and glibc keeps freed heap pages
resident unless they lie at the top of the heap. Once every :data:`HOUSEKEEPING_SECONDS` the
exporter collects every generation (``gc.collect()``; the start-up objects are frozen,
:mod:`vgpumon.export.gc_settings`, so the pass walks only what was made since) and then calls
``malloc_trim(0)`` (:func:`vgpumon.allocator.trim`, a no-op where glibc is absent), which gives
every whole free page back to the system. Resident memory then follows what the process holds
instead of its high-water mark.

Where: right after a new snapshot's bodies are published (:meth:`Housekeeping.after_publish`,
called by the publisher on the event loop). That is the moment furthest from the next render, and
the bodies of the previous snapshot have just been let go. The work holds the event loop (and the
GIL) while it runs, so it must stay short: it walks only what was made since the freeze, and a
scrape that arrives meanwhile waits for it at most once per :data:`HOUSEKEEPING_SECONDS` (what it
costs: docs/measurements.md). It also runs once at start-up, right after the freeze. Where
renders wait for a scrape to ask, the publish it follows is that scrape's render, so that scrape
waits for the housekeeping too. When the
sampler publishes nothing (wedged), the housekeeping waits too: the process then makes little to
clean up.
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
