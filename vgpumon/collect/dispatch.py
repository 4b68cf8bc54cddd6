"""GPU dispatch: the GPUs' jobs of a cycle all at once (parallel) or one after another (serial),
and how ``auto`` picks between them (docs/exporter.md, "GPU dispatch").

A serial job that overruns its budget does not hold the GPUs after it: those are then read in
parallel. A serial chain hands each job on from worker to worker, so the cycle's thread wakes once
per chain, not once per GPU. Everything here runs in the sampler's cycle thread, never on the
event loop.
"""

from __future__ import annotations

import collections
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.slots import GpuResult, GpuSlot
from vgpumon.collect.workers import Worker, settle

# GPU dispatch (docs/exporter.md, "GPU dispatch"). Reading GPUs in parallel saves wall time only
# when their jobs are long: parallel workers contend for the GIL around every short ctypes call,
# and each GPU costs a wake-up of the cycle's thread, so many GPUs of short jobs cost more CPU in
# parallel than one after another (bench/results/gpu-dispatch.md).
# ``auto`` reads serially while the GPUs' jobs, one after another, take at most this part of the
# interval (and of the deadline, so that a serial cycle leaves room to fall back):
AUTO_SERIAL_INTERVAL_FRACTION = 0.1
AUTO_SERIAL_DEADLINE_FRACTION = 0.25
# ``auto`` decides from the median of the last few serial cycles' costs, so that the cycle every
# 10 s that reads all the cadenced values (energy, BAR1, license...) at once does not by itself
# make it parallel: such a cycle reads its GPUs left after the threshold in parallel anyway.
AUTO_SERIAL_HISTORY = 5
# Job walls measured in parallel overstate the serial cost (GIL contention stretches each), so
# while parallel, ``auto`` measures a serial cycle again this often (bounded as above).
AUTO_PROBE_CYCLES = 60
# A serial job still running after max(this many times its last wall, the floor) is suspected
# hung: the GPUs after it are then read in parallel, until the cycle's deadline as usual.
SERIAL_BUDGET_FACTOR = 4.0
SERIAL_BUDGET_FLOOR_SECONDS = 0.05
# A serial cycle sends the GPUs not yet read off in parallel at this share of the deadline at
# the latest (explicit ``serial`` on a host too slow for it must not make GPUs miss the deadline).
SERIAL_DEADLINE_SHARE = 0.5


class GpuChain:
    """GPU jobs run one after another, each on its own GPU's worker.

    The worker that finishes a job settles its future and posts the next GPU's job itself, so the
    cycle's thread is woken once for the whole chain (:attr:`done`), not once per GPU. The cycle
    may :meth:`stop` the chain (a job overran its budget): jobs not started are then the cycle's
    to run, and a job still running settles its own future when it returns.
    """

    def __init__(self, jobs: list[tuple[Worker, Callable[[], GpuResult], Future[GpuResult]]]):
        self._jobs = jobs
        self._lock = threading.Lock()
        self._next = 0  # the next job to start
        self._running: int | None = None
        self._started = 0.0  # when the running job started (monotonic)
        self._stopped = False
        self.done = threading.Event()  # set when the last job has finished

    def start(self) -> None:
        with self._lock:
            self._post_next()

    def position(self) -> tuple[int | None, float]:
        """The job running now (None: none) and when it started."""
        with self._lock:
            return self._running, self._started

    def stop(self) -> list[int]:
        """End the chain; returns the jobs not begun."""
        with self._lock:
            self._stopped = True
            rest = list(range(self._next, len(self._jobs)))
            self._next = len(self._jobs)
        return rest

    def _post_next(self) -> None:  # with the lock held
        index = self._next
        self._next += 1
        self._running, self._started = index, time.monotonic()
        worker, job, fut = self._jobs[index]

        def done(result: Any, exc: BaseException | None) -> None:
            self._job_done(fut, result, exc)

        worker.post(job, done)

    def _job_done(self, fut: Future[GpuResult], result: Any, exc: BaseException | None) -> None:
        """In the worker that ran the job: settle it, then hand on to the next GPU."""
        settle(fut, result, exc)
        with self._lock:
            self._running = None
            if self._stopped:
                return
            if self._next < len(self._jobs):
                self._post_next()
                return
        self.done.set()


