"""Starved vGPUs and the neighbours that ran above their due, from the scheduler counters."""

from __future__ import annotations

import pytest

from vgpumon.collect.contention import ContentionTracker
from vgpumon.model import Gpu, VgpuInstance, VgpuScheduler, VgpuSchedulerUsage, VgpuType


def _gpu(policy: str, usage: dict[int, tuple[float, float]]) -> Gpu:
    return Gpu(
        index=0,
        uuid="GPU-0",
        vgpu_instances=tuple(VgpuInstance(vgpu_id=i, type_id=1) for i in usage),
        vgpu_types=(VgpuType(type_id=1, max_instances=4),),
        vgpu_schedulers=(
            VgpuScheduler(
                policy=policy,
                usage=tuple(VgpuSchedulerUsage(i, r, p) for i, (r, p) in usage.items()),
            ),
        ),
    )


def test_starved_vgpu_names_the_neighbours_above_their_due() -> None:
    tracker = ContentionTracker(window_seconds=60.0)
    assert tracker.update(0.0, _gpu("equal_share", {1: (0, 0), 2: (0, 0), 3: (0, 0)})) == ()
    # In 60 s: vGPU 1 ran 40 s, vGPU 2 ran 15 s, vGPU 3 ran 5 s but waited 30 s. Equal share
    # gives each 20 s: vGPU 3 is starved, vGPU 1 ran 20 s above its due; vGPU 2 ran under
    # its due but hardly waited (it had less work), so it is not starved.
    found = tracker.update(60.0, _gpu("equal_share", {1: (40, 2), 2: (15, 0.3), 3: (5, 30)}))
    assert [c.vgpu_id for c in found] == [3]
    c = found[0]
    assert c.window_seconds == 60.0 and c.due_seconds == pytest.approx(20.0)
    assert (c.run_seconds, c.preemption_seconds) == (5, 30)
    assert [(n.vgpu_id, n.run_seconds, n.due_seconds) for n in c.neighbours] == [(1, 40, 20.0)]


def test_fixed_share_due_is_the_type_share() -> None:
    tracker = ContentionTracker(window_seconds=60.0)
    tracker.update(0.0, _gpu("fixed_share", {1: (0, 0), 2: (0, 0)}))
    # Fixed share: 1/4 of the GPU each (max_instances 4), whatever the others do: 15 s.
    found = tracker.update(60.0, _gpu("fixed_share", {1: (14.9, 20), 2: (30, 0)}))
    assert found == ()  # 14.9 s of a 15 s due is not starved (within 10 %)
    found = tracker.update(120.0, _gpu("fixed_share", {1: (20, 40), 2: (70, 0)}))
    assert [c.vgpu_id for c in found] == [1]
    assert found[0].due_seconds == pytest.approx(15.0)
    assert [n.vgpu_id for n in found[0].neighbours] == [2]


def test_no_contention_without_waiting() -> None:
    tracker = ContentionTracker(window_seconds=60.0)
    tracker.update(0.0, _gpu("best_effort", {1: (0, 0), 2: (0, 0)}))
    assert tracker.update(60.0, _gpu("best_effort", {1: (50, 0), 2: (1, 0)})) == ()


def test_window_slides() -> None:
    tracker = ContentionTracker(window_seconds=10.0)
    for t in range(0, 31):
        # vGPU 2 starved only in the first 10 s, then both share evenly.
        run2 = min(t, 10) * 0.1 + max(0, t - 10) * 0.5
        wait2 = min(t, 10) * 0.9
        found = tracker.update(float(t), _gpu("best_effort", {1: (t * 0.5, 0), 2: (run2, wait2)}))
    assert found == ()
