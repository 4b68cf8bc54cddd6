"""History: bounded series per (host, entity, metric), gaps kept, backfill merged in order. (The
scheduler shares are the collector's verdict, read from the snapshot: history derives none.)"""

from __future__ import annotations

from dataclasses import replace

from vgpumon.feed import HostState, HostUpdate
from vgpumon.model import Gpu, Snapshot, Utilization, VgpuScheduler, VgpuSchedulerUsage
from vgpumon.sources.history import History, gpu_entity


def snap(t: float, util: float | None, run: float = 0.0, up: bool = True) -> Snapshot:
    sched = VgpuScheduler(policy="equal_share", usage=(VgpuSchedulerUsage(7, run),))
    gpu = Gpu(index=0, uuid="GPU-a", up=up, utilization=Utilization(gpu=util),
              vgpu_schedulers=(sched,))  # fmt: skip
    return Snapshot(timestamp=t, gpus=(gpu,))


def update(s: Snapshot, seq: int) -> HostUpdate:
    return HostUpdate("h", HostState.UP, snapshot=s, sequence=seq)


def test_bounded_and_recorded_once() -> None:
    h = History(maxlen=5)
    for i in range(12):
        assert h.record(update(snap(float(i), i / 20), i))
    assert not h.record(update(snap(11.0, 0.9), 99))  # same snapshot time: not twice
    series = h.series("h", gpu_entity("GPU-a"), "util")
    assert [t for t, _ in series] == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert h.latest("h", "GPU-a", "util") == 11 / 20


def test_absent_and_lost_are_gaps_not_zero() -> None:
    h = History()
    h.record(update(snap(1.0, None), 1))
    h.record(update(snap(2.0, 0.5, up=False), 2))
    assert h.series("h", "GPU-a", "util") == [(1.0, None), (2.0, None)]


def test_backfill_merges_older_points_in_order() -> None:
    h = History(maxlen=4)
    h.record(update(snap(10.0, 0.1), 1))
    h.record(update(snap(11.0, 0.2), 2))
    for t in (7.0, 8.0, 9.0, 10.0):
        h.add("h", "GPU-a", "util", t, 0.9)
    assert h.series("h", "GPU-a", "util") == [(8.0, 0.9), (9.0, 0.9), (10.0, 0.1), (11.0, 0.2)]


def test_forget_drops_a_host() -> None:
    h = History()
    h.record(update(snap(1.0, 0.5), 1))
    h.forget("h")
    assert h.series("h", "GPU-a", "util") == []
    assert h.record(update(replace(snap(1.0, 0.5)), 2))  # may be recorded again