class GpuDispatch:
    """The sampler's GPU dispatch (a base of :class:`~vgpumon.collect.sampler.Sampler`)."""

    config: SamplerConfig
    _cycles: int
    _serial_costs: collections.deque[float]
    _serial_cost_cycle: int

    def _gpu_job(self, slot: GpuSlot, now: float) -> Callable[[], GpuResult]:
        raise NotImplementedError

    def _serial_threshold(self) -> float:
        """``auto`` reads serially while the GPUs' jobs together take at most this (seconds)."""
        return min(
            AUTO_SERIAL_INTERVAL_FRACTION * self.config.interval_seconds,
            AUTO_SERIAL_DEADLINE_FRACTION * self.config.deadline_seconds,
        )

    def _dispatch_mode(self, to_read: Sequence[GpuSlot]) -> str:
        """ "serial" or "parallel" for this cycle's GPU jobs."""
        mode = self.config.dispatch
        if mode != "auto":
            return mode
        if len(to_read) <= 1:
            return "serial"  # one job: the same either way
        if any(slot.wall is None for slot in to_read):
            # A GPU never read (the first cycle, a GPU new to the sampler): its cost is unknown,
            # and the first read of a GPU is its longest (static values), so keep the wait short.
            return "parallel"
        if self._serial_costs and self._cycles - self._serial_cost_cycle < AUTO_PROBE_CYCLES:
            cost = statistics.median(self._serial_costs)
            return "serial" if cost <= self._serial_threshold() else "parallel"
        # Not measured serially yet, or long ago: measure afresh (a serial cycle that overruns
        # the threshold reads its remaining GPUs in parallel, so this costs at most that).
        self._serial_costs.clear()
        return "serial"

    def _job_budget(self, slot: GpuSlot) -> float:
        """How long a serial job may run before the GPUs after it are read in parallel."""
        return max(SERIAL_BUDGET_FACTOR * (slot.wall or 0.0), SERIAL_BUDGET_FLOOR_SECONDS)

    def _dispatch(
        self, to_read: list[GpuSlot], now: float, deadline: float, mode: str
    ) -> dict[str, Future[GpuResult]]:
        """Start the GPUs' jobs; returns their futures, some maybe still running."""
        if mode == "parallel" or len(to_read) <= 1:
            return {s.uuid: s.worker.submit(self._gpu_job(s, now)) for s in to_read}
        started = time.monotonic()
        # Besides a suspected hang, the chain ends (the GPUs not yet read go parallel) at half
        # the deadline, so that those GPUs still have time; in auto, already at the threshold
        # (the serial cost is then too high: parallel for a while).
        end = started + SERIAL_DEADLINE_SHARE * (deadline - started)
        if self.config.dispatch == "auto":
            end = min(end, started + self._serial_threshold())
        pending, outcome = self._serial_chain(to_read, now, deadline, end)
        # A suspected hang ("slow") says nothing about the cost: not counted.
        if outcome != "slow":
            over = outcome == "over"
            self._serial_costs.append(float("inf") if over else sum(s.wall or 0.0 for s in to_read))
            self._serial_cost_cycle = self._cycles
        return pending

    def _serial_chain(
        self, to_read: list[GpuSlot], now: float, deadline: float, end: float
    ) -> tuple[dict[str, Future[GpuResult]], str]:
        """Serial by handing each job on from worker to worker: the cycle's thread wakes once per
        chain (or when a job overruns its budget), not once per GPU."""
        jobs: list[tuple[Worker, Callable[[], GpuResult], Future[GpuResult]]] = [
            (s.worker, self._gpu_job(s, now), Future()) for s in to_read
        ]
        pending = {s.uuid: job[2] for s, job in zip(to_read, jobs, strict=True)}
        chain = GpuChain(jobs)
        chain.start()
        while not chain.done.is_set():
            running, started = chain.position()
            t = time.monotonic()
            if running is None:  # the last job finished: its results are on their way
                slot_end = stop_at = deadline
            else:
                slot_end = started + self._job_budget(to_read[running])
                stop_at = min(slot_end, end)
            if t >= stop_at:
                for k in chain.stop():
                    worker, job, _ = jobs[k]
                    pending[to_read[k].uuid] = worker.submit(job)
                return pending, ("over" if end < slot_end else "slow")
            chain.done.wait(stop_at - t)
        return pending, "done"
