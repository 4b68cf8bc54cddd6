"""Memory in use as vgpumon counts it, for a GPU and for each of its GPU instances: decided here
once, put into the snapshot (``Gpu.memory_in_use_bytes``, ``MigGpuInstance.memory_in_use_bytes``)
and exported (``vgpumon_gpu_memory_in_use_bytes``, ``vgpumon_mig_memory_in_use_bytes``); `top`'s
cells, the fleet rule's host sum and the MIG dashboard read those and add nothing.

NVML's "used" is the answer everywhere but on a MIG-backed vGPU host, where NVML counts the guests'
framebuffer in neither the GPU instance nor the GPU (0 there while the guests hold gigabytes). So:

* a GPU instance holds NVML's figure or the sum of what its vGPUs hold, whichever is more;
* a GPU with MIG-backed vGPUs holds NVML's figure or the sum over its GPU instances, whichever is
  more; any other GPU holds NVML's figure.

Absent stays absent: a GPU instance whose NVML figure is unknown and which hosts no vGPU with a
known framebuffer holds None, and so does a GPU where nothing is known.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from vgpumon.model import Gpu, MigGpuInstance, VgpuInstance


def gpu_instance_memory_in_use(gi: MigGpuInstance, vgpus: Sequence[VgpuInstance]) -> int | None:
    """``gi``'s memory in use: NVML's figure, or what the vGPUs in it hold, whichever is more."""
    held = [
        v.framebuffer_used_bytes
        for v in vgpus
        if v.gpu_instance_id == gi.id and v.framebuffer_used_bytes is not None
    ]
    if not held:
        return gi.memory_used_bytes
    return max(gi.memory_used_bytes or 0, sum(held))


def with_memory_in_use(
    used: int | None, gpu_instances: Sequence[MigGpuInstance], vgpus: Sequence[VgpuInstance]
) -> tuple[int | None, tuple[MigGpuInstance, ...]]:
    """The GPU's memory in use (``used`` is NVML's figure) and its GPU instances, each with its
    own ``memory_in_use_bytes`` set."""
    instances = tuple(
        dataclasses.replace(gi, memory_in_use_bytes=gpu_instance_memory_in_use(gi, vgpus))
        for gi in gpu_instances
    )
    if not instances or not any(v.gpu_instance_id is not None for v in vgpus):
        return used, instances
    known = [gi.memory_in_use_bytes for gi in instances if gi.memory_in_use_bytes is not None]
    return (max(used or 0, sum(known)) if known else used), instances


def memory_decided(gpu: Gpu) -> Gpu:
    """``gpu`` with its memory in use decided, for a snapshot built whole rather than by the
    readers (nvidia-smi's reports)."""
    in_use, instances = with_memory_in_use(
        gpu.memory.used_bytes, gpu.mig_instances, gpu.vgpu_instances
    )
    return dataclasses.replace(gpu, memory_in_use_bytes=in_use, mig_instances=instances)
