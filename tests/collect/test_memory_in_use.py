"""The memory in use, decided once in vgpumon.collect.memory_in_use: known answers by hand, then
the scenario with MIG-backed vGPUs, whose answer is worked out here from the scenario file."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from smi_helpers import both_paths

from vgpumon.collect.memory_in_use import gpu_instance_memory_in_use, with_memory_in_use
from vgpumon.model import MigGpuInstance, VgpuInstance
from vgpumon.units import parse_size

SCENARIOS = Path(__file__).resolve().parents[2] / "vgpumon" / "sim" / "scenarios"
GIB = 1024**3


def vgpu(vgpu_id: int, gi: int | None, held: int | None) -> VgpuInstance:
    return VgpuInstance(vgpu_id=vgpu_id, gpu_instance_id=gi, framebuffer_used_bytes=held)


def test_a_gpu_instance_holds_nvml_s_figure_or_its_vgpus_whichever_is_more() -> None:
    gi = MigGpuInstance(id=1, memory_used_bytes=2 * GIB)
    assert gpu_instance_memory_in_use(gi, [vgpu(1, 1, 3 * GIB), vgpu(2, 1, 4 * GIB)]) == 7 * GIB
    assert gpu_instance_memory_in_use(gi, [vgpu(1, 1, GIB)]) == 2 * GIB  # NVML says more
    assert gpu_instance_memory_in_use(gi, [vgpu(1, 2, 9 * GIB)]) == 2 * GIB  # another GI's
    assert gpu_instance_memory_in_use(gi, [vgpu(1, 1, None)]) == 2 * GIB  # unknown: not 0
    unknown = MigGpuInstance(id=1)
    assert gpu_instance_memory_in_use(unknown, []) is None  # absent stays absent
    assert gpu_instance_memory_in_use(unknown, [vgpu(1, 1, GIB)]) == GIB


def test_a_gpu_sums_its_gpu_instances_only_where_vgpus_live_in_them() -> None:
    gis = (MigGpuInstance(id=1, memory_used_bytes=0), MigGpuInstance(id=2, memory_used_bytes=GIB))
    # MIG-backed vGPUs: NVML's 1 GiB for the GPU leaves the guests' 5 GiB out.
    used, instances = with_memory_in_use(GIB, gis, [vgpu(1, 1, 5 * GIB)])
    assert used == 6 * GIB
    assert [gi.memory_in_use_bytes for gi in instances] == [5 * GIB, GIB]
    # A MIG GPU without vGPUs, and a time-sliced vGPU host: NVML's figure, as it is.
    assert with_memory_in_use(3 * GIB, gis, [])[0] == 3 * GIB
    assert with_memory_in_use(3 * GIB, (), [vgpu(1, None, 9 * GIB)])[0] == 3 * GIB
    assert with_memory_in_use(None, (), [])[0] is None
    # NVML's figure stands when it is the larger.
    assert with_memory_in_use(40 * GIB, gis, [vgpu(1, 1, 5 * GIB)])[0] == 40 * GIB


def _held_by_gpu_instance(scenario: str) -> dict[int, int]:
    """What the scenario's MIG-backed vGPUs hold, per GPU instance of its first GPU."""
    spec = yaml.safe_load((SCENARIOS / f"{scenario}.yaml").read_text())
    held: dict[int, int] = defaultdict(int)
    for instance in spec["gpus"][0]["vgpu"]["instances"]:
        held[instance["gpu_instance"]] += parse_size(instance["framebuffer_used"])
    return dict(held)


@pytest.mark.parametrize("path", ["nvml", "nvidia-smi"])
def test_the_snapshot_holds_the_guests_memory_on_a_mig_backed_vgpu_host(path: str) -> None:
    via_nvml, via_smi = both_paths("h100-mig-backed-vgpu")
    snapshot = via_nvml if path == "nvml" else via_smi
    gpu = snapshot.gpus[0]
    held = _held_by_gpu_instance("h100-mig-backed-vgpu")
    assert held and all(gi.memory_used_bytes == 0 for gi in gpu.mig_instances)  # NVML: nothing
    expected = {
        gi.id: max(gi.memory_used_bytes or 0, held.get(gi.id, 0)) for gi in gpu.mig_instances
    }
    assert {gi.id: gi.memory_in_use_bytes for gi in gpu.mig_instances} == expected
    assert gpu.memory_in_use_bytes == max(gpu.memory.used_bytes or 0, sum(expected.values()))
    assert gpu.memory_in_use_bytes == sum(held.values()) > (gpu.memory.used_bytes or 0)
    # The time-sliced GPU beside it: NVML's own figure.
    assert snapshot.gpus[1].memory_in_use_bytes == snapshot.gpus[1].memory.used_bytes
