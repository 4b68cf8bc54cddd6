"""The sampler in a process of its own (a large host's under ``serve``): its snapshots reach this
process's event loop, its requests reach it, it ends with this process, and one that dies is
replaced; a small host's sampler stays in the serving process, a large one's moves without a gap."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

import vgpumon.collect.sampler_process as sampler_process
from vgpumon.cli import build_parser
from vgpumon.collect.placement import PlacedSampler, large_host
from vgpumon.collect.sampler_process import SamplerProcess, SamplerStartFailed
from vgpumon.commands import serve as serve_command
from vgpumon.model import Snapshot
from vgpumon.sim.scenario import builtin_names


def recipe(*flags: str) -> Callable[[], object]:
    args = build_parser("serve").parse_args(["serve", *flags])
    settings = serve_command.settings_from_args(args, environ={})
    return serve_command.sampler_recipe(settings)


async def until(check: Callable[[], bool], seconds: float = 20.0) -> None:
    give_up = time.monotonic() + seconds
    while not check():
        if time.monotonic() > give_up:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


@asynccontextmanager
async def running(feed: SamplerProcess) -> AsyncIterator[asyncio.Event]:
    stop = asyncio.Event()
    task = asyncio.create_task(feed.run(stop))
    try:
        yield stop
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        feed.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie waits for its parent to reap it: it runs no more
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def test_snapshots_of_the_child_reach_the_listeners_on_this_loop() -> None:
    feed = SamplerProcess(
        recipe("--sim", "kvm-vgpu-timesliced", "--interval", "0.2"), deadline_seconds=2
    )
    feed.start()
    assert feed.name == "sim:kvm-vgpu-timesliced"
    assert feed.latest is None and feed.not_ready_reason == "first sampling cycle not done"
    heard: list[Snapshot] = []
    loop = asyncio.get_running_loop()
    feed.on_snapshot(
        lambda snap: heard.append(snap) if asyncio.get_running_loop() is loop else None
    )
    async with running(feed):
        await until(lambda: len(heard) >= 2)
    first, second = heard[:2]
    assert second.health.cycles_total > first.health.cycles_total
    assert feed.latest is heard[-1] and feed.not_ready_reason is None
    assert first.gpus and all(g.vgpu_instances for g in first.gpus if g.vgpu_instances)
    assert first.source == "sim:kvm-vgpu-timesliced"


def test_an_error_building_the_sampler_is_the_commands_one_line_error() -> None:
    feed = SamplerProcess(recipe("--nvml-module", "no_such_nvml_for_this_test"), deadline_seconds=1)
    with pytest.raises(SamplerStartFailed) as raised:
        feed.start()
    assert str(raised.value) == (
        "cannot import NVML module 'no_such_nvml_for_this_test': "
        "No module named 'no_such_nvml_for_this_test'"
    )
    assert raised.value.exit_code == 2


async def test_a_snapshot_is_unpickled_a_gpu_at_a_time_between_other_callbacks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event loop answers in between: with no time allowed per slice, every GPU of an
    eight-GPU snapshot is its own step of the loop."""
    monkeypatch.setattr(sampler_process, "SLICE_SECONDS", 0.0)
    feed = SamplerProcess(
        recipe("--sim", "hgx-8xh100-nvlink", "--interval", "0.5"), deadline_seconds=2
    )
    feed.start()
    ticks = 0
    ticks_at_snapshot: list[int] = []

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    feed.on_snapshot(lambda _snap: ticks_at_snapshot.append(ticks))
    counting = asyncio.create_task(ticker())
    try:
        async with running(feed):
            await until(lambda: len(ticks_at_snapshot) >= 2)
    finally:
        counting.cancel()
    assert len(feed.latest.gpus) == 8 if feed.latest else False
    # between the arrival of one snapshot's frame and its publication the ticker ran once per GPU
    # at least: measured as the ticks between two publications, which include the wait between
    assert ticks_at_snapshot[1] - ticks_at_snapshot[0] >= 8


