"""Finding the target in a snapshot, reading it, and reducing a window of readings."""

from __future__ import annotations

import pytest

from vgpumon.errors import ConfigError
from vgpumon.model import (
    Gpm,
    Gpu,
    Memory,
    MigComputeInstance,
    MigGpuInstance,
    Process,
    Snapshot,
    Utilization,
)
from vgpumon.validate.readings import (
    GPM,
    PROCESS_UTILIZATION,
    UTILIZATION,
    ProcessReading,
    Reading,
    Target,
    aggregate,
    mig_share,
    reading_from_snapshot,
    resolve_target,
)

GIB = 1024**3


def mig_gpu() -> Gpu:
    return Gpu(
        index=1,
        uuid="GPU-MIGPARENT",
        name="NVIDIA H100 80GB HBM3",
        architecture="hopper",
        mig_mode_current=True,
        gpm=Gpm(sm_active=0.3),
        processes=(
            Process(pid=10, used_memory_bytes=GIB, gpu_instance_id=2, compute_instance_id=0),
            Process(pid=11, used_memory_bytes=GIB, gpu_instance_id=5, compute_instance_id=0),
        ),
        mig_instances=(
            MigGpuInstance(
                id=2,
                profile_name="3g.40gb",
                memory_used_bytes=3 * GIB,
                gpm=Gpm(sm_active=0.25, interval_seconds=1.0),
                compute_instances=(
                    MigComputeInstance(id=0, mig_uuid="MIG-aaaa", placement_size=1, sm_count=20),
                    MigComputeInstance(id=1, mig_uuid="MIG-bbbb", placement_size=2, sm_count=40),
                ),
            ),
            MigGpuInstance(
                id=5,
                profile_name="1g.10gb",
                compute_instances=(MigComputeInstance(id=0, mig_uuid="MIG-cccc"),),
            ),
        ),
    )


def snapshot() -> Snapshot:
    plain = Gpu(
        index=0,
        uuid="GPU-Plain",
        name="NVIDIA H200",
        architecture="hopper",
        virtualization_mode="passthrough",
        utilization=Utilization(gpu=0.5),
        memory=Memory(used_bytes=2 * GIB),
        gpm=Gpm(sm_active=0.49, interval_seconds=0.5),
        processes=(Process(pid=7, used_memory_bytes=GIB, sm_utilization=0.5),),
    )
    return Snapshot(timestamp=100.0, gpus=(plain, mig_gpu()))


def test_resolve_by_index_and_case_insensitive_uuid():
    snap = snapshot()
    assert resolve_target(snap, "0").gpu_uuid == "GPU-Plain"
    target = resolve_target(snap, "gpu-plain")
    assert target.gpu_index == 0 and not target.is_mig
    assert target.load_device == "GPU-Plain"
    assert target.virtualization_mode == "passthrough"


def test_resolve_a_mig_device_finds_its_gpu_instance_and_share():
    target = resolve_target(snapshot(), "MIG-bbbb")
    assert target.is_mig and target.gpu_instance_id == 2 and target.compute_instance_id == 1
    assert target.load_device == "MIG-bbbb"
    assert target.mig_share == pytest.approx(2 / 3)
    assert resolve_target(snapshot(), "MIG-cccc").mig_share == 1.0


def test_mig_share_unknown_without_profile_slices():
    gi = MigGpuInstance(
        id=1,
        profile_name=None,
        compute_instances=(MigComputeInstance(id=0), MigComputeInstance(id=1)),
    )
    assert mig_share(gi, gi.compute_instances[0]) is None


def test_a_mig_enabled_gpu_is_not_a_target_and_the_error_lists_its_devices():
    with pytest.raises(ConfigError, match=r"has MIG enabled.*MIG-aaaa, MIG-bbbb, MIG-cccc"):
        resolve_target(snapshot(), "1")


@pytest.mark.parametrize("selector", ["7", "GPU-nope", "MIG-nope"])
def test_unknown_devices_are_refused_with_the_choices(selector):
    with pytest.raises(ConfigError, match=r"0 \(GPU-Plain\)"):
        resolve_target(snapshot(), selector)


def test_no_gpu_at_all():
    with pytest.raises(ConfigError, match="no GPU found"):
        resolve_target(Snapshot(timestamp=0.0), "0")


def test_a_down_gpu_is_refused():
    snap = Snapshot(
        timestamp=0.0, gpus=(Gpu(index=0, uuid="GPU-x", up=False, down_reason="gpu_is_lost"),)
    )
    with pytest.raises(ConfigError, match="is down"):
        resolve_target(snap, "0")


