"""The scheduler-log poller: as fast as the ring fills, only where vGPUs run, new entries only."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from vgpumon.collect.scheduler import LogConsumer, SchedulerLogPoller, _GpuWatch, _Watch
from vgpumon.collect.vgpu_raw import SchedulerParams, decode_entries
from vgpumon.nvml.session import NvmlSession

MS = 1_000_000


def _watch(timeslice_ns: int | None) -> _Watch:
    w = _Watch(target=None, gpu_instance=False, owners=lambda: [1, 2], bounds=None)
    w.params = SchedulerParams(
        policy=1, arr_mode=None, avg_factor=None, timeslice_ns=timeslice_ns, api="v1"
    )
    return w


def test_poll_rate_follows_the_time_slice() -> None:
    poller = SchedulerLogPoller(NvmlSession(object(), "none"), interval=None)
    gw = _GpuWatch(scopes={None: _watch(2 * MS)})
    assert poller.wait_seconds(gw, 0.1) == 0.1  # 200 x 2 ms = 0.4 s to fill: the 0.1 s floor
    gw.scopes[None] = _watch(8 * MS)
    assert poller.wait_seconds(gw, 0.1) == 200 * 8 * MS / 1e9 / 4  # 1.6 s to fill: every 0.4 s
    gw.scopes[None] = _watch(50 * MS)
    assert poller.wait_seconds(gw, 0.1) == 1.0  # at least once a second
    gw.scopes[None] = _watch(None)  # best effort reports no slice: the floor
    assert poller.wait_seconds(gw, 0.1) == 0.1


def test_a_gpu_without_running_vgpus_gets_no_poller_thread() -> None:
    poller = SchedulerLogPoller(NvmlSession(object(), "none"))
    try:
        poller.watch("GPU-idle", {None: _watch(2 * MS)}, busy=False)
        poller.watch("GPU-busy", {None: _watch(2 * MS)}, busy=True)
        threads = {uuid: gw.thread for uuid, gw in poller._gpus.items()}
        assert threads["GPU-idle"] is None
        assert threads["GPU-busy"] is not None
    finally:
        poller.close()


def _ring(stamps: list[int]) -> Any:
    entries = (pynvml.c_nvmlVgpuSchedulerLogEntry_t * 200)()
    for i, ts in enumerate(stamps):
        entries[i].timestamp = ts
        entries[i].swRunlistId = i % 2
        entries[i].timeRun = MS
    return entries


def test_only_new_entries_are_decoded_and_the_span_covers_the_read() -> None:
    array = _ring([5 * MS, 1 * MS, 3 * MS, 4 * MS, 2 * MS])
    assert isinstance(array, ctypes.Array)
    entries, span = decode_entries(array, 5, after_ns=4 * MS)
    assert sorted(e.timestamp_ns for e in entries) == [4 * MS, 5 * MS]
    assert span == (1 * MS, 5 * MS, 5)
    everything, _ = decode_entries(array, 5)
    assert len(everything) == 5


def test_a_wrap_is_estimated_from_the_span_of_undecoded_entries() -> None:
    c = LogConsumer(ring_size=4)
    first, _ = decode_entries(_ring([1 * MS, 2 * MS, 3 * MS, 4 * MS]), 4)
    c.consume(sorted(first, key=lambda e: e.timestamp_ns), [1, 2], True)
    # 3 entries (5-7 ms) were overwritten before this read, which holds 8-11 ms
    new, span = decode_entries(_ring([8 * MS, 9 * MS, 10 * MS, 11 * MS]), 4, after_ns=c.last_ts)
    c.consume(sorted(new, key=lambda e: e.timestamp_ns), [1, 2], True, span)
    assert c.entries_total == 8
    assert c.missed_total == 3