async def test_reloaded_fields_and_refresh_reach_the_child() -> None:
    feed = SamplerProcess(
        recipe("--sim", "passthrough-guest", "--interval", "30"), deadline_seconds=2
    )
    feed.start()
    async with running(feed):
        await until(lambda: feed.latest is not None)
        first = feed.latest
        assert first is not None and all(not g.extra_fields for g in first.gpus)
        feed.set_extra_fields((83,))  # total energy, by field id
        feed.refresh()  # without it the next cycle is 30 s away
        await until(lambda: feed.latest is not first)
        latest = feed.latest
        assert latest is not None
        assert all(any(f.field_id == 83 for f in g.extra_fields) for g in latest.gpus)


async def test_a_child_that_dies_leaves_its_last_snapshot_wedged_and_is_started_again() -> None:
    feed = SamplerProcess(
        recipe("--sim", "passthrough-guest", "--interval", "0.2"),
        deadline_seconds=2,
        restart_initial=0.2,
    )
    feed.start()
    heard: list[Snapshot] = []
    feed.on_snapshot(heard.append)
    async with running(feed):
        await until(lambda: feed.latest is not None)
        first_child = feed.pid
        assert first_child is not None
        os.kill(first_child, signal.SIGKILL)  # as the OOM killer, or a crash inside NVML
        await until(lambda: any(s.health.wedged for s in heard))
        wedged = next(s for s in heard if s.health.wedged)
        assert not wedged.health.up and wedged.gpus, "the last GPUs stay served"
        assert wedged.health.down_reason == "the sampler process ended (exit status -9)"
        assert feed.not_ready_reason == wedged.health.down_reason
        await until(lambda: not heard[-1].health.wedged)  # a new child, a new snapshot
        assert feed.pid not in (None, first_child) and feed.restarts == 1
        assert feed.not_ready_reason is None
    assert not alive(first_child)


async def test_stopping_ends_the_child() -> None:
    feed = SamplerProcess(
        recipe("--sim", "passthrough-guest", "--interval", "0.2"), deadline_seconds=2
    )
    feed.start()
    pid = feed.pid
    assert pid is not None
    async with running(feed):
        await until(lambda: feed.latest is not None)
    assert not alive(pid)


def children_of_this_process() -> list[int]:
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


async def test_a_small_host_keeps_its_sampler_in_this_process() -> None:
    placed = PlacedSampler(
        recipe("--sim", "passthrough-guest", "--interval", "0.1"), deadline_seconds=2
    )
    placed.start()
    heard: list[Snapshot] = []
    placed.on_snapshot(heard.append)
    before = set(children_of_this_process())
    stop = asyncio.Event()
    task = asyncio.create_task(placed.run(stop))
    try:
        await until(lambda: len(heard) >= 5)
        assert not placed.in_own_process
        assert set(children_of_this_process()) == before, "no sampler process"
        assert placed.latest is heard[-1] and placed.not_ready_reason is None
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        placed.close()


async def test_a_vgpu_host_moves_its_sampler_to_a_process_of_its_own_without_a_gap() -> None:
    placed = PlacedSampler(
        recipe("--sim", "kvm-vgpu-timesliced", "--interval", "0.2"), deadline_seconds=2
    )
    placed.start()
    arrivals: list[tuple[float, Snapshot]] = []
    placed.on_snapshot(lambda snap: arrivals.append((time.monotonic(), snap)))
    stop = asyncio.Event()
    task = asyncio.create_task(placed.run(stop))
    try:
        await until(lambda: placed.in_own_process)
        moved_at = len(arrivals)
        await until(lambda: len(arrivals) >= moved_at + 3)
        assert placed._local is None, "the sampler here is closed"
        child = placed._process.pid if placed._process else None
        assert child is not None and child in children_of_this_process()
        # snapshots kept coming while the sampler process started: no gap longer than its start
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(arrivals)]
        assert max(gaps) < 5.0, gaps
        assert all(s.gpus and s.health.up for _, s in arrivals)
        assert placed.not_ready_reason is None
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        placed.close()
    assert not alive(child)


