"""vGPU host snapshots checked against each built-in scenario's own definition.

Expected values are read from the parsed scenario file (its ``vgpu`` sections), not copied into the
tests, so each check says "what the file defines is what vgpumon reports".
"""

from __future__ import annotations

from typing import Any

import pytest
from vgpu_helpers import by_id, vgpu_errors

from vgpumon.model import Gpu, Snapshot, from_json, to_json
from vgpumon.sim.patterns import PatternSpec
from vgpumon.testing import SimHost, SimHostFactory

GIB = 2**30


def const(p: PatternSpec | None, default: float = 0.0) -> float:
    if p is None:
        return default
    value = p.constant_value()
    assert value is not None, "the checks below need constant patterns"
    return value


def types_of(gpu_def: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {t["id"]: t for t in gpu_def["types"]}


def type_id(gpu_def: dict[str, Any], ref: int | str) -> int:
    return (
        ref if isinstance(ref, int) else next(t["id"] for t in gpu_def["types"] if t["name"] == ref)
    )


def vgpu_defs(host: SimHost) -> list[dict[str, Any] | None]:
    return [g.extra.get("vgpu") for g in host.scenario.gpus]


def expected_used_share(gpu_def: dict[str, Any]) -> dict[int, float]:
    """What each vGPU keeps busy under the GPU's policy (an independent reading of docs/vgpu.md)."""
    insts = gpu_def["instances"]
    demand = {i["id"]: const(i.get("load", {}).get("sm")) for i in insts}
    policy = gpu_def.get("scheduler", {}).get("policy", 1)
    if policy == 3:  # fixed share: 1/max_instances each, used = min(demand, slot)
        types = types_of(gpu_def)
        return {
            i["id"]: min(demand[i["id"]], 1 / types[type_id(gpu_def, i["type"])]["max_instances"])
            for i in insts
        }
    if policy == 2:  # equal share among busy vGPUs, max-min fair
        out = dict.fromkeys(demand, 0.0)
        busy = sorted((d, k) for k, d in demand.items() if d > 0)
        remaining = 1.0
        while busy:
            level = remaining / len(busy)
            if busy[0][0] <= level:
                d, k = busy.pop(0)
                out[k], remaining = d, remaining - d
            else:
                for _, k in busy:
                    out[k] = level
                break
        return out
    total = sum(demand.values())  # best effort: demand, scaled down when oversubscribed
    return {k: d / total if total > 1 else d for k, d in demand.items()}


@pytest.fixture
async def timesliced(sim_host: SimHostFactory) -> Any:
    host = sim_host("kvm-vgpu-timesliced")
    await host.cycle()
    host.advance(2.0)
    snap = await host.cycle()
    yield host, snap
    host.close()


async def test_timesliced_inventory_matches_the_scenario(timesliced: Any) -> None:
    host, snap = timesliced
    for g, gpu_def in zip(snap.gpus, vgpu_defs(host), strict=True):
        assert gpu_def is not None
        assert g.virtualization_mode == "host_vgpu"
        assert g.host_vgpu_mode == "sriov"  # Ampere and Ada default to SR-IOV
        types = types_of(gpu_def)
        got = by_id(g)
        assert list(got) == [i["id"] for i in gpu_def["instances"]]
        for inst in gpu_def["instances"]:
            v = got[inst["id"]]
            t = types[type_id(gpu_def, inst["type"])]
            assert (v.type_id, v.type_name, v.framebuffer_total_bytes) == (
                t["id"],
                t["name"],
                t["framebuffer"],
            )
            expected_class = {"Q": "Quadro", "C": "Compute", "B": "NVS", "A": "NVS"}[t["name"][-1]]
            assert v.type_class == expected_class
            if "vm_id" in inst:
                assert v.vm_id == inst["vm_id"]
            assert v.vm_id_type == "uuid" and v.vm_id and v.mdev_uuid and v.uuid  # KVM
            assert v.framebuffer_used_bytes == int(
                const(inst.get("framebuffer_used"), t["framebuffer"] / 4)
            )
            driver = inst.get("guest_driver", "580.82.07")
            assert v.guest_driver_version == driver
            frl = inst.get(
                "frame_rate_limit", t.get("frame_rate_limit", 0 if t["name"][-1] == "C" else 60)
            )
            assert v.frame_rate_limit == (frl or None)
            assert v.ecc_enabled is (inst.get("ecc") == "enabled")
            assert v.accounting_enabled is (bool(inst.get("accounting")) if driver else None)
            if inst.get("accounting"):
                assert v.accounting_pids == tuple(inst["accounting_pids"])
            enc = inst.get("encoder", {})
            assert v.encoder_capacity == enc.get("capacity", 1.0)
            assert v.encoder_sessions == enc.get("sessions", 0)
            if enc.get("sessions"):
                assert v.encoder_average_fps == enc["fps"]
                assert v.encoder_average_latency_seconds == pytest.approx(enc["latency"])
            assert v.fbc_sessions == inst.get("fbc", {}).get("sessions", 0)
            assert v.gpu_instance_id is None
        assert g.vgpu_heterogeneous_mode is bool(gpu_def.get("heterogeneous", False))


async def test_heterogeneous_placements_do_not_overlap(timesliced: Any) -> None:
    host, snap = timesliced
    g = snap.gpus[0]
    gpu_def = vgpu_defs(host)[0]
    assert gpu_def is not None and gpu_def["heterogeneous"]
    slot = min(t["framebuffer"] for t in gpu_def["types"])
    taken: list[tuple[int, int]] = []
    for v in g.vgpu_instances:
        assert v.placement_id is not None
        size = v.framebuffer_total_bytes // slot
        assert v.placement_id % size == 0
        assert all(not (v.placement_id < s + n and s < v.placement_id + size) for s, n in taken)
        taken.append((v.placement_id, size))
    # Homogeneous GPUs report no placement (NVML's 0xFFFF).
    assert all(v.placement_id is None for v in snap.gpus[1].vgpu_instances)


async def test_utilization_is_the_mean_of_the_cycle_samples(timesliced: Any) -> None:
    host, _ = timesliced
    host.advance(1.0)  # five 200 ms samples per vGPU since the last cycle
    snap = await host.cycle()
    for g, gpu_def in zip(snap.gpus, vgpu_defs(host), strict=True):
        assert gpu_def is not None
        share = expected_used_share(gpu_def)
        for inst in gpu_def["instances"]:
            u = by_id(g)[inst["id"]].utilization
            assert u.samples == 5
            assert u.sm == pytest.approx(round(share[inst["id"]] * 100) / 100)
            assert u.memory == pytest.approx(const(inst.get("load", {}).get("memory")))
            assert u.encoder == pytest.approx(const(inst.get("load", {}).get("encoder")))


async def test_a_cycle_shorter_than_the_sample_period_carries_the_last_mean(
    timesliced: Any,
) -> None:
    host, _ = timesliced
    host.advance(0.3)  # mid-way between two 200 ms samples
    first = await host.cycle()
    host.advance(0.05)  # no new sample in this cycle
    second = await host.cycle()
    for g1, g2 in zip(first.gpus, second.gpus, strict=True):
        for v1, v2 in zip(g1.vgpu_instances, g2.vgpu_instances, strict=True):
            assert v2.utilization.samples == 0
            assert (v2.utilization.sm, v2.utilization.memory) == (
                v1.utilization.sm,
                v1.utilization.memory,
            )


async def test_guest_processes_are_listed_per_vgpu(timesliced: Any) -> None:
    host, snap = timesliced
    gpu_def = vgpu_defs(host)[0]
    assert gpu_def is not None
    expected = {
        (i["id"], p["pid"]): (p.get("name"), const(p.get("sm")))
        for i in gpu_def["instances"]
        for p in i.get("processes", [])
    }
    got = {(p.vgpu_id, p.pid): (p.name, p.sm_utilization) for p in snap.gpus[0].vgpu_processes}
    assert got == expected


async def test_capacity_planning_counts_what_still_fits(timesliced: Any) -> None:
    host, snap = timesliced
    for g, gpu_def in zip(snap.gpus, vgpu_defs(host), strict=True):
        assert gpu_def is not None
        by_type = {t.type_id: t for t in g.vgpu_types}
        assert list(by_type) == [t["id"] for t in gpu_def["types"]]
        active = [type_id(gpu_def, i["type"]) for i in gpu_def["instances"]]
        for t in gpu_def["types"]:
            vt = by_type[t["id"]]
            assert vt.active_instances == active.count(t["id"])
            assert (vt.name, vt.framebuffer_bytes, vt.max_instances) == (
                t["name"],
                t["framebuffer"],
                t["max_instances"],
            )
            if gpu_def.get("heterogeneous"):
                slots = gpu_def["placement_slots"]
                slot = min(x["framebuffer"] for x in gpu_def["types"])
                used = {
                    v.placement_id + k
                    for v in g.vgpu_instances
                    for k in range(v.framebuffer_total_bytes // slot)
                }
                size = t["framebuffer"] // slot
                free = sum(
                    1
                    for p in range(0, slots - size + 1, size)
                    if not used & set(range(p, p + size))
                )
                assert vt.creatable_instances == free and vt.creatable == (free > 0)
            else:
                sizes = {types_of(gpu_def)[a]["framebuffer"] for a in active}
                if sizes == {t["framebuffer"]}:
                    assert vt.creatable and vt.creatable_instances == t["max_instances"] - len(
                        active
                    )
                else:
                    assert not vt.creatable and vt.creatable_instances == 0


async def test_scheduler_state_matches_each_gpus_policy(timesliced: Any) -> None:
    host, snap = timesliced
    names = {1: "best_effort", 2: "equal_share", 3: "fixed_share"}
    for g, gpu_def in zip(snap.gpus, vgpu_defs(host), strict=True):
        assert gpu_def is not None
        sched = gpu_def.get("scheduler", {})
        (s,) = g.vgpu_schedulers
        policy = sched.get("policy", 1)
        assert s.gpu_instance_id is None
        assert s.policy == names[policy]
        assert s.arr_enabled is (sched.get("arr") == 2)
        assert s.supported_policies == ("best_effort", "equal_share", "fixed_share")
        assert (s.min_timeslice_seconds, s.max_timeslice_seconds) == (0.001, 0.03)
        if policy == 1:
            assert s.timeslice_seconds is None and s.average_factor is None  # not meaningful
        else:
            assert s.timeslice_seconds == pytest.approx(sched.get("timeslice", 0.002))
        if sched.get("arr") == 2:
            assert s.average_factor == sched["average_factor"]
            assert s.frequency_hertz == pytest.approx(1 / sched["timeslice"])
        else:
            assert s.frequency_hertz is None
        assert [u.vgpu_id for u in s.usage] == [i["id"] for i in gpu_def["instances"]]


async def test_r580_costs_one_function_not_found_per_v2_call(timesliced: Any) -> None:
    _, snap = timesliced
    assert vgpu_errors(snap) == {
        ("nvmlDeviceGetVgpuSchedulerState_v2", "function_not_found"): 1,
        ("nvmlDeviceGetVgpuSchedulerLog_v2", "function_not_found"): 1,
    }


async def test_snapshot_json_round_trips_with_vgpu_data(timesliced: Any) -> None:
    _, snap = timesliced
    assert from_json(to_json(snap)) == snap


# --------------------------------------------------------------------------- MIG-backed


async def test_mig_backed_vgpus_sit_in_their_gpu_instances(sim_host: SimHostFactory) -> None:
    host = sim_host("h100-mig-backed-vgpu")
    try:
        await host.cycle()
        host.advance(2.0)
        snap: Snapshot = await host.cycle()
    finally:
        host.close()
    g: Gpu = snap.gpus[0]
    gpu_def = vgpu_defs(host)[0]
    assert gpu_def is not None and g.mig_mode_current
    types = types_of(gpu_def)
    got = by_id(g)
    for inst in gpu_def["instances"]:
        v = got[inst["id"]]
        assert v.gpu_instance_id == inst["gpu_instance"]
        assert v.type_name == types[type_id(gpu_def, inst["type"])]["name"]
        assert v.utilization.sm == pytest.approx(const(inst["load"]["sm"]))  # not time-sliced
    # MIG-backed vGPUs are not time-sliced and Hopper has no per-GI scheduler: no scheduler data,
    # and nothing was asked that could only fail.
    assert g.vgpu_schedulers == ()
    assert g.vgpu_heterogeneous_mode is None
    by_type = {t.name: t for t in g.vgpu_types}
    # GPU instance 4 (1g.10gb) is free: one more H100-1-10C fits, nothing else does.
    assert [(n, t.creatable_instances) for n, t in by_type.items() if t.creatable] == [
        ("NVIDIA H100-1-10C", 1)
    ]
    assert by_type["NVIDIA H100-20C"].creatable_instances == 0  # time-sliced: MIG is on
    # GPU 1 runs R595: the _v2 scheduler calls answer, the v1 state is never needed.
    (s,) = snap.gpus[1].vgpu_schedulers
    assert (s.policy, s.timeslice_seconds, s.average_factor) == ("equal_share", 0.002, 20)
    assert s.arr_enabled is None  # the _v2 state has no ARR mode field
    assert vgpu_errors(snap) == {}
