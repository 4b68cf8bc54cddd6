"""Scheduler log -> per-vGPU run time: shares under each policy, and no lost or doubled entries.

The expected shares are an independent reading of the policies (docs/vgpu.md):
best effort follows demand (scaled down when the GPU is oversubscribed); equal share splits the GPU
between busy vGPUs, max-min fair; fixed share gives every vGPU 1/max_instances of its type whatever
its load. Measured share = run-seconds counter increase / wall time, within 2 percentage points.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import vgpumon.sim as sim_pkg
from vgpumon.collect.scheduler import SERVICE, SchedulerLogPoller
from vgpumon.model import Snapshot
from vgpumon.sim.clock import WallClock
from vgpumon.testing import SimHost, SimHostFactory

WINDOW = 10.0
TOLERANCE = 0.02


def granted(gpu_def: dict[str, Any]) -> dict[int, float]:
    insts = gpu_def["instances"]
    demand = {
        i["id"]: i.get("load", {}).get("sm").constant_value() if "sm" in i.get("load", {}) else 0.0
        for i in insts
    }
    policy = gpu_def.get("scheduler", {}).get("policy", 1)
    if policy == 3:
        types = {t["id"]: t for t in gpu_def["types"]}
        names = {t["name"]: t["id"] for t in gpu_def["types"]}
        return {
            i["id"]: 1
            / types[i["type"] if isinstance(i["type"], int) else names[i["type"]]]["max_instances"]
            for i in insts
        }
    if policy == 2:
        out = dict.fromkeys(demand, 0.0)
        busy = sorted((d, k) for k, d in demand.items() if d > 0)
        left = 1.0
        while busy:
            if busy[0][0] <= left / len(busy):
                d, k = busy.pop(0)
                out[k], left = d, left - d
            else:
                out.update({k: left / len(busy) for _, k in busy})
                break
        return out
    total = sum(demand.values())
    return {k: d / total if total > 1 else d for k, d in demand.items()}


def runs(snap: Snapshot) -> dict[tuple[int, int], float]:
    return {
        (g.index, u.vgpu_id): u.run_seconds_total
        for g in snap.gpus
        for s in g.vgpu_schedulers
        for u in s.usage
    }


def written(host: SimHost, gpu: int) -> int:
    return int(host.gpu_state(gpu).ext["vgpu_scheduler"].entries_written)


@pytest.mark.parametrize("scenario", ["kvm-vgpu-timesliced", "h100-mig-backed-vgpu"])
async def test_shares_follow_each_policy_within_two_points(
    sim_host: SimHostFactory, scenario: str
) -> None:
    host = sim_host(scenario)
    try:
        await host.cycle()
        host.advance(1.0)
        before = runs(await host.cycle())
        host.advance(WINDOW)
        after_snap = await host.cycle()
    finally:
        host.close()
    after = runs(after_snap)
    checked = 0
    for g in after_snap.gpus:
        gpu_def = host.scenario.gpus[g.index].extra.get("vgpu")
        if not g.vgpu_schedulers:
            continue
        expected = granted(gpu_def)
        for vgpu_id, share in expected.items():
            measured = (after[(g.index, vgpu_id)] - before[(g.index, vgpu_id)]) / WINDOW
            assert measured == pytest.approx(share, abs=TOLERANCE), (g.index, vgpu_id)
            checked += 1
    assert checked == sum(
        len(g.extra["vgpu"]["instances"])
        for g in host.scenario.gpus
        if g.extra.get("vgpu") and not g.mig_enabled
    )


async def test_no_entry_is_lost_or_counted_twice_at_the_default_poll_rate(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    try:
        await host.cycle()
        for _ in range(5):
            host.advance(1.0)  # the poller's 0.1 s between cycles
            snap = await host.cycle()
        again = await host.cycle()  # the same ring read again: nothing new
    finally:
        host.close()
    for g in snap.gpus:
        (s,) = g.vgpu_schedulers
        assert s.log_entries_missed_total == 0
        assert s.log_entries_total == written(host, g.index)
        assert again.gpus[g.index].vgpu_schedulers == g.vgpu_schedulers


async def test_a_slow_reader_counts_missed_entries_and_keeps_exact_run_time(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    try:
        await host.cycle()
        host.advance(0.5)  # read at the default rate first: the consumer knows where it is
        base = await host.cycle()
        base_written = {g.index: written(host, g.index) for g in base.gpus}
        for _ in range(5):
            host.advance(1.0, poll_every=None)  # then one read a second: the ring wraps
            snap = await host.cycle()
    finally:
        host.close()
    before, after = runs(base), runs(snap)
    for g0, g in zip(base.gpus, snap.gpus, strict=True):
        (s0,) = g0.vgpu_schedulers
        (s,) = g.vgpu_schedulers
        consumed = s.log_entries_total - s0.log_entries_total
        missed = s.log_entries_missed_total - s0.log_entries_missed_total
        produced = written(host, g.index) - base_written[g.index]
        assert missed > 0.5 * produced  # 500 entries a second into a 200-entry ring
        assert consumed + missed == pytest.approx(produced, rel=0.02)
        # Cumulative timeRunTotal carries the time of the entries the ring dropped: the shares
        # are as exact as with the fast reader.
        gpu_def = host.scenario.gpus[g.index].extra["vgpu"]
        for vgpu_id, share in granted(gpu_def).items():
            measured = (after[(g.index, vgpu_id)] - before[(g.index, vgpu_id)]) / 5.0
            assert measured == pytest.approx(share, abs=TOLERANCE)


BEST_EFFORT_STEPS = """
name: best-effort-steps
gpus:
  - model: l40s
    virtualization_mode: host_vgpu
    vgpu:
      types: [{id: 1, name: "NVIDIA L40S-12Q", framebuffer: 12GiB, max_instances: 4}]
      scheduler: {policy: best_effort}
      instances:
        - {id: 1, type: 1, load: {sm: 0.3}}
        - id: 2
          type: 1
          load: {sm: {pattern: steps, steps: [[0s, 0.2], [5s, 0.9]]}}