def test_reading_of_a_whole_gpu():
    snap = snapshot()
    r = reading_from_snapshot(snap, resolve_target(snap, "0"))
    assert (r.utilization, r.gpm_sm_active, r.gpm_interval_s) == (0.5, 0.49, 0.5)
    assert r.memory_used_bytes == 2 * GIB
    assert r.processes == (ProcessReading(7, GIB, 0.5),)
    assert r.absent == {} and r.error is None


def test_reading_of_a_mig_device_uses_its_gpu_instance():
    snap = snapshot()
    r = reading_from_snapshot(snap, resolve_target(snap, "MIG-aaaa"))
    assert r.utilization is None and "no utilization for MIG" in r.absent[UTILIZATION]
    assert r.gpm_sm_active == 0.25  # the GPU instance's, not the GPU's 0.3
    assert r.memory_used_bytes == 3 * GIB
    assert [p.pid for p in r.processes or ()] == [10]  # only its GPU instance's processes
    assert "MIG-enabled" in r.absent[PROCESS_UTILIZATION]


def test_reasons_for_missing_gpm():
    guest = Target(0, "GPU-g", architecture="ada", virtualization_mode="vgpu")
    snap = Snapshot(timestamp=1.0, gpus=(Gpu(index=0, uuid="GPU-g", virtualization_mode="vgpu"),))
    assert "vGPU guest" in reading_from_snapshot(snap, guest).absent[GPM]
    ampere = Target(0, "GPU-g", architecture="ampere")
    assert "this one is ampere" in reading_from_snapshot(snap, ampere).absent[GPM]
    override = reading_from_snapshot(snap, ampere, reasons={GPM: "exporter says no"})
    assert override.absent[GPM] == "exporter says no"


def test_a_target_that_vanished_or_went_down_is_an_error():
    target = Target(0, "GPU-Plain")
    gone = reading_from_snapshot(Snapshot(timestamp=1.0), target)
    assert gone.error is not None and "no longer listed" in gone.error
    down = Snapshot(
        timestamp=1.0, gpus=(Gpu(index=0, uuid="GPU-Plain", up=False, down_reason="hung"),)
    )
    assert "down (hung)" in (reading_from_snapshot(down, target).error or "")
    gi_gone = Target(1, "GPU-MIGPARENT", mig_uuid="MIG-zzz", gpu_instance_id=9)
    assert "is gone" in (reading_from_snapshot(snapshot(), gi_gone).error or "")


def test_aggregate_median_utilization_and_interval_weighted_gpm():
    readings = [
        Reading(
            1.0, utilization=0.50, gpm_sm_active=0.40, gpm_interval_s=1.0, memory_used_bytes=10
        ),
        Reading(
            2.0, utilization=0.51, gpm_sm_active=0.70, gpm_interval_s=2.0, memory_used_bytes=12
        ),
        Reading(3.0, utilization=0.90, gpm_sm_active=None, memory_used_bytes=11),
    ]
    m = aggregate(readings)
    assert m.utilization == 0.51
    assert m.gpm_sm_active == pytest.approx((0.4 * 1 + 0.7 * 2) / 3)
    assert m.gpm_seconds == 3.0
    assert m.memory_used_bytes == 11
    assert m.readings == 3


def test_aggregate_gpm_without_intervals_is_a_plain_mean():
    m = aggregate([Reading(1.0, gpm_sm_active=0.2), Reading(2.0, gpm_sm_active=0.4)])
    assert m.gpm_sm_active == pytest.approx(0.3) and m.gpm_seconds is None


def test_aggregate_process_utilization_ignores_readings_without_a_sample():
    def r(t: float, sm: float | None) -> Reading:
        return Reading(t, processes=(ProcessReading(5, 100, sm),))

    m = aggregate([r(1, 0.5), r(2, 0.0), r(3, 0.6), r(4, 0.0)])
    assert m.processes is not None
    p = m.processes[5]
    assert p.sm_utilization == pytest.approx(0.55)
    assert (p.sm_readings, p.zero_readings) == (2, 2)
    idle = aggregate([r(1, 0.0), r(2, 0.0)])
    assert idle.processes is not None and idle.processes[5].sm_utilization == 0.0
    unknown = aggregate([r(1, None)])
    assert unknown.processes is not None and unknown.processes[5].sm_utilization is None


def test_aggregate_keeps_reasons_only_for_missing_values():
    m = aggregate(
        [
            Reading(1.0, utilization=None, absent={UTILIZATION: "not yet"}),
            Reading(2.0, utilization=0.3),
        ]
    )
    assert m.utilization == 0.3 and UTILIZATION not in m.absent


def test_aggregate_errors_and_empty_windows():
    assert aggregate([]).error == "no reading arrived in the measurement window"
    m = aggregate([Reading(1.0, utilization=0.5), Reading(2.0, error="GPU gone")])
    assert m.error == "GPU gone" and m.utilization is None
