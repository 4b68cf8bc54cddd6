"""GPU dispatch: serial reads one GPU at a time, parallel overlaps them, auto picks from walls.

Issue #11 item 6. A reader that records how many GPU jobs run at once (and can be made slow, or
made to hang on one GPU) runs after the real ``device`` reader on a simulated 8-GPU host. Hangs
in serial mode must cost only the hung GPU: the GPUs after it are read within the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from vgpumon.collect import dispatch as dispatch_module
from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, SamplerConfig
from vgpumon.collect.device import READERS as DEVICE_READERS
from vgpumon.testing import SimHostFactory

SCENARIO = "baremetal-8xh100"


class Recorder:
    """A collector that notes how many GPU jobs overlap; ``delay`` seconds per GPU per cycle."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.reads: list[int] = []  # GPU indices, in the order read
        self.hang_on: set[int] = set()
        self.release = threading.Event()

    def read(self, ctx: GpuContext, out: GpuBuilder) -> None:
        with self.lock:
            self.reads.append(ctx.index)
        if ctx.index in self.hang_on:  # not counted: it overlaps whatever runs after it
            self.release.wait(10)
            return
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        try:
            if self.delay:
                time.sleep(self.delay)
        finally:
            with self.lock:
                self.now -= 1

    def reader(self, name: str = "recorder") -> FunctionReader:
        return FunctionReader(name, self.read)

    def reset(self) -> None:
        with self.lock:
            self.most, self.reads = 0, []


