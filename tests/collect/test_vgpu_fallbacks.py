"""Older drivers and other hypervisors: newer calls fall back, absent values are paid for once."""

from __future__ import annotations

import pytest
from vgpu_helpers import by_id, vgpu_errors

from vgpumon.collect.vgpu import UTIL_STALE_SECONDS, VgpuHostState, _merge_utilization, _Util
from vgpumon.sim import parse_scenario
from vgpumon.testing import SimHostFactory

R535_VMWARE = """
name: r535-vmware
driver: {version: "535.183.06", cuda_driver_version: "12.2"}
gpus:
  - model: a100-sxm-40gb
    count: 2
    virtualization_mode: host_vgpu
    vgpu:
      sriov: false
      hypervisor: vmware
      types: [{id: 474, name: "NVIDIA A100-10C", framebuffer: 10GiB, max_instances: 4}]
      scheduler: {policy: equal_share, arr: disable, timeslice: 1ms}
      instances:
        - {type: 474, load: {sm: 0.7, memory: 0.3},
           processes: [{pid: 99, name: cuda-app, sm: 0.5}]}
        - {type: 474, load: {sm: 0.1}}
"""


async def test_pre_r550_driver_and_vmware_host(sim_host: SimHostFactory) -> None:
    host = sim_host(parse_scenario(R535_VMWARE, "r535-vmware.yaml"))
    try:
        await host.cycle()
        for _ in range(3):
            host.advance(1.0)
            snap = await host.cycle()
    finally:
        host.close()
    ids = iter(range(1, 5))  # instance ids are allocated 1, 2, … across the host
    for g in snap.gpus:
        assert g.host_vgpu_mode == "non_sriov"
        assert g.vgpu_heterogeneous_mode is None  # R550+ call
        got = by_id(g)
        assert list(got) == [next(ids), next(ids)]
        for v in got.values():
            assert v.vm_id_type == "domain_id" and v.vm_id is not None and v.vm_id.isdigit()
            assert v.mdev_uuid is None  # KVM only
            assert v.placement_id is None  # R550+ call
            assert v.utilization.sm is not None  # from the older nvmlDeviceGetVgpuUtilization
        first = min(got)
        assert [(p.vgpu_id, p.pid, p.sm_utilization) for p in g.vgpu_processes] == [
            (first, 99, 0.5)
        ]
        (s,) = g.vgpu_schedulers
        assert (s.policy, s.arr_enabled, s.timeslice_seconds) == ("equal_share", False, 0.001)
    errors = vgpu_errors(snap)
    # Driver-wide gaps are paid once for the host, per-GPU ones once per GPU.
    assert errors == {
        ("nvmlDeviceGetVgpuInstancesUtilizationInfo", "function_not_found"): 1,
        ("nvmlDeviceGetVgpuProcessesUtilizationInfo", "function_not_found"): 1,
        ("nvmlDeviceGetVgpuSchedulerState_v2", "function_not_found"): 1,
        ("nvmlDeviceGetVgpuSchedulerLog_v2", "function_not_found"): 1,
        ("nvmlDeviceGetVgpuHeterogeneousMode", "function_not_found"): 2,
        ("nvmlVgpuInstanceGetPlacementId", "function_not_found"): 2,
        ("nvmlVgpuInstanceGetMdevUUID", "not_supported"): 2,
    }


def test_carried_utilization_is_dropped_once_stale() -> None:
    st = VgpuHostState()
    st.util[7] = _Util(sm=0.5, memory=0.1, last_us=1_000_000)
    st.util_cursor = 1_000_000 + int(UTIL_STALE_SECONDS * 1e6) - 1
    carried = _merge_utilization(st, 7, None, None)
    assert (carried.sm, carried.samples) == (0.5, 0)
    st.util_cursor += 2  # other vGPUs got samples for longer than the bound: this one stopped
    assert _merge_utilization(st, 7, None, None).sm is None
    assert 7 not in st.util
    # A vGPU that never had a sample has no value at all (absent, not 0).
    assert _merge_utilization(st, 8, None, None).sm is None


def test_fresh_samples_are_averaged() -> None:
    st = VgpuHostState()
    u = _merge_utilization(st, 3, {"sm": [40, 60], "memory": [10, 30]}, 5_000_000)
    assert (u.sm, u.memory, u.encoder, u.samples) == (
        pytest.approx(0.5),
        pytest.approx(0.2),
        None,
        2,
    )


async def test_gpu_without_scheduler_log_is_not_watched(sim_host: SimHostFactory) -> None:
    # Both log calls unsupported (the _v2 one's absence is recorded for the whole library): one
    # probe is enough, and the GPU is not watched (no poller thread re-armed every cycle).
    faults = """faults:
  - {kind: error, function: nvmlDeviceGetVgpuSchedulerLog, code: not_supported}
  - {kind: error, function: nvmlDeviceGetVgpuSchedulerState, code: not_supported}
"""
    host = sim_host(parse_scenario(R535_VMWARE + faults, "no-sched-log.yaml"))
    try:
        for _ in range(3):
            host.advance(1.0)
            snap = await host.cycle()
        watched = dict(host.poller._gpus)  # closing forgets every GPU
    finally:
        host.close()
    assert all(g.vgpu_schedulers == () for g in snap.gpus)
    assert all(len(g.vgpu_instances) == 2 for g in snap.gpus)
    assert watched == {}
