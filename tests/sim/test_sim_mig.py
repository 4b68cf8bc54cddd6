"""MIG in the simulator: modes, MIG device handles, GI/CI enumeration, error codes, profiles."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create, parse_scenario

GIB = 2**30
MIB = 2**20


@pytest.fixture
def sim() -> SimNvml:
    s = create("a100-mig-mixed", ManualClock())
    s.nvmlInit()
    return s


def test_mig_devices_follow_the_layout(sim: SimNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetMigMode(parent) == [1, 1]
    assert sim.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    assert sim.nvmlDeviceGetCount() == 2  # MIG devices are not counted
    flag = sim.nvmlDeviceIsMigDeviceHandle(parent)
    assert type(flag) is ctypes.c_uint and flag.value == 0
    seen = []
    for i in range(7):
        mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        assert sim.nvmlDeviceIsMigDeviceHandle(mig).value == 1
        assert sim.nvmlDeviceGetIndex(mig) == i
        assert sim.nvmlDeviceGetUUID(mig).startswith("MIG-")
        back = sim.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert sim.nvmlDeviceGetUUID(back) == sim.nvmlDeviceGetUUID(parent)
        seen.append(
            (
                sim.nvmlDeviceGetName(mig),
                sim.nvmlDeviceGetGpuInstanceId(mig),
                sim.nvmlDeviceGetComputeInstanceId(mig),
            )
        )
    prefix = "NVIDIA A100-SXM4-40GB MIG "
    assert seen == [
        (prefix + "1c.2g.10gb", 1, 0),
        (prefix + "1c.2g.10gb", 1, 1),
        (prefix + "1g.5gb", 2, 0),
        (prefix + "1g.5gb", 3, 0),
        (prefix + "1c.3g.20gb", 4, 0),
        (prefix + "1c.3g.20gb", 4, 1),
        (prefix + "1c.3g.20gb", 4, 2),
    ]
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)


def test_mig_memory_processes_and_attributes(sim: SimNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    first = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    second = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    mem = sim.nvmlDeviceGetMemoryInfo(first)
    assert mem.total == 9984 * MIB and mem.used == 8 * GIB  # both processes of GPU instance 1
    assert sim.nvmlDeviceGetMemoryInfo(second).used == 8 * GIB  # CIs share their GI's memory
    assert [p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(first)] == [2201]
    assert [p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(second)] == [2202]
    everything = sim.nvmlDeviceGetComputeRunningProcesses(parent)
    assert sorted((p.pid, p.gpuInstanceId, p.computeInstanceId) for p in everything) == [
        (2201, 1, 0),
        (2202, 1, 1),
        (2301, 2, 0),
        (2401, 4, 0),
        (2402, 4, 2),
    ]
    assert sim.nvmlDeviceGetMemoryInfo(parent).used == 20 * GIB + 561 * MIB  # all GIs + reserved
    attrs = sim.nvmlDeviceGetAttributes(first)
    assert isinstance(attrs, pynvml.c_nvmlDeviceAttributes)
    assert (
        attrs.multiprocessorCount,
        attrs.gpuInstanceSliceCount,
        attrs.computeInstanceSliceCount,
    ) == (14, 2, 1)
    assert attrs.memorySizeMB == 9984


def test_mig_error_codes_of_the_cheat_sheet(sim: SimNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    plain = sim.nvmlDeviceGetHandleByIndex(1)
    assert sim.nvmlDeviceGetMigMode(plain) == [0, 0]
    assert sim.nvmlDeviceGetMaxMigDeviceCount(plain) == 0
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetMigDeviceHandleByIndex(plain, 0)
    for call in (
        sim.nvmlDeviceGetGpuInstanceId,
        sim.nvmlDeviceGetComputeInstanceId,
        sim.nvmlDeviceGetDeviceHandleFromMigDeviceHandle,
    ):
        with pytest.raises(pynvml.NVMLError_InvalidArgument):
            call(parent)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetAttributes(plain)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetGpuInstanceById(plain, 1)
    l40s = create(parse_scenario("gpus: [{model: l40s}]"), ManualClock())
    l40s.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        l40s.nvmlDeviceGetMigMode(l40s.nvmlDeviceGetHandleByIndex(0))


def test_gpu_and_compute_instance_enumeration(sim: SimNvml) -> None:
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    count = ctypes.c_uint()
    gis = (pynvml.c_nvmlGpuInstance_t * 2)()
    assert (
        sim.nvmlDeviceGetGpuInstances(parent, 19, gis, ctypes.byref(count)) == pynvml.NVML_SUCCESS
    )
    assert count.value == 2
    infos = [sim.nvmlGpuInstanceGetInfo(gis[i]) for i in range(count.value)]
    assert [(i.id, i.profileId, i.placement.start, i.placement.size) for i in infos] == [
        (2, 19, 2, 1),
        (3, 19, 3, 1),
    ]
    three_g = sim.nvmlDeviceGetGpuInstanceById(parent, 4)
    cis = (pynvml.c_nvmlComputeInstance_t * 3)()
    sim.nvmlGpuInstanceGetComputeInstances(
        three_g, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, cis, ctypes.byref(count)
    )
    assert count.value == 3
    ci_info = sim.nvmlComputeInstanceGetInfo(cis[2])
    assert (ci_info.id, ci_info.profileId, ci_info.placement.start, ci_info.placement.size) == (
        2,
        0,
        2,
        1,
    )
    assert sim.nvmlGpuInstanceGetInfo(ci_info.gpuInstance).id == 4
    assert sim.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(three_g, 0) == 0
    ci_profile = sim.nvmlGpuInstanceGetComputeInstanceProfileInfo(three_g, 0, 0)
    assert isinstance(ci_profile, pynvml.c_nvmlComputeInstanceProfileInfo_v2_t)
    assert (ci_profile.name, ci_profile.multiprocessorCount, ci_profile.instanceCount) == (
        "MIG 1c.3g.20gb",
        14,
        3,
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            three_g, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, 0
        )
    # a too-small caller array is INSUFFICIENT_SIZE, as C reports it
    with pytest.raises(pynvml.NVMLError_InsufficientSize):
        sim.nvmlDeviceGetGpuInstances(
            parent, 19, (pynvml.c_nvmlGpuInstance_t * 1)(), ctypes.byref(count)
        )
    # the full layout leaves no room
    assert sim.nvmlDeviceGetGpuInstanceRemainingCapacity(parent, 19) == 0


def test_profiles_with_mig_disabled_match_r580_on_h200() -> None:
    sim = create("passthrough-guest", ManualClock())
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    rows = []
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT + 1):
        try:
            info = sim.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
        except pynvml.NVMLError as err:
            rows.append((index, err.value))
            continue
        rows.append(
            (
                index,
                info.id,
                info.name,
                info.sliceCount,
                info.instanceCount,
                info.multiprocessorCount,
                info.memorySizeMB,
            )
        )
    assert rows[:8] == [
        (0, 19, "MIG 1g.18gb", 1, 7, 16, 16384),
        (1, 14, "MIG 2g.35gb", 2, 3, 32, 33280),
        (2, 9, "MIG 3g.71gb", 3, 2, 60, 71424),
        (3, 5, "MIG 4g.71gb", 4, 1, 64, 71424),
        (4, 0, "MIG 7g.141gb", 7, 1, 132, 143360),
        (5, 3),
        (6, 3),
        (7, 20, "MIG 1g.18gb+me", 1, 1, 16, 16384),
    ]
    assert rows[9] == (9, 15, "MIG 1g.35gb", 1, 4, 26, 33280)
    assert rows[0x10:] == [(0x10, 3), (0x11, 2), (0x12, 2)]
    v1 = sim.nvmlDeviceGetGpuInstanceProfileInfo(h, 0, version=1)
    assert isinstance(v1, pynvml.c_nvmlGpuInstanceProfileInfo_t)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        sim.nvmlDeviceGetGpuInstanceProfileInfo(h, 0, version=3)
    assert sim.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 7
    count = ctypes.c_uint()
    placements = (pynvml.c_nvmlGpuInstancePlacement_t * 8)()
    sim.nvmlDeviceGetGpuInstancePossiblePlacements(h, 0, placements, ctypes.byref(count))
    assert [(placements[i].start, placements[i].size) for i in range(count.value)] == [(0, 8)]
    sim.nvmlDeviceGetGpuInstancePossiblePlacements(h, 19, None, ctypes.byref(count))
    assert count.value == 7
    gis = (pynvml.c_nvmlGpuInstance_t * 7)()
    assert sim.nvmlDeviceGetGpuInstances(h, 19, gis, ctypes.byref(count)) == 0 and count.value == 0
    field = sim.nvmlDeviceGetFieldValues(
        h, [pynvml.NVML_FI_DEV_IS_MIG_MODE_INDEPENDENT_MIG_QUERY_CAPABLE]
    )[0]
    assert (field.nvmlReturn, field.value.uiVal) == (0, 1)


def test_unprivileged_enumeration_is_refused() -> None:
    sim = create(
        parse_scenario(
            """
privileged: false
gpus:
  - model: h100-sxm-80gb
    mig: {enabled: true, instances: [{profile: 7g.80gb}]}
"""
        ),
        ManualClock(),
    )
    sim.nvmlInit()
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        sim.nvmlDeviceGetGpuInstanceById(parent, 1)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        sim.nvmlDeviceGetMemoryInfo(parent)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    assert sim.nvmlDeviceGetMemoryInfo(mig).total == 81152 * MIB  # MIG handles need no privilege


def test_mig_index_holes() -> None:
    sim = create(
        parse_scenario(
            """
gpus:
  - model: h100-sxm-80gb
    mig:
      enabled: true
      instances:
        - {profile: 1g.10gb, compute_instances: [{mig_index: 3}]}
        - {profile: 1g.10gb}
"""
        ),
        ManualClock(),
    )
    sim.nvmlInit()
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    found = []
    for i in range(sim.nvmlDeviceGetMaxMigDeviceCount(parent)):
        try:
            found.append(
                (
                    i,
                    sim.nvmlDeviceGetGpuInstanceId(
                        sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
                    ),
                )
            )
        except pynvml.NVMLError_NotFound:
            continue
    assert found == [(0, 2), (3, 1)]
