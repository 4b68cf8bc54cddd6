"""How :meth:`Sampler.run <vgpumon.collect.sampler.Sampler.run>` times its cycles on an event loop,
with the fewest thread wake-ups.

A one-GPU host's cycle used to take four wake-ups of three threads: the cycle thread woke at its
time, handed the GPU's job to the GPU's worker, was woken again by the job's end, and handed the
snapshot to the event loop. On a virtual machine each wake-up costs about 0.1 ms of CPU, next to
the 1.5 ms that the NVML calls of such a cycle cost (bench/results/, the real-GPU runs). Now the
event loop keeps the time: it is woken for every snapshot anyway, and its timers cost nothing
until they fire.

* **The usual cycle** of a one-GPU host (the GPU answers, its worker is free): when the loop
  publishes a snapshot, it posts the next cycle to the GPU's worker *for its time*; that worker
  wakes at that time, reads the GPU, builds the snapshot and hands it to the loop. Two wake-ups.
  The loop watches the cycle's deadline with a timer that the snapshot's arrival cancels. If the
  timer fires first, the loop ends the cycle as the cycle thread ends one at its deadline (the
  GPU is read without its hung collector, or it is hung; :meth:`Sampler._overdue`), and the
  cycles are ordinary ones until the GPU answers again.
* **Every other cycle** (several GPUs, a GPU down, hung or not yet read, NVML down): the ordinary
  cycle (:meth:`Sampler.cycle_now`, which hands the phases to the workers and waits on them with
  the deadline) on the cycle thread, posted for its time the same way.

The sampler process of a large host has no event loop: it cycles with :meth:`Sampler.drive`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vgpumon.collect.slots import GpuSlot, SystemResult
from vgpumon.collect.workers import Worker
from vgpumon.model import Snapshot

if TYPE_CHECKING:
    from vgpumon.collect.sampler import CycleStart, Sampler

log = logging.getLogger(__name__)

# A usual cycle past its deadline that could not be ended yet is looked at again after this.
RETRY_SECONDS = 0.05


@dataclass
class FastRun:
    """One usual cycle: posted to its GPU's worker, ended by the worker or by the deadline."""

    slot: GpuSlot
    worker: Worker  # the GPU's worker it was posted to
    start: CycleStart | None = None  # set when the worker begins it
    system: SystemResult | None = None
    closed: bool = False  # ended: by the worker (its snapshot) or the deadline (without it)
    cancelled: bool = False  # stopped before it began
    # The next usual cycle, which the worker posted to itself as this one ended (posting from
    # the worker's own thread wakes nobody; from the loop it would wake the worker twice).
    next: FastRun | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class LoopSchedule:
    """The cycles of one :meth:`Sampler.run`, timed by its event loop (module docstring)."""

    def __init__(
        self,
        sampler: Sampler,
        loop: asyncio.AbstractEventLoop,
        publish: Callable[[Snapshot], None],
    ) -> None:
        self._sampler = sampler
        self._loop = loop
        self._publish = publish
        self._cycle_worker = Worker("cycle")  # the ordinary cycles
        self._fast: FastRun | None = None  # the usual cycle posted or running
        self._ordinary_posted = False  # an ordinary cycle posted or running
        self._timer: asyncio.TimerHandle | None = None  # the usual cycle's deadline
        self._stopping = False
        self.ended: asyncio.Future[None] = loop.create_future()

    # ------------------------------------------------------------------ on the event loop

    def start(self) -> None:
        self._plan(time.monotonic())

    def refresh(self) -> None:
        """Start the cycle posted for later now."""
        if self._fast is not None:
            self._fast.worker.nudge()
        elif self._ordinary_posted:
            self._cycle_worker.nudge()

    def stop(self) -> None:
        """No new cycle; a cycle not begun is dropped, one in flight ends (by its deadline at
        the latest); :attr:`ended` is set then."""
        self._stopping = True
        fast = self._fast
        if fast is not None:
            with fast.lock:
                if fast.start is None:
                    fast.cancelled = True
            fast.worker.nudge()  # it begins now and returns at once
        elif self._ordinary_posted:
            self._cycle_worker.nudge()
        self._end_if_idle()

    def close(self) -> None:
        self._cycle_worker.stop()

    def _end_if_idle(self) -> None:
        idle = self._fast is None and not self._ordinary_posted
        if self._stopping and idle and not self.ended.done():
            self.ended.set_result(None)

    def _plan(self, at: float) -> None:
        """Post the next cycle for ``at`` (``time.monotonic``)."""
        if self._stopping:
            self._end_if_idle()
            return
        sampler = self._sampler
        slot = sampler._usual_slot()
        if slot is None:
            self._ordinary_posted = True
            self._cycle_worker.post_at(at, self._ordinary, self._from_ordinary)
            return
        self._fast = self._post_usual(slot, at)
        self._arm(self._fast, at)

    def _post_usual(self, slot: GpuSlot, at: float) -> FastRun:
        """Post a usual cycle for ``at`` to the GPU's worker (from any thread)."""
        run = FastRun(slot, slot.worker)

        def done(result: Any, exc: BaseException | None) -> None:
            self._loop.call_soon_threadsafe(self._from_fast, run, result, exc)

        run.worker.post_at(at, lambda: self._usual(run), done)
        return run

    def _arm(self, run: FastRun, at: float) -> None:
        """The deadline of the usual cycle posted for ``at``."""
        left = max(0.0, at - time.monotonic()) + self._sampler.config.deadline_seconds
        self._timer = self._loop.call_at(self._loop.time() + left, self._overdue, run)

    def _next_at(self) -> float:
        return self._sampler._last_start + self._sampler.config.interval_seconds

    def _from_fast(self, run: FastRun, snap: Any, exc: BaseException | None) -> None:
        if self._fast is not run:
            return  # its deadline passed: the cycle was published without it
        self._fast = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if exc is not None:
            log.error("sampling cycle failed", exc_info=exc)
        if isinstance(snap, Snapshot) and not self._stopping:
            self._publish(snap)
        following = run.next
        if following is not None:  # the worker posted the next one to itself
            if self._stopping:
                self._fast = following
                self.stop()  # drops it
                return
            self._fast = following
            self._arm(following, self._next_at())
            return
        if snap is None and not run.cancelled and not self._stopping:
            self._plan(time.monotonic())  # not a usual cycle after all: an ordinary one, now
            return
        self._plan(max(time.monotonic(), self._next_at()))

    def _overdue(self, run: FastRun) -> None:
        """The usual cycle's deadline passed before its snapshot came."""
        self._timer = None
        if self._fast is not run:
            return
        start = run.start
        if start is not None and start.deadline > time.monotonic():
            # It began after the time it was posted for (a busy machine): its deadline counts
            # from when it began, as an ordinary cycle's does.
            self._timer = self._loop.call_at(
                self._loop.time() + start.deadline - time.monotonic(), self._overdue, run
            )
            return
        snap = self._sampler._overdue(run)
        if snap is None:
            if not run.closed:  # not begun yet, or a one-shot cycle holds the sampler: again soon
                self._timer = self._loop.call_later(RETRY_SECONDS, self._overdue, run)
            return  # else it ended meanwhile: its snapshot is on its way
        self._fast = None
        if not self._stopping:
            self._publish(snap)
        self._plan(max(time.monotonic(), self._next_at()))

    def _from_ordinary(self, result: Any, exc: BaseException | None) -> None:
        self._loop.call_soon_threadsafe(self._ordinary_done, result, exc)

    def _ordinary_done(self, snap: Any, exc: BaseException | None) -> None:
        self._ordinary_posted = False
        if exc is not None:
            log.error("sampling cycle failed", exc_info=exc)
        if isinstance(snap, Snapshot) and not self._stopping:
            self._publish(snap)
        self._plan(max(time.monotonic(), self._next_at()))

    # ------------------------------------------------------------------ on the GPU's worker

    def _usual(self, run: FastRun) -> Snapshot | None:
        """A usual cycle; then, while the next one will be usual too (the GPU count not due by
        then), post it to this same worker for its time."""
        sampler = self._sampler
        snap = sampler._usual_cycle(run)
        if snap is not None and not self._stopping:
            at = self._next_at()
            ahead = sampler.clock() + max(0.0, at - time.monotonic())
            if sampler._usual_slot(ahead) is run.slot and run.slot.worker is run.worker:
                run.next = self._post_usual(run.slot, at)
        return snap

    # ------------------------------------------------------------------ on the cycle thread

    def _ordinary(self) -> Snapshot | None:
        if self._stopping:
            return None
        return self._sampler.cycle_now()
