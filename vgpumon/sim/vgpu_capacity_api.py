"""Simulated vGPU capacity calls of newer drivers: migration payload, per-type reservations and
MIG-backed time-sliced vGPUs inside GPU instances.

* ``nvmlVgpuInstanceGetRuntimeStateSize`` (R565): the instance's ``migration_state`` pattern, or
  its framebuffer in use plus 64 MiB.
* ``nvmlVgpuTypeGetFbReservation``, ``...GetGspHeapSize``, ``...GetBAR1Info`` (R550): the type's
  ``framebuffer_reservation``, ``gsp_heap`` and ``bar1``; NOT_SUPPORTED where the scenario gives
  none. The true 64-bit values come back through the Python names (vgpumon calls the C symbols
  on a real host, where pynvml reads them into 32 bits).
* GPU instances (R575, time-sliced MIG-backed vGPUs, GB20x): a GPU instance has as many
  placement slots as the largest ``max_per_gpu_instance`` of the types of its profile; a vGPU of
  a type allowing ``m`` per instance takes ``slots / m`` aligned slots. Active vGPUs are packed
  first-fit in order of start and id. Without heterogeneous mode (``gpu_instance_heterogeneous``
  false or absent) a GPU instance holding a vGPU only takes more of the same type.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scheduler import GI_DRIVER, need_driver
from vgpumon.sim.vgpu import VgpuHost, VgpuTypeSpec, find_instance, host_of

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
RUNTIME_STATE_DRIVER = 565
RESERVATION_DRIVER = 550
MB = 1024 * 1024


def gi_slots(host: VgpuHost, profile_id: int) -> int:
    per = [t.max_per_gi for t in host.types.values() if t.gi_profile == profile_id]
    return max(per) if per else 1


def gi_size(host: VgpuHost, vtype: VgpuTypeSpec) -> int:
    return max(1, gi_slots(host, vtype.gi_profile or 0) // vtype.max_per_gi)


def gi_taken(host: VgpuHost, gi: Any, t: float) -> list[tuple[int, int, int]]:
    """(start slot, size, type id) of the vGPUs active in a GPU instance, packed first-fit."""
    slots = gi_slots(host, gi.profile.id)
    taken: list[tuple[int, int, int]] = []
    members = [i for i in host.active(t) if i.spec.gpu_instance == gi.id]
    for inst in sorted(members, key=lambda i: (i.spec.start, i.id)):
        vtype = host.types[inst.spec.type_id]
        size = gi_size(host, vtype)
        free = gi_free(taken, size, slots)
        if free:
            taken.append((free[0], size, vtype.id))
    return taken


def gi_free(taken: list[tuple[int, int, int]], size: int, slots: int) -> list[int]:
    return [
        p
        for p in range(0, slots - size + 1, size)
        if all(not (p < s + n and s < p + size) for s, n, _ in taken)
    ]


def gi_creatable(host: VgpuHost, gi: Any, vtype: VgpuTypeSpec, t: float) -> list[int]:
    """The placements where one more vGPU of ``vtype`` fits in the GPU instance now."""
    if vtype.gi_profile != gi.profile.id:
        return []
    taken = gi_taken(host, gi, t)
    if not host.gi_heterogeneous and any(type_id != vtype.id for _, _, type_id in taken):
        return []
    return gi_free(taken, gi_size(host, vtype), gi_slots(host, gi.profile.id))


@register_provider
class VgpuCapacityApi(Provider):
    def _type(self, type_id: Any) -> VgpuTypeSpec:
        if isinstance(type_id, int):
            for gpu in self.core.gpus:
                host = host_of(gpu)
                if host is not None and type_id in host.types:
                    return host.types[type_id]
        raise nvml_error(INVALID)

    @nvml_function(target=None)
    def nvmlVgpuInstanceGetRuntimeStateSize(self, vgpuInstance: int) -> Any:
        need_driver(self.core, RUNTIME_STATE_DRIVER)
        if not isinstance(vgpuInstance, int) or vgpuInstance == 0:
            raise nvml_error(INVALID)
        t = self.core.t()
        found = find_instance(self.core, vgpuInstance, t)
        if found is None:
            raise nvml_error(NOT_FOUND)
        host, inst = found
        state = pynvml.nvmlVgpuRuntimeState_v1_t()
        state.version = pynvml.VgpuRuntimeState_v1
        state.size = inst.migration_state(t, host.types[inst.spec.type_id].framebuffer)
        return state

    def _reservation(self, type_id: Any, attr: str) -> int:
        need_driver(self.core, RESERVATION_DRIVER)
        value = getattr(self._type(type_id), attr)
        if value is None:
            raise nvml_error(NOT_SUPPORTED)
        return int(value)

    @nvml_function(target=None)
    def nvmlVgpuTypeGetFbReservation(self, vgpuTypeId: int) -> int:
        return self._reservation(vgpuTypeId, "fb_reservation")

    @nvml_function(target=None)
    def nvmlVgpuTypeGetGspHeapSize(self, vgpuTypeId: int) -> int:
        return self._reservation(vgpuTypeId, "gsp_heap")

    @nvml_function(target=None)
    def nvmlVgpuTypeGetBAR1Info(self, vgpuTypeId: int) -> Any:
        info = pynvml.c_nvmlVgpuTypeBar1Info_v1_t()
        info.version = pynvml.VgpuTypeBar1Info_v1
        info.bar1Size = self._reservation(vgpuTypeId, "bar1") // MB  # NVML says it in MB
        return info

    @nvml_function()
    def nvmlGpuInstanceGetVgpuTypeCreatablePlacements(
        self, gpuInstance: Any, c_vgpu_placements: Any
    ) -> Any:
        need_driver(self.core, GI_DRIVER)
        gi = self.core.gpu_instance(gpuInstance)
        host = host_of(gi.gpu)
        if host is None or gi.gpu.spec.virtualization_mode != 3:
            raise nvml_error(NOT_SUPPORTED)
        info = getattr(c_vgpu_placements, "_obj", c_vgpu_placements)
        if info.version != pynvml.nvmlVgpuCreatablePlacementInfo_v1:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        vtype = host.types.get(info.vgpuTypeId)
        if vtype is None or vtype.gi_profile is None:
            raise nvml_error(INVALID)
        placements = gi_creatable(host, gi, vtype, self.core.t())
        array = (ctypes.c_uint * max(1, len(placements)))(*placements)
        info.count = len(placements)
        info.placementIds = array
        info.placementSize = gi_size(host, vtype)
        return c_vgpu_placements
