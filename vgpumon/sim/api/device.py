"""Physical-GPU queries: identity, memory, utilization, thermals, power, clocks, PCIe, ECC, fans.

Return shapes follow the pynvml wrappers exactly (docs/nvml-notes.md §1.4, §4): ints for scalars,
``list`` for ``[current, pending]`` pairs and ``[util, period]``, ``tuple`` for compute capability
and remapped rows, pynvml's own structure classes for structs. On a MIG device handle the board
telemetry (power, temperature, clocks, fans, ECC, PCIe, serial, PCI info) is NOT_SUPPORTED, as the
reference advises; memory and identity are per instance.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from vgpumon.sim.core import driver_text, nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_keys import ARCHITECTURES, VIRTUALIZATION_MODES
from vgpumon.sim.scenario_specs import GpuSpec
from vgpumon.sim.state import GpuState, percent

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
CLOCK_KINDS = {
    pynvml.NVML_CLOCK_GRAPHICS: "graphics",
    pynvml.NVML_CLOCK_SM: "sm",
    pynvml.NVML_CLOCK_MEM: "memory",
    pynvml.NVML_CLOCK_VIDEO: "video",
}
ENGINE_PERIOD_US = 100_000  # encoder/decoder utilization sampling period, as real drivers report
GUEST = VIRTUALIZATION_MODES["vgpu"]


def _bus_parts(spec: GpuSpec) -> tuple[int, int, int]:
    domain, rest = spec.pci_bus_id.split(":", 1)
    bus, device_fn = rest.split(":")
    return int(domain, 16), int(bus, 16), int(device_fn.split(".")[0], 16)


def _struct_arg(value: Any) -> Any:
    """The structure behind a ``byref(...)``/``pointer(...)`` argument, or the structure itself."""
    if hasattr(value, "_obj"):
        return value._obj
    if isinstance(value, ctypes._Pointer):
        return value.contents
    return value


@register_provider
class DeviceApi(Provider):
    # ---------------------------------------------------------------- identity

    @nvml_function()
    def nvmlDeviceGetName(self, handle: Any) -> str:
        ref = self.core.device(handle)
        if ref.ci is not None:
            return driver_text(f"{ref.gpu.spec.name} MIG {ref.ci.profile_name}")
        return driver_text(ref.gpu.spec.name)

    @nvml_function()
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        ref = self.core.device(handle)
        return ref.ci.uuid if ref.ci is not None else ref.gpu.spec.uuid

    @nvml_function()
    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        return self.core.physical(handle).spec.serial

    @nvml_function()
    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        ref = self.core.device(handle)
        return ref.ci.mig_index if ref.ci is not None else ref.gpu.index

    @nvml_function()
    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self.core.physical(handle).spec.minor_number

    @nvml_function()
    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any:
        spec = self.core.physical(handle).spec
        domain, bus, device = _bus_parts(spec)
        info = pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{device:02X}.0"
        info.domain = domain
        info.bus = bus
        info.device = device
        info.pciDeviceId = spec.pci_device_id
        info.pciSubSystemId = spec.pci_subsystem_id
        info.busId = spec.pci_bus_id
        return info

    @nvml_function()
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    @nvml_function()
    def nvmlDeviceGetPciInfoExt(self, handle: Any, c_info: Any) -> None:
        spec = self.core.physical(handle).spec
        info = _struct_arg(c_info)
        if not isinstance(info, pynvml.nvmlPciInfoExt_v1_t):
            raise nvml_error(INVALID)
        if info.version != pynvml.nvmlPciInfoExt_v1:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        domain, bus, device = _bus_parts(spec)
        info.domain, info.bus, info.device = domain, bus, device
        info.pciDeviceId = spec.pci_device_id
        info.pciSubSystemId = spec.pci_subsystem_id
        info.baseClass = 3  # display controller
        info.subClass = 2  # 3D controller
        info.busId = spec.pci_bus_id
        return None

    @nvml_function()
    def nvmlDeviceGetArchitecture(self, device: Any) -> int:
        return self.core.device(device).gpu.spec.architecture

    @nvml_function()
    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        return self.core.device(handle).gpu.spec.brand

    @nvml_function()
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        major, minor = self.core.device(handle).gpu.spec.compute_capability
        return (major, minor)

    @nvml_function()
    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str:
        return self.core.physical(handle).spec.vbios_version

    @nvml_function()
    def nvmlDeviceGetBoardPartNumber(self, handle: Any) -> str:
        return self.core.physical(handle).spec.board_part_number

    @nvml_function()
    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int:
        return int(self.core.physical(handle).spec.persistence_mode)

    @nvml_function()
    def nvmlDeviceGetComputeMode(self, handle: Any) -> int:
        ref = self.core.device(handle)
        if ref.ci is None and ref.gpu.mig_enabled:
            raise nvml_error(NOT_SUPPORTED)  # with MIG on it must be asked per MIG device
        return ref.gpu.spec.compute_mode

    @nvml_function()
    def nvmlDeviceGetDisplayMode(self, handle: Any) -> int:
        self.core.physical(handle)
        return 0

    @nvml_function()
    def nvmlDeviceGetDisplayActive(self, handle: Any) -> int:
        self.core.physical(handle)
        return 0

    @nvml_function()
    def nvmlDeviceGetNumGpuCores(self, device: Any) -> int:
        gpu = self.core.physical(device)
        if gpu.mig_enabled:
            raise nvml_error(NOT_SUPPORTED)
        per_sm = 128 if gpu.spec.architecture >= ARCHITECTURES["ampere"] else 64
        if gpu.spec.architecture == ARCHITECTURES["ampere"] and gpu.spec.compute_capability == (
            8,
            0,
        ):
            per_sm = 64  # GA100
        return gpu.spec.sm_count * per_sm

    # ---------------------------------------------------------------- memory

    @nvml_function()
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        ref = self.core.device(handle)
        t = self.core.t()
        if version and version != pynvml.nvmlMemory_v2:
            raise nvml_error(
                pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            )  # what R580 did for a bad version
        if ref.ci is not None:
            total, reserved, used = ref.ci.gi.memory_total, 0, ref.ci.gi.memory_used(t)
        else:
            if ref.gpu.mig_enabled:
                self.core.require_privilege()
            spec = ref.gpu.spec
            total, reserved, used = spec.memory_total, spec.memory_reserved, ref.gpu.memory_used(t)
        free = max(0, total - reserved - used)
        if not version:
            memory = pynvml.c_nvmlMemory_t()
            memory.total, memory.free, memory.used = total, free, used + reserved
            return memory
        memory2 = pynvml.c_nvmlMemory_v2_t()
        memory2.version = version
        memory2.total, memory2.reserved, memory2.free, memory2.used = total, reserved, free, used
        return memory2

    @nvml_function()
    def nvmlDeviceGetBAR1MemoryInfo(self, handle: Any) -> Any:
        ref = self.core.device(handle)
        spec = ref.gpu.spec
        total, used = spec.bar1_total, ref.gpu.bar1_used(self.core.t())
        if ref.ci is not None:  # per instance: its share of the aperture
            total = total * ref.ci.gi.profile.slices // 8
            used = min(used, total)
        bar1 = pynvml.c_nvmlBAR1Memory_t()
        bar1.bar1Total, bar1.bar1Used, bar1.bar1Free = total, used, total - used
        return bar1

    # ---------------------------------------------------------------- utilization

    def _utilization_gpu(self, handle: Any) -> GpuState:
        ref = self.core.device(handle)
        if ref.ci is not None or ref.gpu.mig_enabled:
            raise nvml_error(NOT_SUPPORTED)
        return ref.gpu

    @nvml_function()
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        gpu = self._utilization_gpu(handle)
        a = gpu.utilization_at(self.core.t())
        util = pynvml.c_nvmlUtilization_t()
        util.gpu, util.memory = percent(a.graphics), percent(a.dram)
        return util

    def _engine(self, handle: Any, engine: str) -> list[int]:
        gpu = self._utilization_gpu(handle)
        a = gpu.utilization_at(self.core.t())
        return [percent(getattr(a, engine)), ENGINE_PERIOD_US]

    @nvml_function()
    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> list[int]:
        return self._engine(handle, "encoder")

    @nvml_function()
    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> list[int]:
        return self._engine(handle, "decoder")

    @nvml_function()
    def nvmlDeviceGetJpgUtilization(self, handle: Any) -> list[int]:
        return self._engine(handle, "jpeg")

    @nvml_function()
    def nvmlDeviceGetOfaUtilization(self, handle: Any) -> list[int]:
        return self._engine(handle, "ofa")

    # ---------------------------------------------------------------- temperature

    @nvml_function()
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        gpu = self.core.physical(handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise nvml_error(INVALID)
        return round(gpu.temperature_gpu(self.core.t()))

    @nvml_function()
    def nvmlDeviceGetTemperatureV(
        self, handle: Any, sensor: int, version: int = pynvml.nvmlTemperature_v1
    ) -> int:
        if version != pynvml.nvmlTemperature_v1:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self.nvmlDeviceGetTemperature(handle, sensor)

    @nvml_function()
    def nvmlDeviceGetTemperatureThreshold(self, handle: Any, threshold: int) -> int:
        gpu = self.core.physical(handle)
        names = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "shutdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "slowdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "memory_max",
            pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX: "gpu_max",
        }
        if threshold in names:
            return round(gpu.spec.temp_thresholds[names[threshold]])
        if isinstance(threshold, int) and 0 <= threshold <= 7:
            raise nvml_error(NOT_SUPPORTED)  # acoustic / GPS thresholds: not on data-center boards
        raise nvml_error(INVALID)

    @nvml_function()
    def nvmlDeviceGetMarginTemperature(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        return round(gpu.spec.temp_thresholds["slowdown"] - gpu.temperature_gpu(self.core.t()))

    # ---------------------------------------------------------------- power and energy

    @nvml_function()
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        return round(gpu.power_watts(gpu.grid(self.core.t(), 0.02)) * 1000)

    @nvml_function()
    def nvmlDeviceGetPowerManagementMode(self, handle: Any) -> int:
        self.core.physical(handle)
        return pynvml.NVML_FEATURE_ENABLED

    @nvml_function()
    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        return round(self.core.physical(handle).spec.power_limit * 1000)

    @nvml_function()
    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        spec = self.core.physical(handle).spec
        return [round(spec.power_min_limit * 1000), round(spec.power_max_limit * 1000)]

    @nvml_function()
    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        return round(self.core.physical(handle).spec.power_default_limit * 1000)

    @nvml_function()
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        return round(self.core.physical(handle).spec.power_enforced_limit * 1000)

    @nvml_function()
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        return int(gpu.energy_joules(self.core.t()) * 1000)

    # ---------------------------------------------------------------- clocks

    def _clock(self, handle: Any, type: int) -> tuple[GpuState, str]:
        gpu = self.core.physical(handle)
        if type not in CLOCK_KINDS:
            raise nvml_error(INVALID)
        return gpu, CLOCK_KINDS[type]

    @nvml_function()
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        gpu, kind = self._clock(handle, type)
        return round(gpu.clock_mhz(kind, self.core.t()))

    @nvml_function()
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int:
        gpu, kind = self._clock(handle, type)
        return round(gpu.spec.clocks_max[kind])

    @nvml_function()
    def nvmlDeviceGetClock(self, handle: Any, type: int, id: int) -> int:
        gpu, kind = self._clock(handle, type)
        if id == pynvml.NVML_CLOCK_ID_CURRENT:
            return round(gpu.clock_mhz(kind, self.core.t()))
        if id in (
            pynvml.NVML_CLOCK_ID_APP_CLOCK_TARGET,
            pynvml.NVML_CLOCK_ID_APP_CLOCK_DEFAULT,
            pynvml.NVML_CLOCK_ID_CUSTOMER_BOOST_MAX,
        ):
            return round(gpu.spec.clocks_max[kind])
        raise nvml_error(INVALID)

    @nvml_function()
    def nvmlDeviceGetApplicationsClock(self, handle: Any, type: int) -> int:
        gpu, kind = self._clock(handle, type)
        return round(gpu.spec.clocks_max[kind])

    @nvml_function()
    def nvmlDeviceGetDefaultApplicationsClock(self, handle: Any, type: int) -> int:
        return self.nvmlDeviceGetApplicationsClock(handle, type)

    @nvml_function()
    def nvmlDeviceGetMaxCustomerBoostClock(self, handle: Any, type: int) -> int:
        return self.nvmlDeviceGetApplicationsClock(handle, type)

    @nvml_function()
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        return gpu.clock_reasons(self.core.t()) & gpu.spec.clock_reasons_supported

    @nvml_function()
    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        if gpu.spec.virtualization_mode == GUEST:
            raise nvml_error(NOT_SUPPORTED)
        return gpu.spec.clock_reasons_supported

    @nvml_function()
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    @nvml_function()
    def nvmlDeviceGetSupportedClocksThrottleReasons(self, handle: Any) -> int:
        return self.nvmlDeviceGetSupportedClocksEventReasons(handle)

    @nvml_function()
    def nvmlDeviceGetPerformanceState(self, handle: Any) -> int:
        return self.core.physical(handle).performance_state(self.core.t())

    # ---------------------------------------------------------------- PCIe

    @nvml_function()
    def nvmlDeviceGetPcieThroughput(self, device: Any, counter: int) -> int:
        gpu = self.core.physical(device)
        if gpu.spec.virtualization_mode == GUEST:
            raise nvml_error(NOT_SUPPORTED)
        a = gpu.activity(self.core.t())
        if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES:
            return int(a.pcie_tx / 1000)
        if counter == pynvml.NVML_PCIE_UTIL_RX_BYTES:
            return int(a.pcie_rx / 1000)
        raise nvml_error(INVALID)

    @nvml_function()
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self.core.physical(handle).spec.pcie["generation"]

    @nvml_function()
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self.core.physical(handle).spec.pcie["width"]

    @nvml_function()
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self.core.physical(handle).spec.pcie["max_generation"]

    @nvml_function()
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: Any) -> int:
        return self.core.physical(handle).spec.pcie["max_generation"]

    @nvml_function()
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        return self.core.physical(handle).spec.pcie["max_width"]

    @nvml_function()
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int:
        return self.core.physical(handle).spec.pcie["replay_counter"]

    # ---------------------------------------------------------------- ECC and memory health

    def _ecc_gpu(self, handle: Any) -> GpuState:
        gpu = self.core.physical(handle)
        if not gpu.spec.ecc_supported:
            raise nvml_error(NOT_SUPPORTED)
        return gpu

    @nvml_function()
    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]:
        spec = self._ecc_gpu(handle).spec
        return [int(spec.ecc_enabled), int(spec.ecc_pending)]

    def _ecc_count(self, gpu: GpuState, errorType: int, counterType: int) -> int:
        if not gpu.spec.ecc_enabled:
            raise nvml_error(NOT_SUPPORTED)
        kinds = {
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected",
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected",
        }
        counters = {pynvml.NVML_VOLATILE_ECC: "volatile", pynvml.NVML_AGGREGATE_ECC: "aggregate"}
        if errorType not in kinds or counterType not in counters:
            raise nvml_error(INVALID)
        return gpu.spec.ecc_counts[f"{kinds[errorType]}_{counters[counterType]}"]

    @nvml_function()
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        return self._ecc_count(self._ecc_gpu(handle), errorType, counterType)

    @nvml_function()
    def nvmlDeviceGetMemoryErrorCounter(
        self, handle: Any, errorType: int, counterType: int, locationType: int
    ) -> int:
        gpu = self._ecc_gpu(handle)
        count = self._ecc_count(gpu, errorType, counterType)
        if (
            not isinstance(locationType, int)
            or not 0 <= locationType <= pynvml.NVML_MEMORY_LOCATION_SRAM
        ):
            raise nvml_error(INVALID)
        # All simulated errors are in device memory (DRAM); the caches and register file stay clean.
        return count if locationType == pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY else 0

    def _retired_pages_gpu(self, device: Any) -> GpuState:
        gpu = self.core.physical(device)
        if gpu.spec.architecture >= ARCHITECTURES["ampere"]:
            raise nvml_error(NOT_SUPPORTED)  # Ampere+ data-center parts remap rows instead
        return gpu

    @nvml_function()
    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        self._retired_pages_gpu(device)
        if sourceFilter not in (0, 1):
            raise nvml_error(INVALID)
        return []

    @nvml_function()
    def nvmlDeviceGetRetiredPages_v2(self, device: Any, sourceFilter: int) -> list[dict[str, int]]:
        self._retired_pages_gpu(device)
        if sourceFilter not in (0, 1):
            raise nvml_error(INVALID)
        return []

    @nvml_function()
    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int:
        self._retired_pages_gpu(device)
        return 0

    @nvml_function()
    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        gpu = self.core.physical(device)
        if gpu.spec.architecture < ARCHITECTURES["ampere"] or (gpu.mig_enabled and gpu.gis):
            raise nvml_error(NOT_SUPPORTED)
        corr, unc, pending, failed = gpu.spec.remapped_rows
        return (corr, unc, pending, failed)

    @nvml_function()
    def nvmlDeviceGetRowRemapperHistogram(self, device: Any) -> Any:
        gpu = self.core.physical(device)
        if gpu.spec.architecture < ARCHITECTURES["ampere"]:
            raise nvml_error(NOT_SUPPORTED)
        values = pynvml.c_nvmlRowRemapperHistogramValues()
        values.max, values.high, values.partial, values.low, values.none = gpu.spec.row_histogram
        return values

    # ---------------------------------------------------------------- fans

    @nvml_function()
    def nvmlDeviceGetNumFans(self, device: Any) -> int:
        return self.core.physical(device).spec.fan_count

    @nvml_function()
    def nvmlDeviceGetFanSpeed(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        if gpu.spec.fan_count == 0:
            raise nvml_error(NOT_SUPPORTED)
        return gpu.fan_percent(self.core.t())

    @nvml_function()
    def nvmlDeviceGetFanSpeed_v2(self, handle: Any, fan: int) -> int:
        gpu = self.core.physical(handle)
        if not isinstance(fan, int) or not 0 <= fan < gpu.spec.fan_count:
            raise nvml_error(INVALID)
        return gpu.fan_percent(self.core.t())

    # ---------------------------------------------------------------- accounting
    # The mode, the PIDs and the per-process records: vgpumon.sim.driver_health.

    @nvml_function()
    def nvmlDeviceGetAccountingBufferSize(self, handle: Any) -> int:
        self.core.physical(handle)
        return 4000
