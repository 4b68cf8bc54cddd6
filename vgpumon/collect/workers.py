"""Daemon worker threads that run NVML calls on behalf of the sampler's cycle.

Why not a ``ThreadPoolExecutor``: NVML calls can hang forever (a GPU fallen off the bus, a driver
stuck in the kernel). A ``ThreadPoolExecutor`` thread that never returns is joined at interpreter
exit, so the exporter could never stop, and its pool would silently fill with stuck threads. Here
each GPU has one daemon thread; while it is stuck the sampler sees it as busy, reports the GPU as
hung and does not pile up more work behind it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any, TypeVar

from vgpumon.collect.threads import daemon_thread

T = TypeVar("T")


def settle(fut: Future[Any], result: Any, exc: BaseException | None) -> None:
    """Give ``fut`` a job's outcome (from any thread)."""
    # A future given up on is simply no longer waited for; it is never cancelled, but stay safe
    # if it was: a late outcome is dropped.
    try:
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
    except InvalidStateError:
        pass


class Worker:
    """One daemon thread executing one job at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], Callable[[Any, BaseException | None], None], float | None]
            | None
        ] = queue.SimpleQueue()
        self._busy = threading.Event()
        self._nudge = threading.Event()  # a job posted for later starts now (post_at)
        self._stopping = False
        self._thread = daemon_thread(self._run, f"vgpumon-{name}")
        self._thread.start()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, done, at = item
            if at is not None:  # posted for later: busy only once it runs
                left = at - time.monotonic()
                if left > 0:
                    self._nudge.wait(left)
                self._nudge.clear()
                if self._stopping:
                    return
                self._busy.set()
            try:
                result = job()
            except BaseException as exc:  # noqa: BLE001
                self._busy.clear()
                done(None, exc)
            else:
                self._busy.clear()
                done(result, None)

    def submit(self, job: Callable[[], T]) -> Future[T]:
        """Run ``job`` on this worker; the returned future is settled from the worker's thread.

        A thread future, not an event loop's: the sampler's cycle waits on it in its own thread
        (:mod:`vgpumon.collect.sampler`), so no job wakes the event loop.
        """
        fut: Future[T] = Future()

        def done(result: Any, exc: BaseException | None) -> None:
            settle(fut, result, exc)

        self.post(job, done)
        return fut

    def post(self, job: Callable[[], T], done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``job`` on this worker, then ``done(result, error)`` in this worker's thread.

        The serial dispatch hands the next GPU's job on from here
        (:class:`vgpumon.collect.dispatch.GpuChain`). ``done`` must be quick and must not raise.
        """
        self._busy.set()
        self._jobs.put((job, done, None))

    def post_at(
        self, at: float, job: Callable[[], T], done: Callable[[Any, BaseException | None], None]
    ) -> None:
        """Run ``job`` on this worker at ``at`` (``time.monotonic``), or at once on
        :meth:`nudge`; then ``done(result, error)`` in this worker's thread.

        The worker waits for the time itself, so the job costs one wake-up of this thread and no
        other's (the sampler's usual cycle, :mod:`vgpumon.collect.schedule`). It is not
        :attr:`busy` while it waits, only once the job runs.
        """
        self._nudge.clear()
        self._jobs.put((job, done, at))

    def nudge(self) -> None:
        """Start a job posted for later now (``refresh``)."""
        self._nudge.set()

    def stop(self) -> None:
        """Ask the thread to end after its current job (a stuck thread just stays, as a daemon);
        a job posted for later and not started is dropped."""
        self._stopping = True
        self._nudge.set()
        self._jobs.put(None)
