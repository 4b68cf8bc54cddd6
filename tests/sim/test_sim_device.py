"""Device readings of the simulated NVML match the scenario files and NVML's conventions."""

from __future__ import annotations

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create, parse_scenario

GIB = 2**30


def started(name: str, clock: ManualClock | None = None) -> SimNvml:
    sim = create(name, clock or ManualClock())
    sim.nvmlInit()
    return sim


def test_baremetal_readings_follow_the_file() -> None:
    sim = started("baremetal-8xh100")
    sim.clock.advance(1.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    util = sim.nvmlDeviceGetUtilizationRates(h)
    assert isinstance(util, pynvml.c_nvmlUtilization_t)
    assert (util.gpu, util.memory) == (95, 35)
    assert sim.nvmlDeviceGetPowerUsage(h) == 640_000
    assert sim.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU) == 61
    assert sim.nvmlDeviceGetTemperatureV(h, pynvml.NVML_TEMPERATURE_GPU) == 61
    assert sim.nvmlDeviceGetPowerManagementLimit(h) == 700_000
    assert sim.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200_000, 700_000]
    assert sim.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM) == 1980  # busy: max clocks
    assert sim.nvmlDeviceGetCurrentClocksEventReasons(h) == 0
    assert sim.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES) == 24 * 2**20 // 1000
    procs = sim.nvmlDeviceGetComputeRunningProcesses(h)
    assert [type(p) for p in procs] == [pynvml.nvmlFriendlyObject]
    assert (procs[0].pid, procs[0].usedGpuMemory) == (4101, 61 * GIB)
    assert procs[0].gpuInstanceId == procs[0].computeInstanceId == 0xFFFFFFFF
    assert sim.nvmlDeviceGetGraphicsRunningProcesses(h) == []
    mem = sim.nvmlDeviceGetMemoryInfo(h)
    mem2 = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert isinstance(mem, pynvml.c_nvmlMemory_t) and isinstance(mem2, pynvml.c_nvmlMemory_v2_t)
    assert mem2.used == 61 * GIB and mem.used == mem2.used + mem2.reserved
    assert mem.free == mem2.free == mem.total - mem.used

    idle = sim.nvmlDeviceGetHandleByIndex(7)
    assert sim.nvmlDeviceGetUtilizationRates(idle).gpu == 0
    assert sim.nvmlDeviceGetPowerUsage(idle) == 72_000
    assert sim.nvmlDeviceGetClockInfo(idle, pynvml.NVML_CLOCK_GRAPHICS) == 345
    assert sim.nvmlDeviceGetCurrentClocksEventReasons(idle) == pynvml.nvmlClocksEventReasonGpuIdle
    assert sim.nvmlDeviceGetComputeRunningProcesses(idle) == []


def test_passthrough_guest_matches_the_h200_findings() -> None:
    sim = started("passthrough-guest")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetCount() == 1
    assert sim.nvmlDeviceGetName(h) == "NVIDIA H200"
    assert sim.nvmlDeviceGetVirtualizationMode(h) == pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH
    assert sim.nvmlDeviceGetMigMode(h) == [0, 0]
    assert sim.nvmlDeviceGetMaxMigDeviceCount(h) == 0
    assert sim.nvmlDeviceGetArchitecture(h) == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert sim.nvmlDeviceGetBrand(h) == pynvml.NVML_BRAND_NVIDIA
    assert sim.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    pci = sim.nvmlDeviceGetPciInfo(h)
    assert (pci.busId, pci.busIdLegacy, pci.pciDeviceId) == (
        "00000000:00:06.0",
        "0000:00:06.0",
        0x233510DE,
    )
    mem = sim.nvmlDeviceGetMemoryInfo(h)
    mem2 = sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
    assert mem.total == mem2.total == 150_754_820_096
    assert (mem.used, mem2.used, mem2.reserved) == (1_570_635_776, 925_696_000, 644_939_776)
    assert sim.nvmlDeviceGetNumFans(h) == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetFanSpeed(h)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetFanSpeed_v2(h, 0)
    assert sim.nvmlDeviceGetEccMode(h) == [1, 1]
    assert sim.nvmlDeviceGetPersistenceMode(h) == 1
    assert sim.nvmlDeviceGetRemappedRows(h) == (0, 0, 0, 0)
    assert sim.nvmlDeviceGetRowRemapperHistogram(h).max == 3072
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetRetiredPages(h, 0)
    assert sim.nvmlDeviceGetSupportedClocksEventReasons(h) == 0x1FF
    assert sim.nvmlDeviceGetSupportedEventTypes(h) == 0xFF9F
    assert (
        sim.nvmlDeviceGetTemperatureThreshold(h, pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN) == 89
    )
    assert (
        sim.nvmlDeviceGetCurrPcieLinkGeneration(h) == 5
        and sim.nvmlDeviceGetCurrPcieLinkWidth(h) == 16
    )
    assert sim.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total == 256 * GIB
    assert sim.nvmlGpmQueryDeviceSupport(h).isSupportedDevice == 1
    assert sim.nvmlDeviceGetAccountingMode(h) == 0 and sim.nvmlDeviceGetAccountingPids(h) == []
    features = sim.nvmlDeviceGetGridLicensableFeatures(h)
    assert isinstance(features, pynvml.c_nvmlGridLicensableFeatures_v4_t)
    assert (features.isGridLicenseSupported, features.licensableFeaturesCount) == (0, 0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    procs = sim.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(403, 916_455_424)]