@pytest.fixture(autouse=True)
def patient_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 200 ms floor for serial jobs (50 ms in use): a loaded test machine can stall a job past
    50 ms, which would rightly send the GPUs after it off in parallel."""
    monkeypatch.setattr(dispatch_module, "SERIAL_BUDGET_FLOOR_SECONDS", 0.2)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    yield rec
    rec.release.set()


def host(sim_host: SimHostFactory, rec: Recorder, *, first: bool = False, **config: Any) -> Any:
    """The device reader and the recorder (first: the recorder alone, so a hang there is the
    GPU's first collector, which makes the GPU hung rather than the collector failed)."""
    readers = [rec.reader()] if first else [*DEVICE_READERS, rec.reader()]
    return sim_host(SCENARIO, readers, SamplerConfig(**config))


async def test_serial_reads_one_gpu_at_a_time(
    sim_host: SimHostFactory, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The order alone, with no budget to overrun: a CI run on two busy cores stalled one 2 ms
    # job past the 200 ms floor, and the GPUs after it rightly went off in parallel (6 at once).
    # The budget's own tests are below.
    monkeypatch.setattr(dispatch_module, "SERIAL_BUDGET_FLOOR_SECONDS", 60.0)
    recorder.delay = 0.002
    h = host(sim_host, recorder, dispatch="serial")
    for _ in range(3):
        snap = await h.cycle()
        h.clock.advance(1.0)
        assert snap.health.dispatch == "serial"
        assert all(g.up for g in snap.gpus) and len(snap.gpus) == 8
    assert recorder.most == 1
    assert recorder.reads == list(range(8)) * 3  # in index order, every GPU every cycle


async def test_parallel_overlaps(sim_host: SimHostFactory, recorder: Recorder) -> None:
    recorder.delay = 0.05  # long enough that 8 workers started together overlap
    h = host(sim_host, recorder, dispatch="parallel")
    started = time.monotonic()
    snap = await h.cycle()
    assert snap.health.dispatch == "parallel"
    assert recorder.most > 1
    assert time.monotonic() - started < 8 * 0.05  # faster than one after another


async def test_auto_follows_the_measured_walls(
    sim_host: SimHostFactory, recorder: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch_module, "AUTO_PROBE_CYCLES", 3)
    h = host(sim_host, recorder, interval_seconds=1.0)  # auto: serial below 100 ms of reads
    modes = []

    async def cycle() -> None:
        recorder.reset()
        snap = await h.cycle()
        h.clock.advance(1.0)
        assert all(g.up for g in snap.gpus)
        modes.append(snap.health.dispatch)

    await cycle()  # nothing measured yet: parallel
    await cycle()  # measured in parallel only: a serial cycle measures the real cost
    await cycle()  # short: stays serial
    assert modes == ["parallel", "serial", "serial"]
    assert recorder.most == 1

    recorder.delay = 0.03  # 8 x 30 ms = 240 ms, over 10% of the interval
    await cycle()  # serial, but over the threshold after 3 or 4 GPUs: the rest go parallel
    assert recorder.reads[:2] == [0, 1] and recorder.most > 1
    await cycle()  # one long cycle (all cadences due at once) is not enough to switch...
    assert modes[4] == "serial"
    while modes[-1] == "serial":  # ...a median of the last serial cycles over the threshold is
        await cycle()
        assert len(modes) < 10
    await cycle()
    assert modes[-2:] == ["parallel", "parallel"]

    recorder.delay = 0.0  # fast again: AUTO_PROBE_CYCLES after the last, a serial cycle measures
    await cycle()  # the third cycle since the last serial one (AUTO_PROBE_CYCLES here)
    assert modes[-3:] == ["parallel", "parallel", "serial"]
    await cycle()
    assert modes[-1] == "serial" and recorder.most == 1


async def test_auto_with_one_gpu_is_serial(sim_host: SimHostFactory, recorder: Recorder) -> None:
    h = sim_host("passthrough-guest", [recorder.reader()], SamplerConfig())
    snap = await h.cycle()
    assert len(snap.gpus) == 1
    assert snap.health.dispatch == "serial"  # nothing measured, but one job is serial anyway


async def test_a_gpu_hung_in_serial_does_not_hold_the_others(
    sim_host: SimHostFactory, recorder: Recorder
) -> None:
    recorder.hang_on = {2}
    h = host(sim_host, recorder, first=True, dispatch="serial", deadline_seconds=0.5)
    started = time.monotonic()
    snap = await h.cycle()
    took = time.monotonic() - started
    uuids = [g.uuid for g in snap.gpus]
    assert snap.health.hung_gpus == (uuids[2],)
    assert not snap.health.wedged
    assert [g.up for g in snap.gpus] == [i != 2 for i in range(8)]
    assert snap.gpus[2].down_reason == "hung"
    # GPUs 3-7 were read once GPU 2 overran its budget (200 ms here), not after the deadline...
    assert set(recorder.reads) == set(range(8))
    # ...and the cycle waited for the hung one until the deadline only.
    assert took < 0.5 + 0.3

    h.clock.advance(1.0)
    recorder.reset()
    started = time.monotonic()
    snap = await h.cycle()  # still stuck: reported at once, never given more work
    assert time.monotonic() - started < 0.3
    assert snap.health.hung_gpus == (uuids[2],)
    assert sorted(recorder.reads) == [0, 1, 3, 4, 5, 6, 7] and recorder.most == 1

    recorder.release.set()
    time.sleep(0.1)
    h.clock.advance(1.0)
    snap = await h.cycle()
    assert snap.health.hung_gpus == () and all(g.up for g in snap.gpus)


async def test_a_collector_hung_in_serial_is_abandoned(
    sim_host: SimHostFactory, recorder: Recorder
) -> None:
    recorder.hang_on = {1}
    h = host(sim_host, recorder, dispatch="serial", deadline_seconds=0.5)
    after = Recorder()
    h.sampler.readers.append(after.reader("after"))
    snap = await h.cycle()
    # The device collector answered before the hang: GPU 1 is up without the recorder.
    assert snap.health.hung_gpus == () and all(g.up for g in snap.gpus)
    assert {c.name for c in snap.collectors if not c.success} == {"recorder"}
    assert sorted(set(after.reads)) == [0, 2, 3, 4, 5, 6, 7]

    h.clock.advance(1.0)
    after.reset()
    recorder.reset()
    snap = await h.cycle()  # GPU 1 read by a fresh worker without the stuck collector
    assert all(g.up for g in snap.gpus)
    assert sorted(after.reads) == list(range(8)) and after.most == 1
    assert 1 not in recorder.reads

    recorder.release.set()
    time.sleep(0.1)
    for _ in range(2):
        h.clock.advance(1.0)
        snap = await h.cycle()
    assert all(c.success for c in snap.collectors)


async def test_serial_on_a_host_too_slow_for_it_goes_parallel_at_half_the_deadline(
    sim_host: SimHostFactory, recorder: Recorder
) -> None:
    recorder.delay = 0.1  # 8 x 100 ms one after another would miss a 0.5 s deadline
    h = host(sim_host, recorder, dispatch="serial", deadline_seconds=0.5)
    await h.cycle()  # nothing measured: the first GPU overruns the 50 ms floor
    h.clock.advance(1.0)
    recorder.reset()
    snap = await h.cycle()  # 100 ms each: 400 ms budgets, so only half the deadline stops it
    assert snap.health.hung_gpus == () and all(g.up for g in snap.gpus)
    assert all(c.success for c in snap.collectors)  # no GPU's reads cut off at the deadline
    assert recorder.reads[:2] == [0, 1]  # serial up to 0.25 s...
    assert recorder.most > 1  # ...then the GPUs left were read together
