"""Live-migration readiness, from the simulated NVML through the reader to the exposition."""

from __future__ import annotations

import asyncio

from export_helpers import samples_by_name

from vgpumon.collect import take_snapshot
from vgpumon.metrics.exposition import render
from vgpumon.nvml.loader import open_session


def _snapshot(name: str):  # type: ignore[no-untyped-def]
    return asyncio.run(take_snapshot(open_session(sim=name), interval=0))


def test_gpu_and_instance_migration_bits() -> None:
    s = _snapshot("kvm-vgpu-timesliced")
    assert [g.vgpu_migration_supported for g in s.gpus] == [True, True, False]
    by_id = {v.vgpu_id: v.migration_supported for g in s.gpus for v in g.vgpu_instances}
    # GPU 0's vGPU 3 is marked not migratable; GPU 2 supports no migration, so neither do its vGPUs.
    assert by_id == {1: True, 2: True, 3: False, 4: True, 11: True, 12: True, 13: True,
                     14: True, 21: False, 22: False, 23: False}  # fmt: skip


def test_migration_families_in_the_exposition() -> None:
    samples = samples_by_name(render(_snapshot("kvm-vgpu-timesliced")).decode())
    gpu = {labels["gpu"]: v for labels, v in samples["vgpumon_gpu_vgpu_migration_supported"]}
    assert gpu == {"0": 1.0, "1": 1.0, "2": 0.0}
    vgpu = {labels["vgpu_id"]: v for labels, v in samples["vgpumon_vgpu_migration_supported"]}
    assert vgpu["3"] == 0.0 and vgpu["1"] == 1.0 and len(vgpu) == 11


def test_no_migration_series_off_vgpu_hosts() -> None:
    samples = samples_by_name(render(_snapshot("baremetal-8xh100")).decode())
    assert "vgpumon_gpu_vgpu_migration_supported" not in samples
    assert "vgpumon_vgpu_migration_supported" not in samples
