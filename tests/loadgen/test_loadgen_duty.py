"""Duty-cycle timing: the arithmetic, the clock estimate, and the loop against a simulated GPU.

The simulated GPU runs each launch for ``cycles / true_clock`` seconds of real time, one after the
other like a CUDA stream, and reports (cycles, ns) the way the kernels do. Its true clock can differ
from the loop's calibration and change mid-run, which is what the adaptation has to survive.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from vgpumon.loadgen.driver import DutyCycleDriver
from vgpumon.loadgen.duty import (
    MIN_IDLE_S,
    ClockEstimator,
    DutyController,
    clock_from_timer,
    cycles_for,
    split_busy,
)
from vgpumon.loadgen.spec import LoadSpec

# --------------------------------------------------------------------------------- arithmetic


def test_split_busy_caps_each_launch_and_keeps_the_total() -> None:
    assert split_busy(0.05) == [0.05]
    chunks = split_busy(0.25, 0.1)
    assert len(chunks) == 3
    assert sum(chunks) == pytest.approx(0.25)
    assert max(chunks) <= 0.1
    assert split_busy(0.1, 0.1) == [0.1]
    assert split_busy(0.0) == []
    assert split_busy(5e-6) == []


def test_cycles_for_uses_the_clock() -> None:
    assert cycles_for(0.05, 2e9) == 100_000_000
    assert cycles_for(1e-12, 1e9) == 1
    with pytest.raises(ValueError):
        cycles_for(0.05, 0.0)


def test_clock_from_timer_accepts_short_spans_and_rejects_impossible_ones() -> None:
    assert clock_from_timer(99_000_000, 50_000_000, 0.0501) == pytest.approx(1.98e9)
    # Another context held the GPU: the host waited 4x longer than the kernel ran. Still valid.
    assert clock_from_timer(99_000_000, 50_000_000, 0.2) == pytest.approx(1.98e9)
    assert clock_from_timer(99_000_000, 0, 0.05) is None  # timer did not tick
    assert clock_from_timer(99_000_000, 500_000_000, 0.05) is None  # longer than the wall
    assert clock_from_timer(10**12, 50_000_000, 0.05) is None  # 20 THz is no clock
    assert clock_from_timer(0, 50_000_000, 0.05) is None


def test_busy_time_per_period_is_duty_times_period() -> None:
    for duty in (0.25, 0.5, 0.75):
        controller = DutyController(duty, 0.1)
        assert controller.next_busy_s() == pytest.approx(duty * 0.1)
        assert not controller.continuous
    assert DutyController(1.0, 0.1).continuous
    assert DutyController(1.0, 0.1).next_busy_s() == pytest.approx(0.1)
    assert DutyController(0.0, 0.1).next_busy_s() == 0.0


def test_controller_carries_shortfall_into_next_period() -> None:
    controller = DutyController(0.5, 0.1)
    controller.record(0.04)  # 10 ms short
    assert controller.next_busy_s() == pytest.approx(0.06)
    controller.record(0.06)
    assert controller.next_busy_s() == pytest.approx(0.05)
    controller.record(0.07)  # 20 ms over
    assert controller.next_busy_s() == pytest.approx(0.03)


def test_controller_never_asks_more_than_a_period_and_bounds_debt() -> None:
    controller = DutyController(0.9, 0.1)
    for _ in range(50):
        controller.record(0.0)  # the GPU never ran
    assert controller.debt_s == pytest.approx(0.1)
    assert controller.next_busy_s() == pytest.approx(0.1 - MIN_IDLE_S)
    controller.retarget(0.2, 0.05)
    assert controller.debt_s == 0.0
    assert controller.next_busy_s() == pytest.approx(0.01)


def test_clock_estimator_follows_measurements_and_ignores_nonsense() -> None:
    est = ClockEstimator(1.0e9)
    assert est.update(150_000_000, 100_000_000) == pytest.approx(1.5e9)
    assert est.update(0, 100) == pytest.approx(1.5e9)
    assert est.update(100, 0) == pytest.approx(1.5e9)
    assert est.update(10**15, 1) == pytest.approx(1.5e9)  # 10^24 Hz: not a clock
    est.update(80_000_000, 100_000_000)
    est.update(80_000_000, 100_000_000)
    est.update(80_000_000, 100_000_000)
    assert est.hz == pytest.approx(0.8e9)
    with pytest.raises(ValueError):
        ClockEstimator(0.0)


# ------------------------------------------------------------------------ the loop, simulated


class SimulatedGpu:
    """A stream of launches in real time at a clock that the test controls."""

    def __init__(self, true_hz: Callable[[float], float], kernels: tuple[str, ...] = ("spin",)):
        self.true_hz = true_hz
        self.kernels = kernels
        self.timer_ok = True
        self.busy_until = 0.0
        self.launches: list[tuple[str, int, int, int]] = []
        self.intervals: list[tuple[float, float]] = []
        self._slots: dict[int, tuple[float, float, int]] = {}
        self._next = 0

    def supports(self, kind: str) -> bool:
        return kind in self.kernels

    def launch(self, kind: str, blocks: int, threads: int, cycles: int) -> int:
        start = max(time.monotonic(), self.busy_until)
        end = start + cycles / self.true_hz(start)
        self.busy_until = end
        slot = self._next
        self._next += 1
        self._slots[slot] = (start, end, cycles)
        self.launches.append((kind, blocks, threads, cycles))
        self.intervals.append((start, end))
        return slot

    def wait(self, slot: int) -> tuple[int, int]:
        start, end, cycles = self._slots.pop(slot)
        delay = end - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        return cycles, int((end - start) * 1e9)

    def synchronize(self) -> None:
        delay = self.busy_until - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def duty_between(self, t0: float, t1: float) -> float:
        busy = sum(max(0.0, min(e, t1) - max(s, t0)) for s, e in self.intervals)
        return busy / (t1 - t0)


def _run(
    gpu: SimulatedGpu,
    spec: LoadSpec,
    calibrated_hz: float,
    commands: queue.Queue[dict[str, Any]] | None = None,
    stop: threading.Event | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]], float, float]:
    events: list[dict[str, Any]] = []
    driver = DutyCycleDriver(
        gpu,
        spec,
        sm_count=132,
        clock_hz=calibrated_hz,
        emit=events.append,
        commands=commands,
        status_interval_s=0.2,
    )
    t0 = time.monotonic()
    summary = driver.run(stop or threading.Event())
    return summary, events, t0, time.monotonic()


def test_loop_keeps_duty_when_calibration_was_wrong() -> None:
    gpu = SimulatedGpu(lambda _t: 1.5e9)
    spec = LoadSpec(duty=0.5, period_s=0.02, duration_s=1.0)
    summary, events, t0, t1 = _run(gpu, spec, calibrated_hz=1.0e9)
    assert summary["reason"] == "duration"
    assert gpu.duty_between(t0 + 0.2, t1) == pytest.approx(0.5, abs=0.06)
    assert summary["duty"] == pytest.approx(0.5, abs=0.06)
    statuses = [e for e in events if e["event"] == "status"]
    assert statuses, "no status events"
    assert statuses[-1]["sm_clock_hz"] == pytest.approx(1.5e9, rel=0.01)
    assert {launch[1] for launch in gpu.launches} == {132}


def test_loop_keeps_duty_across_a_clock_drop() -> None:
    start = time.monotonic()
    gpu = SimulatedGpu(lambda t: 1.8e9 if t - start < 0.5 else 0.9e9)
    spec = LoadSpec(duty=0.25, period_s=0.02, duration_s=1.2, sm_fraction=0.5)
    _summary, events, _t0, t1 = _run(gpu, spec, calibrated_hz=1.8e9)
    # After the drop the estimate follows the new clock and the duty holds.
    assert gpu.duty_between(start + 0.7, t1) == pytest.approx(0.25, abs=0.06)
    assert events[-1]["sm_clock_hz"] == pytest.approx(0.9e9, rel=0.02)
    assert {launch[1] for launch in gpu.launches} == {66}


def test_full_duty_queues_back_to_back_with_no_gap() -> None:
    gpu = SimulatedGpu(lambda _t: 1.0e9)
    spec = LoadSpec(duty=1.0, period_s=0.05, duration_s=0.6)
    summary, _events, t0, t1 = _run(gpu, spec, calibrated_hz=1.0e9)
    assert gpu.duty_between(t0 + 0.05, t1 - 0.05) > 0.97
    assert summary["duty"] > 0.9


def test_zero_duty_launches_nothing() -> None:
    gpu = SimulatedGpu(lambda _t: 1.0e9)
    summary, _events, _t0, _t1 = _run(gpu, LoadSpec(duty=0.0, duration_s=0.3), 1.0e9)
    assert gpu.launches == []
    assert summary["busy_s"] == 0.0


def test_stop_request_ends_the_loop_within_a_period() -> None:
    gpu = SimulatedGpu(lambda _t: 1.0e9)
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    begin = time.monotonic()
    summary, _events, _t0, _t1 = _run(gpu, LoadSpec(duty=0.5, period_s=0.05), 1.0e9, stop=stop)
    assert summary["reason"] == "stopped"
    assert time.monotonic() - begin < 0.5
    assert time.monotonic() >= gpu.busy_until  # nothing left running


def test_set_commands_apply_at_period_boundary_and_bad_ones_are_rejected() -> None:
    gpu = SimulatedGpu(lambda _t: 1.0e9, kernels=("spin", "stream"))
    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    commands.put({"seq": 1, "changes": {"duty": 0.75, "sm_fraction": 0.25}})
    commands.put({"seq": 2, "changes": {"kernel": "tensor"}})
    commands.put({"seq": 3, "changes": {"memory_bytes": 1}})
    commands.put({"seq": 4, "changes": {"duty": 7}})
    spec = LoadSpec(duty=0.5, period_s=0.02, duration_s=0.3)
    _summary, events, _t0, _t1 = _run(gpu, spec, 1.0e9, commands=commands)
    answers = {e["seq"]: e for e in events if e["event"] in ("applied", "rejected")}
    assert answers[1]["event"] == "applied"
    assert (answers[1]["duty"], answers[1]["blocks"]) == (0.75, 33)
    assert answers[2]["event"] == "rejected" and "tensor" in answers[2]["message"]
    assert answers[3]["event"] == "rejected" and "memory_bytes" in answers[3]["message"]
    assert answers[4]["event"] == "rejected"
    assert all(launch[1] == 33 for launch in gpu.launches)
