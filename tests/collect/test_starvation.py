"""The one starvation rule (vgpumon.collect.starvation, docs/verdicts.md), from the counters."""

from __future__ import annotations

import pytest

from vgpumon.collect.starvation import (
    MIN_WINDOW_SECONDS,
    StarvationTracker,
)
from vgpumon.model import VgpuInstance, VgpuScheduler, VgpuSchedulerUsage, VgpuShare, VgpuType

TYPES = (VgpuType(type_id=1, max_instances=4),)


def _scheduler(
    policy: str | None, usage: dict[int, tuple[float, float]], missed: int = 0
) -> VgpuScheduler:
    return VgpuScheduler(
        policy=policy,
        usage=tuple(VgpuSchedulerUsage(i, r, p) for i, (r, p) in usage.items()),
        log_entries_missed_total=missed,
    )


def _vgpus(ids: object) -> tuple[VgpuInstance, ...]:
    return tuple(VgpuInstance(vgpu_id=i, type_id=1) for i in ids)  # type: ignore[attr-defined]


def _shares(
    tracker: StarvationTracker,
    t: float,
    policy: str | None,
    usage: dict[int, tuple[float, float]],
    missed: int = 0,
) -> dict[int, VgpuShare]:
    (sch,) = tracker.update(t, [_scheduler(policy, usage, missed)], _vgpus(usage), TYPES)
    return {s.vgpu_id: s for s in sch.shares}


def test_a_vgpu_that_waited_and_ran_under_its_due_is_starved() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "equal_share", {1: (0, 0), 2: (0, 0), 3: (0, 0)})
    # In 60 s: vGPU 1 ran 40 s, vGPU 2 ran 15 s (it had less work: it hardly waited), vGPU 3
    # ran 5 s and waited 30 s. Equal share: 20 s each.
    got = _shares(tracker, 60.0, "equal_share", {1: (40, 2), 2: (15, 0.3), 3: (5, 30)})
    assert {i: s.state for i, s in got.items()} == {1: "ok", 2: "ok", 3: "starved"}
    three = got[3]
    assert three.due == pytest.approx(1 / 3)
    assert (three.received, three.waited) == (pytest.approx(5 / 60), pytest.approx(30 / 60))
    assert three.window_seconds == 60.0


def test_a_vgpu_that_asked_for_little_is_never_starved() -> None:
    """The 16 x 48 bench host: 48 vGPUs at equal share (due 2.1 %), one asking for 1 % and
    getting it, or waiting a little for its turn; the view's old rule called it starved."""
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "equal_share", dict.fromkeys(range(1, 49), (0.0, 0.0)))
    usage = dict.fromkeys(range(1, 49), (1.5, 0.0))
    usage[1] = (0.6, 0.0)  # asked for 1 % of the minute and got it
    usage[2] = (0.6, 0.5)  # and one that waited a little for its slice: asked 1.8 %
    got = _shares(tracker, 60.0, "equal_share", usage)
    assert {s.state for s in got.values()} == {"ok"}


def test_fixed_share_due_is_the_type_share() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "fixed_share", {1: (0, 0), 2: (0, 0)})
    # Fixed share: 1/4 of the engine each (max_instances 4), whatever the others do: 15 s.
    got = _shares(tracker, 60.0, "fixed_share", {1: (14.0, 20), 2: (30, 0)})
    assert got[1].due == pytest.approx(0.25) and got[1].state == "ok"  # 14 of 15 s: within 10 %
    got = _shares(tracker, 120.0, "fixed_share", {1: (20, 40), 2: (70, 0)})
    assert got[1].state == "starved"  # 6 s of 15 s in the newest minute


def test_best_effort_due_is_a_fair_part_of_those_that_wanted_the_engine() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "best_effort", {1: (0, 0), 2: (0, 0), 3: (0, 0)})
    got = _shares(tracker, 60.0, "best_effort", {1: (50, 5), 2: (6, 20), 3: (0, 0)})
    assert got[1].due == got[2].due == pytest.approx(0.5) and got[3].due == 0.0
    assert (got[1].state, got[2].state, got[3].state) == ("ok", "starved", "ok")


def test_no_verdict_before_the_minimum_window_and_for_a_new_vgpu() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "equal_share", {1: (0, 0), 2: (0, 0)})
    early = _shares(tracker, MIN_WINDOW_SECONDS - 5, "equal_share", {1: (1, 20), 2: (20, 0)})
    assert {s.state for s in early.values()} == {"short_window"}
    got = _shares(tracker, 60.0, "equal_share", {1: (2, 50), 2: (50, 0), 3: (0, 0)})
    assert got[1].state == "starved"  # a minute of counters
    assert got[3].state == "short_window" and got[3].window_seconds == 0.0  # new in this read


def test_a_window_with_missed_log_entries_gives_no_verdict_and_says_so() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "equal_share", {1: (0, 0), 2: (0, 0)}, missed=3)
    clean = _shares(tracker, 60.0, "equal_share", {1: (5, 50), 2: (50, 0)}, missed=3)
    assert clean[1].state == "starved"  # misses before the window do not count
    got = _shares(tracker, 65.0, "equal_share", {1: (5.1, 55), 2: (55, 0)}, missed=4)
    assert {s.state for s in got.values()} == {"missed_entries"}
    assert got[1].received is not None  # the shares are still published


def test_unknown_policy_gives_no_verdict() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, None, {1: (0, 0)})
    got = _shares(tracker, 60.0, None, {1: (1, 59)})
    assert got[1].state == "unknown_policy" and got[1].due is None


def test_the_window_slides_and_verdicts_stand_between_updates() -> None:
    tracker = StarvationTracker(window_seconds=60.0, update_seconds=5.0)
    for t in range(0, 181):
        # vGPU 2 starved in the first minute only, then both share evenly.
        run2 = min(t, 60) * 0.1 + max(0, t - 60) * 0.5
        wait2 = min(t, 60) * 0.9
        got = _shares(tracker, float(t), "equal_share", {1: (t * 0.5, 0), 2: (run2, wait2)})
        if t == 62:
            assert got[2].state == "starved"  # decided at 60 s, stands until 65 s
    assert got[2].state == "ok"


def test_a_counter_that_went_back_starts_the_vgpus_window_again() -> None:
    tracker = StarvationTracker()
    _shares(tracker, 0.0, "equal_share", {1: (0, 0), 2: (0, 0)})
    _shares(tracker, 60.0, "equal_share", {1: (30, 0), 2: (30, 0)})
    got = _shares(tracker, 65.0, "equal_share", {1: (32, 0), 2: (1, 0)})  # vGPU 2 id reused
    assert got[2].state == "short_window" and got[1].state == "ok"