def test_energy_is_the_monotonic_integral_of_power() -> None:
    sim = started("baremetal-8xh100")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetTotalEnergyConsumption(h) == 0
    sim.clock.advance(10.0)
    assert sim.nvmlDeviceGetTotalEnergyConsumption(h) == 6_400_000  # 640 W for 10 s, in mJ

    scenario = parse_scenario(
        """
gpus:
  - model: h100-sxm-80gb
    load:
      duty: {pattern: sine, mean: 0.5, amplitude: 0.5, period: 7s}
      sm_fraction: {pattern: noise, mean: 0.5, amplitude: 0.4, interval: 0.3s}
"""
    )
    sim = create(scenario, ManualClock())
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    previous = -1
    total_w_seconds = 0.0
    for _ in range(200):
        sim.clock.advance(0.137)
        energy = sim.nvmlDeviceGetTotalEnergyConsumption(h)
        assert energy >= previous
        previous = energy
        total_w_seconds += sim.nvmlDeviceGetPowerUsage(h) / 1000 * 0.137
    idle, peak = 72 * 27.4, 690 * 27.4
    assert idle < previous / 1000 < peak
    assert previous / 1000 == pytest.approx(total_w_seconds, rel=0.05)


def test_same_seed_and_clock_give_identical_readings() -> None:
    text = """
seed: 42
gpus:
  - model: h100-sxm-80gb
    count: 2
    load:
      duty: {pattern: noise, mean: 0.5, amplitude: 0.5, interval: 0.5s}
      dram: {pattern: square, low: 0.1, high: 0.6, period: 3s, jitter: 0.05}
    temperature: {gpu: {pattern: noise, mean: 50, amplitude: 10}}
"""

    def trace(seed_text: str) -> list[object]:
        sim = create(parse_scenario(seed_text), ManualClock())
        sim.nvmlInit()
        out: list[object] = []
        for _ in range(30):
            sim.clock.advance(0.31)
            for i in range(2):
                h = sim.nvmlDeviceGetHandleByIndex(i)
                util = sim.nvmlDeviceGetUtilizationRates(h)
                out += [
                    sim.nvmlDeviceGetUUID(h),
                    util.gpu,
                    util.memory,
                    sim.nvmlDeviceGetPowerUsage(h),
                    sim.nvmlDeviceGetTemperature(h, 0),
                    sim.nvmlDeviceGetTotalEnergyConsumption(h),
                ]
        return out

    first, second = trace(text), trace(text)
    assert first == second
    assert first != trace(text.replace("seed: 42", "seed: 43"))
    gpu0 = first[1::12]
    gpu1 = first[7::12]
    assert gpu0 != gpu1  # replicated GPUs do not share a noise stream


def test_mig_device_handles_refuse_board_telemetry() -> None:
    sim = started("a100-mig-mixed")
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    for call in (
        lambda: sim.nvmlDeviceGetPowerUsage(mig),
        lambda: sim.nvmlDeviceGetTemperature(mig, 0),
        lambda: sim.nvmlDeviceGetClockInfo(mig, 0),
        lambda: sim.nvmlDeviceGetSerial(mig),
        lambda: sim.nvmlDeviceGetPciInfo(mig),
        lambda: sim.nvmlDeviceGetFieldValues(mig, [83]),
        lambda: sim.nvmlDeviceGetEccMode(mig),
        lambda: sim.nvmlDeviceGetUtilizationRates(mig),
        lambda: sim.nvmlDeviceGetUtilizationRates(parent),
        lambda: sim.nvmlDeviceGetEncoderUtilization(parent),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetRemappedRows(parent)  # instances exist
    assert sim.nvmlDeviceGetComputeMode(mig) == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetComputeMode(parent)


def test_unknown_arguments_are_invalid() -> None:
    sim = started("baremetal-8xh100")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetClockInfo(h, 9)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetTemperature(h, 1)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        sim.nvmlDeviceGetMemoryInfo(h, version=0x03000028)  # what R580 did for a bad version
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        sim.nvmlDeviceGetTemperatureV(h, 0, version=1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetFieldValues(h, [])


def test_field_values_carry_per_entry_results() -> None:
    sim = started("passthrough-guest")
    sim.clock.advance(2.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    ids = [
        pynvml.NVML_FI_DEV_MEMORY_TEMP,
        pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        (pynvml.NVML_FI_DEV_POWER_INSTANT, 0),
        (pynvml.NVML_FI_DEV_POWER_INSTANT, 1),
        pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT,
        pynvml.NVML_FI_DEV_RETIRED_SBE,
        pynvml.NVML_FI_DEV_ECC_CURRENT,
        193,
        297,
        9999,
        0,
    ]
    values = sim.nvmlDeviceGetFieldValues(h, ids)
    assert len(values) == len(ids)
    results = [(v.fieldId, v.scopeId, v.nvmlReturn, v.valueType) for v in values]
    ok, uint, ull, sint = pynvml.NVML_SUCCESS, 1, 3, 5
    assert results == [
        (82, 0, ok, uint),
        (83, 0, ok, ull),
        (186, 0, ok, uint),
        (186, 1, 3, 0),
        (91, 0, 3, 0),
        (29, 0, 3, 0),
        (1, 0, ok, ull),
        (193, 0, ok, sint),
        (297, 0, 2, 0),
        (9999, 0, 2, 0),
        (0, 0, 2, 0),
    ]
    assert values[0].value.uiVal == 29
    assert values[1].value.ullVal == sim.nvmlDeviceGetTotalEnergyConsumption(h) > 0
    assert values[2].value.uiVal == sim.nvmlDeviceGetPowerUsage(h)
    assert values[6].value.ullVal == 1
    assert values[7].value.siVal == -8
    assert values[0].timestamp == int((sim.clock.now()) * 1e6)
