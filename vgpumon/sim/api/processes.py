"""Running-process lists (docs/nvml-notes.md §4.11).

pynvml returns these as ``nvmlFriendlyObject``s built from ``c_nvmlProcessInfo_v3_t`` (so callers
see plain attributes, ``usedGpuMemory`` in bytes, MIG ids 0xFFFFFFFF off MIG), and the detail
list as plain ``c_nvmlProcessDetail_v1_t`` structures — including the wrapper's TypeError when
protected memory is not available, which is always the case in MIG mode.
"""

from __future__ import annotations

from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_keys import VIRTUALIZATION_MODES
from vgpumon.sim.state import ProcessState

NO_INSTANCE = 0xFFFFFFFF
COMPUTE = ("compute", "compute+graphics")
GRAPHICS = ("graphics", "compute+graphics")
MPS = ("mps",)
MODES = {
    pynvml.NVML_PROCESS_MODE_COMPUTE: COMPUTE,
    pynvml.NVML_PROCESS_MODE_GRAPHICS: GRAPHICS,
    pynvml.NVML_PROCESS_MODE_MPS: MPS,
}


@register_provider
class ProcessApi(Provider):
    def _select(self, handle: Any, kinds: tuple[str, ...]) -> list[tuple[ProcessState, int, int]]:
        ref = self.core.device(handle)
        gpu = ref.gpu
        if ref.ci is not None and gpu.spec.virtualization_mode == VIRTUALIZATION_MODES["host_vgpu"]:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if ref.ci is None and gpu.mig_enabled:
            self.core.require_privilege()  # the parent's aggregate view needs root
        t = self.core.t()
        out = []
        for p in gpu.running_processes(t):
            if p.spec.kind not in kinds:
                continue
            if ref.ci is not None and (p.spec.gpu_instance, p.spec.compute_instance) != (
                ref.ci.gi.id,
                ref.ci.id,
            ):
                continue
            gi = (
                p.spec.gpu_instance
                if gpu.mig_enabled and p.spec.gpu_instance is not None
                else NO_INSTANCE
            )
            ci = (
                p.spec.compute_instance
                if gpu.mig_enabled and p.spec.compute_instance is not None
                else NO_INSTANCE
            )
            out.append((p, gi, ci))
        return out

    def _friendly(self, handle: Any, kinds: tuple[str, ...]) -> list[Any]:
        t = self.core.t()
        out = []
        for p, gi, ci in self._select(handle, kinds):
            info = pynvml.c_nvmlProcessInfo_v3_t()
            info.pid = p.pid
            info.usedGpuMemory = p.memory(t)
            info.gpuInstanceId = gi
            info.computeInstanceId = ci
            out.append(pynvml.nvmlStructToFriendlyObject(info))
        return out

    @nvml_function()
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._friendly(handle, COMPUTE)

    @nvml_function()
    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._friendly(handle, COMPUTE)

    @nvml_function()
    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._friendly(handle, COMPUTE)

    @nvml_function()
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        return self._friendly(handle, GRAPHICS)

    @nvml_function()
    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._friendly(handle, GRAPHICS)

    @nvml_function()
    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._friendly(handle, GRAPHICS)

    @nvml_function()
    def nvmlDeviceGetMPSComputeRunningProcesses(self, handle: Any) -> list[Any]:
        return self._friendly(handle, MPS)

    @nvml_function()
    def nvmlDeviceGetMPSComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        return self._friendly(handle, MPS)

    @nvml_function()
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(self, handle: Any) -> list[Any]:
        return self._friendly(handle, MPS)

    @nvml_function()
    def nvmlDeviceGetRunningProcessDetailList(
        self, handle: Any, version: int, mode: int
    ) -> list[Any]:
        if version != pynvml.nvmlProcessDetailList_v1:
            self.core.device(handle)
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if mode not in MODES:
            self.core.device(handle)
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.core.device(handle).gpu
        t = self.core.t()
        out = []
        for p, gi, ci in self._select(handle, MODES[mode]):
            detail = pynvml.c_nvmlProcessDetail_v1_t()
            detail.pid = p.pid
            detail.usedGpuMemory = p.memory(t)
            detail.gpuInstanceId = gi
            detail.computeInstanceId = ci
            detail.usedGpuCcProtectedMemory = (
                pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if gpu.mig_enabled else 0
            )
            # The wrapper's own post-processing, bug included (docs/nvml-notes.md §4.11, quirk 9).
            if detail.usedGpuCcProtectedMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                detail.usedGpuCcProtectedMemory = None
            out.append(detail)
        return out
