"""Simulated vGPU host calls: discovery, types, instances, utilization samples, host licenses.

Return shapes and errors follow pynvml 13.615.71 and docs/nvml-notes.md §2.3, §6:

* device-level calls answer NOT_SUPPORTED (3) outside ``host_vgpu`` mode (the core's dispatcher
  enforces it for the names in ``registry.HOST_VGPU_FUNCTIONS``, the rest check it here);
* instance getters answer INVALID_ARGUMENT (2) for id 0 and NOT_FOUND (6) for an id that is not
  active; type getters answer 2 for an unknown type id;
* ``nvmlVgpuInstanceGetVmID`` returns ``(bytes, int)``, every other string is ``str``;
* calls newer than the scenario's driver raise FUNCTION_NOT_FOUND (13), as pynvml does when the
  driver lacks the symbol: the ``…UtilizationInfo`` variants, heterogeneous mode and placements
  before R550, the per-GPU-instance calls before R575;
* the guest-dependent getters (license info, accounting mode, guest PCI id) answer
  DRIVER_NOT_LOADED (9) while the VM's guest driver is not loaded.

Where real pynvml's wrapper is wrong and vgpumon calls the C symbol instead (framebuffer usage read
into 32 bits; accounting PIDs crashing on an empty list), this module returns the true value
through the Python name — the value the raw call gets on a real host (docs/nvml-notes.md §13, item
8). The wrong-wrapper behaviour itself is pinned against real pynvml in
``tests/collect/test_vgpu_traps.py``.

Utilization samples sit on a 200 ms grid from scenario t = 0 and the buffer holds the last 72 (like
the GPU's own ring): a call with ``lastSeenTimeStamp`` T returns every sample newer than T of every
vGPU alive at that sample's time; NOT_FOUND when there is none; ``[]`` when the GPU has no vGPU.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Iterator
from typing import Any

import pynvml

from vgpumon.sim.core import SimCore, driver_text, nvml_error
from vgpumon.sim.licensing import LICENSED, fill_expiry
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scheduler import GI_DRIVER, need_driver, scheduler_of
from vgpumon.sim.state import GpuState, percent
from vgpumon.sim.vgpu import (
    InstanceRuntime,
    VgpuHost,
    VgpuTypeSpec,
    find_instance,
    host_of,
)
from vgpumon.sim.vgpu_capacity_api import gi_creatable

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
HOST_VGPU = 3
# Bit 0 of the vGPU and pGPU virtualization capabilities (NVML_VGPU_VIRTUALIZATION_CAP_MIGRATION,
# NVML_VGPU_PGPU_VIRTUALIZATION_CAP_MIGRATION in nvml.h; pynvml does not name them).
MIGRATION_CAP = 0x1
PLACEMENT_DRIVER = 550  # header 12.4: heterogeneous mode, placements, …UtilizationInfo
VGPU_UTIL_PERIOD = 0.2
VGPU_UTIL_DEPTH = 72
NO_GPU_INSTANCE = 0xFFFFFFFF
NO_PLACEMENT = 0xFFFF
NOT_AVAILABLE = "Not Available"
EMPTY_PCI_ID = "00000000:00:00.0"


def _gpu_of_vgpu(core: SimCore, arguments: dict[str, Any]) -> int | None:
    vgpu = arguments.get("vgpuInstance")
    if not isinstance(vgpu, int):
        return None
    found = find_instance(core, vgpu, core.t())
    return found[0].gpu.index if found is not None else None


def _text(value: Any) -> str:
    """A char-array field as text (pynvml's structures give str, plain ctypes bytes)."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _struct(value: Any) -> Any:
    return value._obj if hasattr(value, "_obj") else value


def sample_times(t: float) -> list[float]:
    """Sample instants in the ring at ``t`` (reaching back before t = 0: the host was up)."""
    newest = math.floor(t / VGPU_UTIL_PERIOD + 1e-9)
    return [k * VGPU_UTIL_PERIOD for k in range(newest - VGPU_UTIL_DEPTH + 1, newest + 1)]


@register_provider
class VgpuHostApi(Provider):
    # ---------------------------------------------------------------- helpers

    def _host(self, handle: Any) -> tuple[GpuState, VgpuHost]:
        gpu = self.core.physical(handle)
        host = host_of(gpu)
        if host is None or gpu.spec.virtualization_mode != HOST_VGPU:
            raise nvml_error(NOT_SUPPORTED)
        return gpu, host

    def _instance(self, vgpu: Any) -> tuple[VgpuHost, InstanceRuntime]:
        if not isinstance(vgpu, int) or vgpu == 0:
            raise nvml_error(INVALID)
        found = find_instance(self.core, vgpu, self.core.t())
        if found is None:
            raise nvml_error(NOT_FOUND)
        return found

    def _type(self, type_id: Any) -> tuple[VgpuHost, VgpuTypeSpec]:
        if isinstance(type_id, int):
            for gpu in self.core.gpus:
                host = host_of(gpu)
                if host is not None and type_id in host.types:
                    return host, host.types[type_id]
        raise nvml_error(INVALID)

    def _with_guest(self, inst: InstanceRuntime) -> None:
        if inst.spec.guest_driver is None:
            raise nvml_error(DRIVER_NOT_LOADED)

    # ---------------------------------------------------------------- device level

    @nvml_function(replaces=True)
    def nvmlDeviceGetHostVgpuMode(self, handle: Any) -> int:
        _gpu, host = self._host(handle)
        return (
            pynvml.NVML_HOST_VGPU_MODE_SRIOV if host.sriov else pynvml.NVML_HOST_VGPU_MODE_NON_SRIOV
        )

    @nvml_function()
    def nvmlDeviceGetVgpuHeterogeneousMode(self, handle: Any) -> int:
        need_driver(self.core, PLACEMENT_DRIVER)
        gpu, host = self._host(handle)
        if gpu.mig_enabled:
            raise nvml_error(NOT_SUPPORTED)
        return int(host.heterogeneous)

    @nvml_function()
    def nvmlDeviceGetActiveVgpus(self, handle: Any) -> list[int]:
        _gpu, host = self._host(handle)
        t = self.core.t()
        host.prune(t)
        return [i.id for i in host.active(t)]

    @nvml_function()
    def nvmlDeviceGetSupportedVgpus(self, handle: Any) -> list[int]:
        _gpu, host = self._host(handle)
        return list(host.types)

    @nvml_function()
    def nvmlDeviceGetCreatableVgpus(self, handle: Any) -> list[int]:
        _gpu, host = self._host(handle)
        return host.creatable(self.core.t())

    @nvml_function()
    def nvmlDeviceGetVgpuCapabilities(self, handle: Any, capability: int) -> int:
        _gpu, host = self._host(handle)
        caps = {
            pynvml.NVML_DEVICE_VGPU_CAP_FRACTIONAL_MULTI_VGPU: 1,
            pynvml.NVML_DEVICE_VGPU_CAP_HETEROGENEOUS_TIMESLICE_PROFILES: 1,
            pynvml.NVML_DEVICE_VGPU_CAP_HETEROGENEOUS_TIMESLICE_SIZES: int(host.heterogeneous),
            pynvml.NVML_DEVICE_VGPU_CAP_MIG_TIMESLICING_SUPPORTED: 0,
            pynvml.NVML_DEVICE_VGPU_CAP_MIG_TIMESLICING_ENABLED: 0,
        }
        if capability not in caps:
            raise nvml_error(NOT_SUPPORTED)
        return caps[capability]

    @nvml_function()
    def nvmlGetVgpuDriverCapabilities(self, capability: int) -> int:
        if capability == pynvml.NVML_VGPU_DRIVER_CAP_HETEROGENEOUS_MULTI_VGPU:
            return 1
        raise nvml_error(NOT_SUPPORTED)

    def _placements(self, handle: Any, vgpuTypeId: Any, version: int, creatable: bool) -> Any:
        need_driver(self.core, PLACEMENT_DRIVER)
        gpu, host = self._host(handle)
        vtype = host.types.get(vgpuTypeId) if isinstance(vgpuTypeId, int) else None
        if vtype is None:
            raise nvml_error(INVALID)
        if gpu.mig_enabled or vtype.gi_profile is not None:
            raise nvml_error(NOT_SUPPORTED)
        if version == 2:
            out: Any = pynvml.c_nvmlVgpuPlacementList_v2_t()
            out.version = pynvml.VgpuPlacementList_v2
        elif version == 1:
            out = pynvml.c_nvmlVgpuPlacementList_v1_t()
            out.version = pynvml.VgpuPlacementList_v1
        else:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        t = self.core.t()
        ids = host.creatable_placements(vtype, t) if creatable else host.supported_placements(vtype)
        ids = ids[: vtype.max_instances]
        array = (ctypes.c_uint * max(1, vtype.max_instances))(*ids)
        out.placementIds = array
        out.count = len(ids)
        out.placementSize = host.placement_size(vtype)
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuTypeCreatablePlacements(
        self, handle: Any, vgpuTypeId: int, version: int = 1
    ) -> Any:
        self.nvmlVgpuTypeGetMaxInstances(handle, vgpuTypeId)  # the wrapper asks this first
        return self._placements(handle, vgpuTypeId, version, creatable=True)

    @nvml_function()
    def nvmlDeviceGetVgpuTypeSupportedPlacements(
        self, handle: Any, vgpuTypeId: int, mode: int = 0, version: int = 1
    ) -> Any:
        self.nvmlVgpuTypeGetMaxInstances(handle, vgpuTypeId)
        return self._placements(handle, vgpuTypeId, version, creatable=False)

    # ---------------------------------------------------------------- GPU instances (MIG-backed)

    def _gi_host(self, gpuInstance: Any) -> tuple[Any, VgpuHost]:
        need_driver(self.core, GI_DRIVER)
        gi = self.core.gpu_instance(gpuInstance)
        host = host_of(gi.gpu)
        if host is None or gi.gpu.spec.virtualization_mode != HOST_VGPU:
            raise nvml_error(NOT_SUPPORTED)
        return gi, host

    @nvml_function()
    def nvmlGpuInstanceGetActiveVgpus(self, gpuInstance: Any, c_vgpu_instance_info: Any) -> Any:
        gi, host = self._gi_host(gpuInstance)
        info = _struct(c_vgpu_instance_info)
        if info.version != pynvml.nvmlActiveVgpuInstanceInfo_v1:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        ids = [i.id for i in host.active(self.core.t()) if i.spec.gpu_instance == gi.id]
        array = (ctypes.c_uint * max(1, len(ids)))(*ids)
        info.vgpuCount = len(ids)
        info.vgpuInstances = array
        return c_vgpu_instance_info

    @nvml_function()
    def nvmlGpuInstanceGetCreatableVgpus(self, gpuInstance: Any, c_vgpus: Any) -> Any:
        gi, host = self._gi_host(gpuInstance)
        info = _struct(c_vgpus)
        if info.version != pynvml.nvmlVgpuTypeIdInfo_v1:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        t = self.core.t()
        ids = [v.id for v in host.types.values() if gi_creatable(host, gi, v, t)]
        array = (ctypes.c_uint * max(1, len(ids)))(*ids)
        info.vgpuCount = len(ids)
        info.vgpuTypeIds = array
        return c_vgpus

    @nvml_function()
    def nvmlGpuInstanceGetVgpuHeterogeneousMode(self, gpuInstance: Any) -> int:
        _gi, host = self._gi_host(gpuInstance)
        if host.gi_heterogeneous is None:
            raise nvml_error(NOT_SUPPORTED)  # GB20x+ only
        return int(host.gi_heterogeneous)

    # ---------------------------------------------------------------- types

    @nvml_function()
    def nvmlVgpuTypeGetName(self, vgpuTypeId: int) -> str:
        return driver_text(self._type(vgpuTypeId)[1].name)

    @nvml_function()
    def nvmlVgpuTypeGetClass(self, vgpuTypeId: int) -> str:
        return self._type(vgpuTypeId)[1].type_class

    @nvml_function()
    def nvmlVgpuTypeGetFramebufferSize(self, vgpuTypeId: int) -> int:
        return self._type(vgpuTypeId)[1].framebuffer

    @nvml_function()
    def nvmlVgpuTypeGetMaxInstances(self, handle: Any, vgpuTypeId: int) -> int:
        _gpu, host = self._host(handle)
        vtype = host.types.get(vgpuTypeId) if isinstance(vgpuTypeId, int) else None
        if vtype is None:
            raise nvml_error(INVALID)
        return vtype.max_instances

    @nvml_function()
    def nvmlVgpuTypeGetMaxInstancesPerVm(self, vgpuTypeId: int) -> int:
        return self._type(vgpuTypeId)[1].max_per_vm

    @nvml_function()
    def nvmlVgpuTypeGetMaxInstancesPerGpuInstance(self, vgpuTypeId: int) -> int:
        need_driver(self.core, GI_DRIVER)
        vtype = self._type(vgpuTypeId)[1]
        if vtype.gi_profile is None:
            raise nvml_error(NOT_SUPPORTED)
        return vtype.max_per_gi

    @nvml_function()
    def nvmlVgpuTypeGetGpuInstanceProfileId(self, vgpuTypeId: int) -> int:
        vtype = self._type(vgpuTypeId)[1]
        return vtype.gi_profile if vtype.gi_profile is not None else NO_GPU_INSTANCE

    @nvml_function()
    def nvmlVgpuTypeGetLicense(self, vgpuTypeId: int) -> str:
        return self._type(vgpuTypeId)[1].license

    @nvml_function()
    def nvmlVgpuTypeGetFrameRateLimit(self, vgpuTypeId: int) -> int:
        vtype = self._type(vgpuTypeId)[1]
        if not vtype.frame_rate_limit:
            raise nvml_error(NOT_SUPPORTED)
        return vtype.frame_rate_limit

    @nvml_function()
    def nvmlVgpuTypeGetNumDisplayHeads(self, vgpuTypeId: int) -> int:
        vtype = self._type(vgpuTypeId)[1]
        return 4 if vtype.type_class == "Quadro" else 1

    @nvml_function()
    def nvmlVgpuTypeGetResolution(self, vgpuTypeId: int) -> tuple[int, int]:
        vtype = self._type(vgpuTypeId)[1]
        return (7680, 4320) if vtype.type_class == "Quadro" else (4096, 2160)

    @nvml_function()
    def nvmlVgpuTypeGetDeviceID(self, vgpuTypeId: int) -> tuple[int, int]:
        host, vtype = self._type(vgpuTypeId)
        return (host.gpu.spec.pci_device_id, (vtype.id << 16) | 0x10DE)

    # ---------------------------------------------------------------- instances

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetVmID(self, vgpuInstance: int) -> tuple[bytes, int]:
        host, inst = self._instance(vgpuInstance)
        kind = (
            pynvml.NVML_VGPU_VM_ID_UUID
            if host.hypervisor == "kvm"
            else pynvml.NVML_VGPU_VM_ID_DOMAIN_ID
        )
        return (
            inst.spec.vm_id.encode(),
            kind,
        )  # bytes: the one vGPU string pynvml leaves undecoded

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetUUID(self, vgpuInstance: int) -> str:
        return self._instance(vgpuInstance)[1].spec.uuid

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetMdevUUID(self, vgpuInstance: int) -> str:
        host, inst = self._instance(vgpuInstance)
        if host.hypervisor != "kvm":
            raise nvml_error(NOT_SUPPORTED)
        return inst.spec.mdev_uuid

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetVmDriverVersion(self, vgpuInstance: int) -> str:
        inst = self._instance(vgpuInstance)[1]
        return inst.spec.guest_driver or NOT_AVAILABLE

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetFbUsage(self, vgpuInstance: int) -> int:
        host, inst = self._instance(vgpuInstance)
        # The true 64-bit value (what vgpumon's raw call reads), not pynvml's value mod 2**32.
        return inst.framebuffer_used(self.core.t(), host.types[inst.spec.type_id].framebuffer)

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetType(self, vgpuInstance: int) -> int:
        return self._instance(vgpuInstance)[1].spec.type_id

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetFrameRateLimit(self, vgpuInstance: int) -> int:
        host, inst = self._instance(vgpuInstance)
        limit = inst.spec.frame_rate_limit
        if limit is None:
            limit = host.types[inst.spec.type_id].frame_rate_limit
        if not limit:
            raise nvml_error(NOT_SUPPORTED)
        return limit

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetEccMode(self, vgpuInstance: int) -> int:
        inst = self._instance(vgpuInstance)[1]
        if inst.spec.ecc is None:
            raise nvml_error(NOT_SUPPORTED)
        return inst.spec.ecc

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetGpuInstanceId(self, vgpuInstance: int) -> int:
        gi = self._instance(vgpuInstance)[1].spec.gpu_instance
        return gi if gi is not None else NO_GPU_INSTANCE

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetPlacementId(self, vgpuInstance: int) -> int:
        need_driver(self.core, PLACEMENT_DRIVER)
        host, inst = self._instance(vgpuInstance)
        p = inst.spec.placement
        return p if host.heterogeneous and p is not None else NO_PLACEMENT

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetMetadata(self, vgpuInstance: int) -> Any:
        host, inst = self._instance(vgpuInstance)
        out = pynvml.c_nvmlVgpuMetadata_t()
        out.version, out.revision = 1, 1
        out.guestInfoState = 0 if inst.spec.guest_driver is None else 1
        out.guestDriverVersion = (inst.spec.guest_driver or "").encode()
        out.hostDriverVersion = self.core.scenario.driver.version.encode()
        migration = host.migration if inst.spec.migration is None else inst.spec.migration
        out.vgpuVirtualizationCaps = MIGRATION_CAP if migration else 0
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuMetadata(self, handle: Any) -> Any:
        _gpu, host = self._host(handle)
        out = pynvml.c_nvmlVgpuPgpuMetadata_t()
        out.version, out.revision = 1, 1
        out.hostDriverVersion = self.core.scenario.driver.version.encode()
        out.pgpuVirtualizationCaps = MIGRATION_CAP if host.migration else 0
        return out

    @nvml_function(target=None)
    def nvmlGetVgpuCompatibility(self, vgpuMetadata: Any, pgpuMetadata: Any) -> Any:
        """Whether a VM with this vGPU can move to a GPU with this pGPU metadata, and how.

        The simulator's model of the driver's answer: a GPU or a vGPU without the migration
        capability allows none (limit GPU / OTHER); a guest without a loaded driver, or with a
        driver of another branch than the host's, allows only a cold move (limit GUEST_DRIVER);
        otherwise every kind, live included.
        """
        vgpu, pgpu = _struct(vgpuMetadata), _struct(pgpuMetadata)
        if not isinstance(vgpu, pynvml.c_nvmlVgpuMetadata_t) or not isinstance(
            pgpu, pynvml.c_nvmlVgpuPgpuMetadata_t
        ):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        out = pynvml.c_nvmlVgpuPgpuCompatibility_t()
        guest = _text(vgpu.guestDriverVersion).split(".", 1)[0]
        host = _text(pgpu.hostDriverVersion).split(".", 1)[0]
        if not pgpu.pgpuVirtualizationCaps & MIGRATION_CAP:
            compat, limit = 0, pynvml.NVML_VGPU_COMPATIBILITY_LIMIT_GPU
        elif not vgpu.vgpuVirtualizationCaps & MIGRATION_CAP:
            compat, limit = 0, pynvml.NVML_VGPU_COMPATIBILITY_LIMIT_OTHER
        elif not vgpu.guestInfoState or guest != host:
            compat = pynvml.NVML_VGPU_VM_COMPATIBILITY_COLD
            limit = pynvml.NVML_VGPU_COMPATIBILITY_LIMIT_GUEST_DRIVER
        else:
            compat = (
                pynvml.NVML_VGPU_VM_COMPATIBILITY_COLD
                | pynvml.NVML_VGPU_VM_COMPATIBILITY_HIBERNATE
                | pynvml.NVML_VGPU_VM_COMPATIBILITY_SLEEP
                | pynvml.NVML_VGPU_VM_COMPATIBILITY_LIVE
            )
            limit = pynvml.NVML_VGPU_COMPATIBILITY_LIMIT_NONE
        out.vgpuVmCompatibility, out.compatibilityLimitCode = compat, limit
        return out

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetGpuPciId(self, vgpuInstance: int) -> str:
        inst = self._instance(vgpuInstance)[1]
        if inst.spec.guest_driver is None:
            return EMPTY_PCI_ID
        return "00000000:02:00.0"

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetEncoderCapacity(self, vgpuInstance: int) -> int:
        inst = self._instance(vgpuInstance)[1]
        return percent(inst.spec.encoder.get("capacity", 1.0))

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetEncoderStats(self, vgpuInstance: int) -> tuple[int, int, int]:
        enc = self._instance(vgpuInstance)[1].spec.encoder
        n = enc.get("sessions", 0)
        if not n:
            return (0, 0, 0)
        return (n, enc.get("fps", 30), round(enc.get("latency", 2e-3) * 1e6))

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetEncoderSessions(self, vgpuInstance: int) -> list[Any]:
        inst = self._instance(vgpuInstance)[1]
        enc = inst.spec.encoder
        out = []
        for k in range(enc.get("sessions", 0)):
            s = pynvml.c_nvmlEncoderSession_t()
            s.sessionId, s.pid, s.vgpuInstance = k + 1, 1000 + k, inst.id
            s.codecType = pynvml.NVML_ENCODER_QUERY_H264
            s.hResolution, s.vResolution = 1920, 1080
            s.averageFps = enc.get("fps", 30)
            s.encodeLatency = round(enc.get("latency", 2e-3) * 1e6)
            out.append(s)
        return out

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetFBCStats(self, vgpuInstance: int) -> Any:
        fbc = self._instance(vgpuInstance)[1].spec.fbc
        out = pynvml.c_nvmlFBCStats_t()
        n = fbc.get("sessions", 0)
        out.sessionsCount = n
        if n:
            out.averageFPS = fbc.get("fps", 60)
            out.averageLatency = round(fbc.get("latency", 5e-3) * 1e6)
        return out

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetFBCSessions(self, vgpuInstance: int) -> list[Any]:
        inst = self._instance(vgpuInstance)[1]
        fbc = inst.spec.fbc
        out = []
        for k in range(fbc.get("sessions", 0)):
            s = pynvml.c_nvmlFBCSession_t()
            s.sessionId, s.pid, s.vgpuInstance = k + 1, 2000 + k, inst.id
            s.sessionType = pynvml.NVML_FBC_SESSION_TYPE_TOSYS
            s.hMaxResolution, s.vMaxResolution = 3840, 2160
            s.hResolution, s.vResolution = 1920, 1080
            s.averageFPS = fbc.get("fps", 60)
            s.averageLatency = round(fbc.get("latency", 5e-3) * 1e6)
            out.append(s)
        return out

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetAccountingMode(self, vgpuInstance: int) -> int:
        inst = self._instance(vgpuInstance)[1]
        self._with_guest(inst)
        return int(inst.spec.accounting)

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetAccountingPids(self, vgpuInstance: int) -> tuple[Any, Any]:
        inst = self._instance(vgpuInstance)[1]
        if not inst.spec.accounting:
            raise nvml_error(NOT_SUPPORTED)
        pids = inst.spec.accounting_pids
        # pynvml's shape, (c_uint count, c_uint array); for an empty list the true (empty) answer
        # instead of the wrapper's UnboundLocalError.
        return (ctypes.c_uint(len(pids)), (ctypes.c_uint * len(pids))(*pids))

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetAccountingStats(self, vgpuInstance: int, pid: int) -> Any:
        inst = self._instance(vgpuInstance)[1]
        if not inst.spec.accounting:
            raise nvml_error(NOT_SUPPORTED)
        if pid not in inst.spec.accounting_pids:
            raise nvml_error(NOT_FOUND)
        t = self.core.t()
        out = pynvml.c_nvmlAccountingStats_t()
        out.gpuUtilization = percent(inst.demand(t))
        out.memoryUtilization = percent(inst.load["memory"](t))
        out.time = int(max(0.0, t - inst.spec.start) * 1000)
        out.startTime = self.core.timestamp_us(inst.spec.start)
        out.isRunning = 1
        return out

    # ---------------------------------------------------------------- host licenses

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetLicenseInfo_v2(self, vgpuInstance: int) -> Any:
        inst = self._instance(vgpuInstance)[1]
        self._with_guest(inst)
        reading = inst.spec.license.at(self.core.t())
        out = pynvml.c_nvmlVgpuLicenseInfo_t()
        out.isLicensed = 1 if reading.licensed else 0
        out.currentState = reading.state
        fill_expiry(out.licenseExpiry, reading, self.core.epoch)
        return out

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetLicenseInfo(self, vgpuInstance: int) -> Any:
        return self.nvmlVgpuInstanceGetLicenseInfo_v2(vgpuInstance)

    @nvml_function(target=_gpu_of_vgpu)
    def nvmlVgpuInstanceGetLicenseStatus(self, vgpuInstance: int) -> int:
        inst = self._instance(vgpuInstance)[1]
        return int(inst.spec.license.at(self.core.t()).state == LICENSED)

    # ---------------------------------------------------------------- utilization samples

    def _util_samples(
        self, handle: Any, timeStamp: int
    ) -> Iterator[tuple[int, InstanceRuntime, float]]:
        gpu, host = self._host(handle)
        sched = scheduler_of(gpu)
        t = self.core.t()
        if not host.active(t):
            return  # no vGPU: the sizing call answers SUCCESS, the wrapper returns []
        found = False
        known = host.known(t)
        for s in sample_times(t):
            stamp = self.core.timestamp_us(s)
            if stamp <= timeStamp:
                continue
            shares = sched.shares(s) if sched is not None else {}
            for inst in known:
                if inst.spec.alive(s):
                    found = True
                    share = shares.get(inst.id)
                    yield stamp, inst, share.used if share is not None else inst.demand(s)
        if not found:
            raise nvml_error(NOT_FOUND)

    @nvml_function()
    def nvmlDeviceGetVgpuUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        out = []
        for stamp, inst, used in self._util_samples(handle, timeStamp):
            s = pynvml.c_nvmlVgpuInstanceUtilizationSample_t()
            s.vgpuInstance, s.timeStamp = inst.id, stamp
            self._fill_util(s, inst, used, self.core.scenario_time(stamp))
            out.append(s)
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuInstancesUtilizationInfo(self, handle: Any, timeStamp: int) -> list[Any]:
        need_driver(self.core, PLACEMENT_DRIVER)
        out = []
        for stamp, inst, used in self._util_samples(handle, timeStamp):
            s = pynvml.c_nvmlVgpuInstanceUtilizationInfo_v1_t()
            s.vgpuInstance, s.timeStamp = inst.id, stamp
            self._fill_util(s, inst, used, self.core.scenario_time(stamp))
            out.append(s)
        return out

    @staticmethod
    def _fill_util(s: Any, inst: InstanceRuntime, used: float, at: float) -> None:
        # NVML reports NVML_VALUE_TYPE_UNSIGNED_INT: only uiVal is written, the rest stays zero.
        s.smUtil.uiVal = percent(used)
        s.memUtil.uiVal = percent(inst.load["memory"](at))
        s.encUtil.uiVal = percent(inst.load["encoder"](at))
        s.decUtil.uiVal = percent(inst.load["decoder"](at))

    def _process_samples(
        self, handle: Any, timeStamp: int
    ) -> list[tuple[int, InstanceRuntime, Any, dict[str, int]]]:
        """The latest sample of each guest process with non-zero use, newer than the cursor."""
        _gpu, host = self._host(handle)
        t = self.core.t()
        active = host.active(t)
        if not active:
            return []
        newest = sample_times(t)[-1]
        stamp = self.core.timestamp_us(newest)
        out = []
        if stamp > timeStamp:
            for inst in active:
                if not inst.spec.alive(newest):
                    continue
                for proc, loads in inst.processes:
                    util = {k: percent(f(newest)) for k, f in loads.items()}
                    if any(util.values()):
                        out.append((stamp, inst, proc, util))
        if not out:
            raise nvml_error(NOT_FOUND)
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        out = []
        for stamp, inst, proc, util in self._process_samples(handle, timeStamp):
            s = pynvml.c_nvmlVgpuProcessUtilizationSample_t()
            s.vgpuInstance, s.pid, s.processName, s.timeStamp = inst.id, proc.pid, proc.name, stamp
            s.smUtil, s.memUtil = util["sm"], util["memory"]
            s.encUtil, s.decUtil = util["encoder"], util["decoder"]
            out.append(s)
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuProcessesUtilizationInfo(self, handle: Any, timeStamp: int) -> list[Any]:
        need_driver(self.core, PLACEMENT_DRIVER)
        out = []
        for stamp, inst, proc, util in self._process_samples(handle, timeStamp):
            s = pynvml.c_nvmlVgpuProcessUtilizationInfo_v1_t()
            s.vgpuInstance, s.pid, s.processName, s.timeStamp = inst.id, proc.pid, proc.name, stamp
            s.smUtil, s.memUtil = util["sm"], util["memory"]
            s.encUtil, s.decUtil = util["encoder"], util["decoder"]
            out.append(s)
        return out
