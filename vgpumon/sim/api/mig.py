"""MIG: modes, MIG device handles, GPU/compute instance enumeration (docs/nvml-notes.md §8).

Error codes follow the observed R580 behaviour: ``GetMigDeviceHandleByIndex`` answers NOT_FOUND
(6) for holes and with MIG disabled; the MIG-handle-only calls answer INVALID_ARGUMENT (2) on a full
GPU;
``GetAttributes`` answers NOT_SUPPORTED (3) on a full GPU; profile queries work with MIG disabled.
Enumeration calls write into the caller's ctypes array and ``byref`` count and return
``NVML_SUCCESS``, like the pynvml wrappers; the GI/CI tree needs root (``privileged: false`` → 4).
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable
from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_build import ci_name, ci_placements
from vgpumon.sim.scenario_keys import CI_PROFILE_BY_SLICES, MAX_MIG_DEVICES
from vgpumon.sim.scenario_specs import MigProfile
from vgpumon.sim.state import GpuInstanceState, GpuState

INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
# CI profile index -> slices, for the indexes a GPU instance of the standard layout offers.
CI_SLICES_BY_PROFILE = {v: k for k, v in CI_PROFILE_BY_SLICES.items() if k in (1, 2, 3, 4, 7)}


def set_count(ref: Any, value: int) -> int:
    """Write ``value`` through ``byref(c_uint)``, ``pointer(c_uint)`` or a ``c_uint``."""
    target: Any
    if hasattr(ref, "_obj"):
        target = ref._obj
    elif isinstance(ref, ctypes._Pointer):
        target = ref.contents
    else:
        target = ref
    if not isinstance(target, ctypes.c_uint):
        raise nvml_error(INVALID)
    old = int(target.value)
    target.value = value
    return old


def fill(array: Any, items: list[Any]) -> None:
    """Store ``items`` in a caller-allocated ctypes array (INSUFFICIENT_SIZE if it is too small)."""
    if isinstance(array, ctypes.Array):
        if len(array) < len(items):
            raise nvml_error(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        element = array._type_
    elif isinstance(array, ctypes._Pointer):
        element = array._type_
    else:
        raise nvml_error(INVALID)
    for i, item in enumerate(items):
        if isinstance(item, ctypes._Pointer) and issubclass(element, ctypes._Pointer):
            array[i] = ctypes.cast(item, element)
        else:
            array[i] = item


def answer_array(array: Any, count_ref: Any, items: list[Any], *, null_sizes: bool = False) -> int:
    """NVML's caller-allocated-array answer: ``items`` into ``array``, their number into the count.

    ``null_sizes``: a None array only asks for the count (the ``…PossiblePlacements`` calls);
    otherwise a None array with something to write is INVALID_ARGUMENT, as in the enumerations.
    """
    write = array is not None if null_sizes else bool(items)
    if write:
        fill(array, items)
    set_count(count_ref, len(items))
    return pynvml.NVML_SUCCESS


def placements(struct_type: Any, spans: Iterable[tuple[int, int]]) -> list[Any]:
    """GPU- or compute-instance placement structs from (start, size) pairs."""
    items = []
    for start, size in spans:
        placement = struct_type()
        placement.start, placement.size = start, size
        items.append(placement)
    return items


def _gi_profile_v2(profile: MigProfile) -> Any:
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 0  # R580 overwrote the version with 0 on output (docs/nvml-notes.md §1.7)
    info.name = f"MIG {profile.name}"
    _fill_gi_profile(info, profile)
    return info


def _fill_gi_profile(info: Any, profile: MigProfile) -> None:
    info.id = profile.id
    info.isP2pSupported = 0
    info.sliceCount = profile.slices
    info.instanceCount = profile.instances
    info.multiprocessorCount = profile.sm_count
    info.copyEngineCount = profile.copy_engines
    info.decoderCount = profile.decoders
    info.encoderCount = profile.encoders
    info.jpegCount = profile.jpeg
    info.ofaCount = profile.ofa
    info.memorySizeMB = profile.memory_mb


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


@register_provider
class MigApi(Provider):
    # ---------------------------------------------------------------- helpers

    def _parent(self, device: Any, mig_error: int = INVALID) -> GpuState:
        gpu = self.core.physical(device, mig_error)
        if not gpu.spec.mig_capable:
            raise nvml_error(NOT_SUPPORTED)
        return gpu

    def _profile_by_id(self, gpu: GpuState, profile_id: int) -> MigProfile:
        profile = next((p for p in gpu.spec.mig_profiles if p.id == profile_id), None)
        if profile is None:
            raise nvml_error(INVALID)
        return profile

    def _taken(self, gpu: GpuState) -> list[tuple[int, int]]:
        return [
            (gi.placement, next(p[1] for p in gi.profile.placements if p[0] == gi.placement))
            for gi in gpu.gis
        ]

    # ---------------------------------------------------------------- mode and MIG devices

    @nvml_function()
    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        gpu = self._parent(device, NOT_SUPPORTED)
        return [int(gpu.spec.mig_enabled), int(gpu.spec.mig_pending)]

    @nvml_function()
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        gpu = self.core.physical(device, INVALID)
        return MAX_MIG_DEVICES if gpu.mig_enabled else 0

    @nvml_function()
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        gpu = self._parent(device)
        if not isinstance(index, int) or index < 0:
            raise nvml_error(INVALID)
        ci = gpu.mig_devices.get(index) if gpu.mig_enabled else None
        if ci is None:
            raise nvml_error(NOT_FOUND)
        return self.core.device_handle(gpu, ci)

    @nvml_function()
    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> Any:
        return ctypes.c_uint(1 if self.core.device(device).is_mig else 0)

    def _mig(self, device: Any) -> Any:
        ref = self.core.device(device)
        if ref.ci is None:
            raise nvml_error(INVALID)
        return ref

    @nvml_function()
    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return int(self._mig(device).ci.gi.id)

    @nvml_function()
    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return int(self._mig(device).ci.id)

    @nvml_function()
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        return self.core.device_handle(self._mig(migDevice).gpu)

    @nvml_function()
    def nvmlDeviceGetAttributes_v2(self, device: Any) -> Any:
        ref = self.core.device(device)
        if ref.ci is None:
            raise nvml_error(NOT_SUPPORTED)
        gi = ref.ci.gi.profile
        attrs = pynvml.c_nvmlDeviceAttributes()
        attrs.multiprocessorCount = ref.ci.sm_count
        attrs.sharedCopyEngineCount = gi.copy_engines
        attrs.sharedDecoderCount = gi.decoders
        attrs.sharedEncoderCount = gi.encoders
        attrs.sharedJpegCount = gi.jpeg
        attrs.sharedOfaCount = gi.ofa
        attrs.gpuInstanceSliceCount = gi.slices
        attrs.computeInstanceSliceCount = ref.ci.slices
        attrs.memorySizeMB = gi.memory_mb
        return attrs

    @nvml_function()
    def nvmlDeviceGetAttributes(self, device: Any) -> Any:
        return self.nvmlDeviceGetAttributes_v2(device)

    # ---------------------------------------------------------------- GPU instance profiles

    @nvml_function()
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        if version not in (1, 2):
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # raised by the wrapper itself
        gpu = self._parent(device)
        self.core.require_privilege()
        found = next((p for p in gpu.spec.mig_profiles if p.index == profile), None)
        if found is None:
            known = (
                isinstance(profile, int)
                and 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX
            )
            raise nvml_error(NOT_SUPPORTED if known else INVALID)
        if version == 1:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
            _fill_gi_profile(info, found)
            return info
        return _gi_profile_v2(found)

    @nvml_function()
    def nvmlDeviceGetGpuInstanceProfileInfoV(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        return self.nvmlDeviceGetGpuInstanceProfileInfo(device, profile, version)

    @nvml_function()
    def nvmlDeviceGetGpuInstanceProfileInfoById(self, device: Any, profileId: int) -> Any:
        gpu = self._parent(device)
        self.core.require_privilege()
        return _gi_profile_v2(self._profile_by_id(gpu, profileId))

    @nvml_function()
    def nvmlDeviceGetGpuInstanceProfileInfoByIdV(self, device: Any, profileId: int) -> Any:
        return self.nvmlDeviceGetGpuInstanceProfileInfoById(device, profileId)

    @nvml_function()
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profileId: int) -> int:
        gpu = self._parent(device)
        self.core.require_privilege()
        profile = self._profile_by_id(gpu, profileId)
        taken = self._taken(gpu)
        slices_left = 7 - sum(gi.profile.slices for gi in gpu.gis)
        room = profile.instances - sum(1 for gi in gpu.gis if gi.profile.id == profile.id)
        count = 0
        for placement in profile.placements:
            if count >= room or slices_left < profile.slices:
                break
            if not any(_overlaps(placement, t) for t in taken):
                taken.append(placement)
                slices_left -= profile.slices
                count += 1
        return count

    @nvml_function()
    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        gpu = self._parent(device)
        self.core.require_privilege()
        profile = self._profile_by_id(gpu, profileId)
        items = placements(pynvml.c_nvmlGpuInstancePlacement_t, profile.placements)
        return answer_array(placementsRef, countRef, items, null_sizes=True)

    # ---------------------------------------------------------------- GPU instances

    @nvml_function()
    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        gpu = self._parent(device)
        self.core.require_privilege()
        profile = self._profile_by_id(gpu, profileId)
        handles = [
            self.core.gpu_instance_handle(gi) for gi in gpu.gis if gi.profile.id == profile.id
        ]
        return answer_array(gpuInstancesRef, countRef, handles)

    @nvml_function()
    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        gpu = self._parent(device)
        self.core.require_privilege()
        gi = gpu.gi_by_id.get(gpuInstanceId)
        if gi is None:
            raise nvml_error(NOT_FOUND)
        return self.core.gpu_instance_handle(gi)

    @nvml_function()
    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        gi = self.core.gpu_instance(gpuInstance)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = self.core.device_handle(gi.gpu)
        info.id = gi.id
        info.profileId = gi.profile.id
        info.placement.start = gi.placement
        info.placement.size = next(p[1] for p in gi.profile.placements if p[0] == gi.placement)
        return info

    # ---------------------------------------------------------------- compute instances

    def _ci_slices(self, gi: GpuInstanceState, profile: int) -> int:
        if (
            not isinstance(profile, int)
            or not 0 <= profile < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
        ):
            raise nvml_error(INVALID)
        slices = CI_SLICES_BY_PROFILE.get(profile)
        if slices is None or not ci_placements(gi.profile.slices, slices):
            raise nvml_error(NOT_SUPPORTED)
        return slices

    @nvml_function()
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        if version not in (1, 2):
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        gi = self.core.gpu_instance(device)  # pynvml names it "device"; it is a GPU instance handle
        if engProfile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise nvml_error(NOT_SUPPORTED)
        slices = self._ci_slices(gi, profile)
        p = gi.profile
        info: Any = (
            pynvml.c_nvmlComputeInstanceProfileInfo_t()
            if version == 1
            else pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
        )
        if version == 2:
            info.version = 0
            info.name = f"MIG {ci_name(p, slices)}"
        info.id = profile
        info.sliceCount = slices
        info.instanceCount = len(ci_placements(p.slices, slices))
        info.multiprocessorCount = (
            p.sm_count if slices == p.slices else p.sm_count * slices // p.slices
        )
        info.sharedCopyEngineCount = p.copy_engines
        info.sharedDecoderCount = p.decoders
        info.sharedEncoderCount = p.encoders
        info.sharedJpegCount = p.jpeg
        info.sharedOfaCount = p.ofa
        return info

    @nvml_function()
    def nvmlGpuInstanceGetComputeInstanceProfileInfoV(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        return self.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            device, profile, engProfile, version
        )

    @nvml_function()
    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gpuInstance: Any, profileId: int
    ) -> int:
        gi = self.core.gpu_instance(gpuInstance)
        self.core.require_privilege()
        slices = self._ci_slices(gi, profileId)
        taken = [(ci.placement, ci.slices) for ci in gi.cis]
        count = 0
        for start in ci_placements(gi.profile.slices, slices):
            if not any(_overlaps((start, slices), t) for t in taken):
                taken.append((start, slices))
                count += 1
        return count

    @nvml_function()
    def nvmlGpuInstanceGetComputeInstancePossiblePlacements(
        self, gpuInstance: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        gi = self.core.gpu_instance(gpuInstance)
        self.core.require_privilege()
        slices = self._ci_slices(gi, profileId)
        spans = ((start, slices) for start in ci_placements(gi.profile.slices, slices))
        items = placements(pynvml.c_nvmlComputeInstancePlacement_t, spans)
        return answer_array(placementsRef, countRef, items, null_sizes=True)

    @nvml_function()
    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        gi = self.core.gpu_instance(gpuInstance)
        self.core.require_privilege()
        slices = self._ci_slices(gi, profileId)
        handles = [self.core.compute_instance_handle(ci) for ci in gi.cis if ci.slices == slices]
        return answer_array(computeInstancesRef, countRef, handles)

    @nvml_function()
    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpuInstance: Any, computeInstanceId: int
    ) -> Any:
        gi = self.core.gpu_instance(gpuInstance)
        self.core.require_privilege()
        ci = next((c for c in gi.cis if c.id == computeInstanceId), None)
        if ci is None:
            raise nvml_error(NOT_FOUND)
        return self.core.compute_instance_handle(ci)

    @nvml_function()
    def nvmlComputeInstanceGetInfo_v2(self, computeInstance: Any) -> Any:
        ci = self.core.compute_instance(computeInstance)
        info = pynvml.c_nvmlComputeInstanceInfo_t()
        info.device = self.core.device_handle(ci.gi.gpu)
        info.gpuInstance = self.core.gpu_instance_handle(ci.gi)
        info.id = ci.id
        info.profileId = CI_PROFILE_BY_SLICES[ci.slices]
        info.placement.start = ci.placement
        info.placement.size = ci.slices
        return info

    @nvml_function()
    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        return self.nvmlComputeInstanceGetInfo_v2(computeInstance)
