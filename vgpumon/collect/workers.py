"""Daemon worker threads that run NVML calls on behalf of the asyncio sampler.

Why not ``loop.run_in_executor``: NVML calls can hang forever (a GPU fallen off the bus, a driver
stuck in the kernel). A ``ThreadPoolExecutor`` thread that never returns is joined at interpreter
exit, so the exporter could never stop, and its pool would silently fill with stuck threads. Here
each GPU has one daemon thread; while it is stuck the sampler sees it as busy, reports the GPU as
hung and does not pile up more work behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from vgpumon.collect.threads import daemon_thread

T = TypeVar("T")


def settle(fut: asyncio.Future[Any], result: Any, exc: BaseException | None) -> None:
    """Give ``fut`` a job's outcome, on the loop's thread."""
    # A future abandoned after its deadline is already done (cancelled): it stays as it is.
    if fut.done():
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)


class Worker:
    """One daemon thread executing one job at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[
            tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]] | None
        ] = queue.SimpleQueue()
        self._busy = threading.Event()
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
            job, done = item
            try:
                result = job()
            except BaseException as exc:  # noqa: BLE001
                self._busy.clear()
                done(None, exc)
            else:
                self._busy.clear()
                done(result, None)

    def submit(self, job: Callable[[], T]) -> asyncio.Future[T]:
        """Run ``job`` on this worker; the returned future resolves on the calling loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()

        def done(result: Any, exc: BaseException | None) -> None:
            # RuntimeError: the loop closed while the call was stuck; nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, fut, result, exc)

        self.post(job, done)
        return fut

    def post(self, job: Callable[[], T], done: Callable[[Any, BaseException | None], None]) -> None:
        """Run ``job`` on this worker, then ``done(result, error)`` in this worker's thread.

        No event loop involved: the serial dispatch hands the next GPU's job on from here
        (:class:`vgpumon.collect.dispatch.GpuChain`), so the loop wakes once per chain, not per GPU.
        ``done`` must be quick and must not raise.
        """
        self._busy.set()
        self._jobs.put((job, done))

    def stop(self) -> None:
        """Ask the thread to end after its current job (a stuck thread just stays, as a daemon)."""
        self._jobs.put(None)
