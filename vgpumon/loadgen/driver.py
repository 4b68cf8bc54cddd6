"""The duty-cycle loop of one worker: launch the busy part of each period, idle the rest.

Two schedules. Duty below 1 is *periodic*: at the start of each period the busy time is queued
(split into launches of at most ``MAX_KERNEL_S``), the host sleeps until the period ends, then reads
what the kernels measured and corrects the next period. Duty 1 is *continuous*: the next period's
launches are queued while the current ones run, so the GPU never sees a gap. The loop talks to the
GPU only through :class:`LoadBackend`, so its timing can be tested against a simulated GPU.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from vgpumon.errors import VgpumonError
from vgpumon.loadgen.duty import (
    MAX_KERNEL_S,
    ClockEstimator,
    DutyController,
    cycles_for,
    split_busy,
)
from vgpumon.loadgen.spec import LoadSpec, blocks_for

MAX_LAUNCHES_PER_PERIOD = 16
"""Long periods use longer launches instead of more of them (keeps the timing ring small)."""

CHANGEABLE = ("duty", "sm_fraction", "kernel", "warps_per_block", "period_s")
"""Spec fields a running worker accepts in a ``set`` command (memory and device need a new
worker)."""


class LoadBackend(Protocol):
    """What the loop needs from a GPU (:class:`vgpumon.loadgen.backend.CudaBackend`)."""

    timer_ok: bool

    def supports(self, kind: str) -> bool: ...

    def launch(self, kind: str, blocks: int, threads: int, cycles: int) -> int: ...

    def wait(self, slot: int) -> tuple[int, int]: ...

    def synchronize(self) -> None: ...


@dataclass
class _Window:
    """Busy time and launches since the last status line."""

    start: float
    busy_s: float = 0.0
    launches: int = 0


class DutyCycleDriver:
    """Runs ``spec`` (the worker's own share: ``processes`` is ignored) on ``backend``.

    ``emit`` receives status/applied/rejected events as dicts. ``commands`` carries ``set`` requests
    (``{"seq": n, "changes": {...}}``) from the controlling process; they take effect at the next
    period boundary.
    """

    def __init__(
        self,
        backend: LoadBackend,
        spec: LoadSpec,
        *,
        sm_count: int,
        clock_hz: float,
        emit: Callable[[dict[str, Any]], None],
        commands: queue.Queue[dict[str, Any]] | None = None,
        status_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.spec = spec
        self.sm_count = sm_count
        self.estimator = ClockEstimator(clock_hz)
        self.controller = DutyController(spec.duty, spec.period_s)
        self._emit = emit
        self._commands = commands
        self._status_interval = status_interval_s
        self._clock = clock
        self.blocks = blocks_for(spec.sm_fraction, sm_count)
        self.total_busy_s = 0.0
        self.total_launches = 0

    # ------------------------------------------------------------------------------- loop

    def run(self, stop: threading.Event) -> dict[str, Any]:
        """Drive the load until ``stop`` is set or the duration ends; return a summary."""
        start = self._clock()
        end = start + self.spec.duration_s if self.spec.duration_s is not None else None
        window = _Window(start)
        pending: list[tuple[int, int]] = []
        period_start = start
        reason = "stopped"
        try:
            while True:
                if stop.is_set():
                    break
                if end is not None and self._clock() >= end:
                    reason = "duration"
                    break
                if self._apply_commands():
                    self._retire(pending, window)
                    pending = []
                    period_start = self._clock()
                batch = self._launch(self.controller.next_busy_s())
                if self.controller.continuous:
                    self._retire(pending, window)
                    pending = batch
                    now = self._clock()
                    period_start = now
                else:
                    period_end = period_start + self.controller.period_s
                    stop.wait(max(0.0, period_end - self._clock()))
                    self.controller.record(self._retire(batch, window))
                    now = self._clock()
                    # A period that overran by a whole period (a stall) restarts the schedule.
                    behind = now - period_end >= self.controller.period_s
                    period_start = now if behind else period_end
                if self._status_interval > 0 and now - window.start >= self._status_interval:
                    self._emit(self._status(window, now))
                    window = _Window(now)
        finally:
            self._retire(pending, window)
            self.backend.synchronize()
        elapsed = self._clock() - start
        return {
            "reason": reason,
            "elapsed_s": round(elapsed, 3),
            "busy_s": round(self.total_busy_s, 3),
            "duty": round(self.total_busy_s / elapsed, 4) if elapsed > 0 else None,
            "launches": self.total_launches,
        }

    def _launch(self, busy_s: float) -> list[tuple[int, int]]:
        max_kernel = max(MAX_KERNEL_S, self.controller.period_s / MAX_LAUNCHES_PER_PERIOD)
        launched = []
        for chunk in split_busy(busy_s, max_kernel):
            cycles = cycles_for(chunk, self.estimator.hz)
            slot = self.backend.launch(
                self.spec.kernel, self.blocks, self.spec.threads_per_block, cycles
            )
            launched.append((slot, cycles))
        return launched

    def _retire(self, launched: list[tuple[int, int]], window: _Window) -> float:
        """Wait for launches, fold their measurements into the clock estimate; return busy time."""
        busy = 0.0
        for slot, cycles in launched:
            measured_cycles, ns = self.backend.wait(slot)
            if self.backend.timer_ok and ns > 0:
                self.estimator.update(measured_cycles, ns)
                seconds = ns * 1e-9
            else:
                seconds = cycles / self.estimator.hz
            busy += seconds
        window.busy_s += busy
        window.launches += len(launched)
        self.total_busy_s += busy
        self.total_launches += len(launched)
        return busy

    def _status(self, window: _Window, now: float) -> dict[str, Any]:
        span = max(now - window.start, 1e-9)
        return {
            "event": "status",
            "duty": round(min(1.0, window.busy_s / span), 4),
            "target_duty": self.spec.duty,
            "sm_fraction": self.spec.sm_fraction,
            "blocks": self.blocks,
            "kernel": self.spec.kernel,
            "sm_clock_hz": round(self.estimator.hz),
            "launches": window.launches,
            "window_s": round(span, 3),
        }

    # -------------------------------------------------------------------------- commands

    def _apply_commands(self) -> bool:
        """Apply queued ``set`` commands; True when the schedule must restart."""
        if self._commands is None:
            return False
        changed = False
        while True:
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return changed
            seq = command.get("seq")
            try:
                self._apply(command.get("changes", {}))
            except VgpumonError as err:
                self._emit({"event": "rejected", "seq": seq, "message": str(err)})
                continue
            changed = True
            self._emit({"event": "applied", "seq": seq, **self._settings()})

    def _apply(self, changes: Mapping[str, Any]) -> None:
        unknown = sorted(set(changes) - set(CHANGEABLE))
        if unknown:
            raise VgpumonError(
                f"cannot change {', '.join(unknown)} of a running load "
                f"(only {', '.join(CHANGEABLE)})"
            )
        spec = self.spec.with_changes(**changes)
        if not self.backend.supports(spec.kernel):
            raise VgpumonError(f"this device cannot run the {spec.kernel} kernel")
        self.spec = spec
        self.blocks = blocks_for(spec.sm_fraction, self.sm_count)
        self.controller.retarget(spec.duty, spec.period_s)

    def _settings(self) -> dict[str, Any]:
        return {
            "duty": self.spec.duty,
            "sm_fraction": self.spec.sm_fraction,
            "kernel": self.spec.kernel,
            "warps_per_block": self.spec.warps_per_block,
            "period_s": self.spec.period_s,
            "blocks": self.blocks,
            "threads_per_block": self.spec.threads_per_block,
        }
