"""Init, shutdown, driver/system queries and handle lookup (docs/nvml-notes.md §1.1, §3)."""

from __future__ import annotations

from typing import Any

import pynvml

from vgpumon.sim.core import SimCore, driver_text, nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_build import normalized_bus_id

# The driver's nvmlErrorString texts (R580), which differ from pynvml's table in a few places.
DRIVER_ERROR_STRINGS = {
    0: "Success",
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires reset",
    17: "GPU access blocked by the operating system",
    18: "Driver/library version mismatch",
    19: "In use by another client",
    20: "Insufficient Memory",
    21: "No data",
    22: "vGPU ECC not supported",
    23: "Insufficient Resources",
    24: "Invalid Frequency",
    25: "Argument version mismatch",
    26: "Requested functionality has been deprecated",
    27: "System is not in ready state",
    28: "No supported GPUs were found",
    29: "Resource not in correct state to perform requested operation",
    30: "Reset type is not supported for given device",
}


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _gpu_of_index(core: SimCore, arguments: dict[str, Any]) -> int | None:
    index = arguments.get("index")
    return index if isinstance(index, int) and 0 <= index < len(core.gpus) else None


def _gpu_of_uuid(core: SimCore, arguments: dict[str, Any]) -> int | None:
    uuid = _text(arguments.get("uuid"))
    for gpu in core.gpus:
        if uuid == gpu.spec.uuid or any(uuid == ci.uuid for ci in gpu.mig_devices.values()):
            return gpu.index
    return None


def _gpu_of_bus_id(core: SimCore, arguments: dict[str, Any]) -> int | None:
    try:
        bus_id = normalized_bus_id(_text(arguments.get("pciBusId")) or "")
    except ValueError:
        return None
    return next((g.index for g in core.gpus if g.spec.pci_bus_id == bus_id), None)


@register_provider
class SystemApi(Provider):
    @nvml_function()
    def nvmlInit(self) -> None:
        self.core.init()

    @nvml_function()
    def nvmlInitWithFlags(self, flags: int) -> None:
        self.core.init()

    @nvml_function()
    def nvmlShutdown(self) -> None:
        self.core.shutdown()

    @nvml_function()
    def nvmlErrorString(self, result: int) -> str:
        return DRIVER_ERROR_STRINGS.get(result, "Unknown Error")

    @nvml_function()
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.core.scenario.driver.version

    @nvml_function()
    def nvmlSystemGetNVMLVersion(self) -> str:
        return self.core.scenario.driver.nvml_version

    @nvml_function()
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.core.scenario.driver.cuda_driver_version

    @nvml_function()
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.core.scenario.driver.cuda_driver_version

    @nvml_function()
    def nvmlSystemGetDriverBranch(self) -> Any:
        info = pynvml.c_nvmlSystemDriverBranchInfo_v1_t(0)
        info.version = pynvml.SystemDriverBranchInfo_v1
        info.branch = self.core.scenario.driver.branch
        return info

    @nvml_function()
    def nvmlSystemGetProcessName(self, pid: int) -> str:
        t = self.core.t()
        for gpu in self.core.gpus:
            for p in gpu.processes:
                if p.pid == pid and p.running(t):
                    return driver_text(p.spec.name)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    @nvml_function()
    def nvmlDeviceGetCount(self) -> int:
        return len(self.core.gpus)

    @nvml_function(target=_gpu_of_index)
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not isinstance(index, int) or not 0 <= index < len(self.core.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.core.device_handle(self.core.gpus[index])

    @nvml_function(target=_gpu_of_uuid)
    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        text = _text(uuid)
        for gpu in self.core.gpus:
            if text == gpu.spec.uuid:
                return self.core.device_handle(gpu)
            for ci in gpu.mig_devices.values():
                if text == ci.uuid:
                    return self.core.device_handle(gpu, ci)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    @nvml_function(target=_gpu_of_bus_id)
    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str | bytes) -> Any:
        text = _text(pciBusId)
        try:
            bus_id = normalized_bus_id(text or "")
        except ValueError:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
        for gpu in self.core.gpus:
            if gpu.spec.pci_bus_id == bus_id:
                return self.core.device_handle(gpu)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)

    @nvml_function()
    def nvmlDeviceGetHandleBySerial(self, serial: str | bytes) -> Any:
        text = _text(serial)
        for gpu in self.core.gpus:
            if text == gpu.spec.serial:
                return self.core.device_handle(gpu)
        raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