async def test_a_large_hosts_first_cycle_runs_in_the_sampler_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A large host known at start never cycles in the serving process (a first cycle here held
    the interpreter, and the server's event loop with it, for as long as it lasted)."""
    from vgpumon.collect.sampler import Sampler

    cycles_here: list[str] = []
    real_cycle_now = Sampler.cycle_now

    def counted(self: Sampler) -> Snapshot:
        cycles_here.append(threading.current_thread().name)
        return real_cycle_now(self)

    monkeypatch.setattr(Sampler, "cycle_now", counted)
    placed = PlacedSampler(
        recipe("--sim", "kvm-vgpu-timesliced", "--interval", "0.2"), deadline_seconds=2
    )
    placed.start()
    where: list[bool] = []
    placed.on_snapshot(lambda snap: where.append(placed.in_own_process))
    assert placed.not_ready_reason == "first sampling cycle not done"
    stop = asyncio.Event()
    task = asyncio.create_task(placed.run(stop))
    try:
        await until(lambda: len(where) >= 2)
        assert where[0], "the first snapshot came from the sampler process"
        assert cycles_here == [], "no cycle ran in the serving process"
        assert placed._local is None and placed.not_ready_reason is None
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        placed.close()


async def test_a_sampler_process_that_cannot_start_leaves_the_sampler_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def cannot(self: SamplerProcess, timeout: float | None = None) -> None:
        self.close()  # as start() does: the child that could not build its sampler is reaped
        raise SamplerStartFailed("no", 1)

    monkeypatch.setattr(SamplerProcess, "start", cannot)
    placed = PlacedSampler(
        recipe("--sim", "kvm-vgpu-timesliced", "--interval", "0.1"), deadline_seconds=2
    )
    placed.start()
    heard: list[Snapshot] = []
    placed.on_snapshot(heard.append)
    stop = asyncio.Event()
    task = asyncio.create_task(placed.run(stop))
    try:
        await until(lambda: len(heard) >= 3)
        assert not placed.in_own_process and placed.not_ready_reason is None
        assert placed._moving is None, "it does not try to move again"
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        placed.close()


def test_which_hosts_are_large_before_a_cycle() -> None:
    from vgpumon import sim
    from vgpumon.collect.placement import large_by_nvml

    def probed(scenario: str) -> bool | None:
        module = sim.create(scenario)
        module.nvmlInit()
        try:
            return large_by_nvml(module)
        finally:
            module.nvmlShutdown()

    assert probed("passthrough-guest") is False
    assert probed("kvm-vgpu-timesliced") is True  # one GPU, in vGPU host mode
    assert probed("a100-mig-mixed") is True  # MIG
    assert probed("baremetal-8xh100") is True  # more than two GPUs
    assert large_by_nvml(sim.create("passthrough-guest")) is None  # not initialised: not known


def test_which_hosts_are_large() -> None:
    from vgpumon.model import Gpu

    def host(*gpus: Gpu) -> Snapshot:
        return Snapshot(timestamp=0.0, gpus=gpus)

    bare = Gpu(index=0, uuid="GPU-a", virtualization_mode="passthrough", mig_mode_current=False)
    assert not large_host(host()) and not large_host(host(bare, bare))
    assert large_host(host(bare, bare, bare))
    assert large_host(host(dataclasses.replace(bare, virtualization_mode="host_vgpu")))
    assert large_host(host(dataclasses.replace(bare, mig_mode_current=True)))


@pytest.mark.parametrize("scenario", builtin_names())
def test_nvml_and_the_snapshot_call_a_host_large_alike(scenario: str) -> None:
    """The probe before the first cycle and the snapshot after it apply one rule (``is_large``):
    a host the probe calls small never moves once its first snapshot is read, and the reverse."""
    from vgpumon import sim
    from vgpumon.collect import take_snapshot
    from vgpumon.collect.placement import large_by_nvml
    from vgpumon.nvml.loader import open_session

    module = sim.create(scenario)
    module.nvmlInit()
    try:
        before = large_by_nvml(module)
    finally:
        module.nvmlShutdown()
    snapshot = asyncio.run(take_snapshot(open_session(sim=scenario), enrich_wait=0.0))
    assert before == large_host(snapshot), scenario
