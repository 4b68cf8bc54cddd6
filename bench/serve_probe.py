"""Run ``vgpumon serve ARGS`` in this interpreter and record how long its event loop was kept away.

    python bench/serve_probe.py OUT.json serve --sim bench/scenarios/vgpu-16x48.yaml ...

Three records of the serving process's own event loop, written to OUT.json when it exits (SIGTERM
or SIGINT, as an operator stops ``serve``):

* **stalls**: a probe task sleeps 1 ms again and again; each wake-up later than asked is a time
  the loop could not run (a long callback, the interpreter held by another thread, a garbage
  collection, the machine's own scheduling). ``stall_max_ms`` is the event loop's longest stall.
  Each stall is split by where its time went, from the loop thread's own counters
  (``/proc/self/task/TID/schedstat``): on a CPU (the loop's own work), waiting in the run queue
  for a CPU (the machine is busy: other processes), and the rest, asleep while work was due:
  waiting for the interpreter lock another thread of the process held. ``no_cpu_ms`` is the
  longest of those rests: on a shared machine it is the figure that says what the process did
  to its own loop;
* **callbacks**: the loop's callbacks that ran longer than 2 ms, by name, with the CPU time the
  loop thread spent in them (the rest of a callback's time it waited: for a CPU or the
  interpreter);
* **gc**: garbage collections in this process over 1 ms, by thread and generation (CPU time of
  the thread that ran them: a collection holds the interpreter from start to end).

``scrape_latency.py --serve`` runs the whole ``serve`` under this probe while it scrapes it.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import os
import sys
import threading
import time
from asyncio import events
from collections.abc import Callable
from typing import Any

PROBE_SECONDS = 0.001
SLOW_CALLBACK_SECONDS = 0.002
SLOW_GC_SECONDS = 0.001


def _schedstat() -> Callable[[], tuple[float, float]]:
    """(seconds on a CPU, seconds runnable in the run queue) of the calling thread, so far."""
    try:
        fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
    except OSError:
        return lambda: (time.thread_time(), 0.0)

    def read() -> tuple[float, float]:
        ran, waited, _ = os.pread(fd, 128, 0).split()
        return int(ran) / 1e9, int(waited) / 1e9

    return read


class Probe:
    def __init__(self) -> None:
        self.lags: list[float] = []  # seconds later than asked, every probe wake-up
        self.unexplained: list[float] = []  # of each: neither on a CPU nor in the run queue
        # (seconds since start, late, on a CPU, in the run queue) of every wake-up over 5 ms late
        self.stall_at: list[tuple[float, float, float, float]] = []
        self.callbacks: dict[str, list[tuple[float, float]]] = {}  # name: (wall, CPU) seconds
        self.gcs: list[tuple[str, int, float]] = []  # (thread, generation, CPU seconds)
        self._gc_started: dict[int, float] = {}
        self.started = time.monotonic()

    async def run(self) -> None:
        counters = _schedstat()
        while True:
            asked = time.monotonic()
            ran0, queued0 = counters()
            await asyncio.sleep(PROBE_SECONDS)
            late = time.monotonic() - asked - PROBE_SECONDS
            ran1, queued1 = counters()
            ran, queued = ran1 - ran0, queued1 - queued0
            self.lags.append(late)
            # what the asked millisecond of sleep and the loop's own CPU time do not explain
            self.unexplained.append(max(0.0, late - ran - queued))
            if late > 0.005:
                self.stall_at.append((asked - self.started, late, ran, queued))

    def gc_callback(self, phase: str, info: dict[str, Any]) -> None:
        ident = threading.get_ident()
        if phase == "start":
            self._gc_started[ident] = time.thread_time()
            return
        began = self._gc_started.pop(ident, None)
        if began is None:
            return
        spent = time.thread_time() - began
        if spent >= SLOW_GC_SECONDS:
            self.gcs.append((threading.current_thread().name, info["generation"], spent))

    def summary(self) -> dict[str, Any]:
        lags = sorted(self.lags)

        def pct(p: float) -> float:
            return lags[min(len(lags) - 1, int(p * len(lags)))] * 1e3 if lags else 0.0

        slow = {
            name: {
                "count": len(times),
                "max_ms": round(max(w for w, _ in times) * 1e3, 2),
                "max_cpu_ms": round(max(c for _, c in times) * 1e3, 2),
            }
            for name, times in sorted(self.callbacks.items(), key=lambda kv: -max(kv[1])[0])
        }
        return {
            "probes": len(lags),
            "stall_p50_ms": pct(0.5),
            "stall_p99_ms": pct(0.99),
            "stall_p999_ms": pct(0.999),
            "stall_max_ms": lags[-1] * 1e3 if lags else 0.0,
            "stalls_over_20ms": sum(1 for lag in lags if lag > 0.02),
            "no_cpu_max_ms": max(self.unexplained, default=0.0) * 1e3,
            "no_cpu_over_5ms": sum(1 for u in self.unexplained if u > 0.005),
            "stalls_over_5ms_at": [
                (round(t, 3), round(s * 1e3, 2), round(r * 1e3, 2), round(q * 1e3, 2))
                for t, s, r, q in self.stall_at
            ],
            "slow_callbacks": slow,
            "gc_over_1ms": [(t, g, round(s * 1e3, 2)) for t, g, s in self.gcs],
        }


def _callback_name(callback: Any) -> str:
    """A task's step is named by its coroutine; other callbacks by their own name."""
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        return f"task {getattr(coro, '__qualname__', task.get_name())}"
    return str(getattr(callback, "__qualname__", type(callback).__name__))


def main(argv: list[str]) -> int:
    out_path, serve_args = argv[1], argv[2:]
    probe = Probe()
    real_run = events.Handle._run

    def timed_run(self: Any) -> Any:
        began, cpu = time.perf_counter(), time.thread_time()
        try:
            return real_run(self)
        finally:
            spent = time.perf_counter() - began
            if spent >= SLOW_CALLBACK_SECONDS:
                probe.callbacks.setdefault(_callback_name(self._callback), []).append(
                    (spent, time.thread_time() - cpu)
                )

    events.Handle._run = timed_run  # type: ignore[method-assign]
    gc.callbacks.append(probe.gc_callback)

    import vgpumon.export.server as server

    real_serve = server.serve

    async def serve(*args: Any, **kwargs: Any) -> int:
        task = asyncio.get_running_loop().create_task(probe.run())
        try:
            return await real_serve(*args, **kwargs)
        finally:
            task.cancel()

    server.serve = serve  # type: ignore[assignment]

    def write() -> None:
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(probe.summary(), f, indent=1)

    atexit.register(write)
    from vgpumon.cli import main as cli

    return cli(serve_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