"""


async def test_best_effort_follows_demand_as_it_changes(sim_host: SimHostFactory) -> None:
    host = sim_host(sim_pkg.parse_scenario(BEST_EFFORT_STEPS, "best-effort-steps.yaml"))
    try:
        await host.cycle()
        host.advance(0.5)
        a = runs(await host.cycle())
        host.advance(4.0)  # demand 0.3 + 0.2: both get what they ask
        b = runs(await host.cycle())
        host.advance(1.0)
        c = runs(await host.cycle())
        host.advance(4.0)  # 0.3 + 0.9 > 1: scaled to 0.25 / 0.75
        d = runs(await host.cycle())
    finally:
        host.close()
    assert (b[(0, 1)] - a[(0, 1)]) / 4 == pytest.approx(0.3, abs=TOLERANCE)
    assert (b[(0, 2)] - a[(0, 2)]) / 4 == pytest.approx(0.2, abs=TOLERANCE)
    assert (d[(0, 1)] - c[(0, 1)]) / 4 == pytest.approx(0.25, abs=TOLERANCE)
    assert (d[(0, 2)] - c[(0, 2)]) / 4 == pytest.approx(0.75, abs=TOLERANCE)


async def test_the_poller_thread_reads_often_enough_in_real_time() -> None:
    module = sim_pkg.create("kvm-vgpu-timesliced", clock=WallClock())
    from vgpumon.collect.sampler import Sampler
    from vgpumon.nvml.session import NvmlSession
    from vgpumon.testing import VGPU_READERS

    session = NvmlSession(module, "sim")
    session.init()
    poller = SchedulerLogPoller(session)  # the default: its own thread, 10 reads a second
    sampler = Sampler(session, readers=VGPU_READERS, services={SERVICE: poller})
    try:
        await sampler.cycle()
        await asyncio.sleep(1.5)  # ~750 entries per GPU: the ring alone would wrap 3 times
        snap = await sampler.cycle()
        watches = [poller.scope(g.uuid, None) for g in snap.gpus]
    finally:
        sampler.close()
    await asyncio.sleep(0.3)  # let the threads see the close
    for g, w in zip(snap.gpus, watches, strict=True):
        assert w is not None
        sched = module._core.gpus[g.index].ext["vgpu_scheduler"]
        assert w.consumer.missed_total == 0
        assert w.consumer.entries_total == sched.entries_written
        assert w.consumer.reads >= 10
