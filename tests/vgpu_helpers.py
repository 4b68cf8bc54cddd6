"""Small functions the vGPU tests share (the sampled simulated host itself is
``vgpumon.testing.sim_host``, and the ``sim_host`` fixture in tests/collect/conftest.py)."""

from __future__ import annotations

from typing import Any

from vgpumon.model import Gpu, Snapshot


def vgpu_errors(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """NVML errors of vGPU functions (the device and MIG readers' own are not under test here)."""
    return {
        (e.function, e.error): e.count
        for e in snapshot.nvml_errors
        if "Vgpu" in e.function or "vgpu" in e.function.lower()
    }


def by_id(gpu: Gpu) -> dict[int, Any]:
    return {v.vgpu_id: v for v in gpu.vgpu_instances}
