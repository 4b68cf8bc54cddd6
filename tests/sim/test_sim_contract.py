"""Contract: every simulated function is a pynvml function with pynvml's parameters and return type.

The expected return types below are read off the wrappers of the installed pynvml (13.615.71) and
expressed with pynvml's own classes. Every simulated function must have a row; a row is checked by
calling the simulated function. Rows for the core simulator must call successfully; rows for
extension modules (vGPU) are skipped only when the call raises an NVML error in that scenario.
"""

from __future__ import annotations

import ctypes
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, builtin_scenarios, create, parse_scenario

CONTRACT_SCENARIO = """
name: contract
gpus:
  - model: h100-sxm-80gb                      # 0: full GPU with fans, processes of every kind, Xids
    fans: {count: 2, speed: 0.4}
    load: {duty: 0.5, encoder: 0.1}
    processes:
      - {pid: 10, name: both, type: compute+graphics, memory: 1GiB}
      - {pid: 11, name: mps, type: mps, memory: 1GiB}
    xid_events: [{at: 0s, xid: 79}, {at: 0s, xid: 48}]
  - model: h100-sxm-80gb                      # 1: MIG
    mig:
      enabled: true
      instances: [{profile: 3g.40gb, compute_instances: [2, 1]}]
    processes: [{pid: 20, memory: 1GiB, gpu_instance: 1}]
  - name: Tesla V100-SXM2-16GB                # 2: pre-Ampere, for retired pages
    architecture: volta
    compute_capability: "7.0"
    sm_count: 80
    memory: {total: 16GiB}
    power: {limit: 300W}
    clocks: {max: {graphics: 1530, sm: 1530, memory: 877, video: 1372}}
"""


# --------------------------------------------------------------------------- expectations


class Expect:
    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        raise NotImplementedError


@dataclass
class Is(Expect):
    """Exactly this type (pynvml's own class)."""

    cls: type

    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        return type(value) is self.cls


@dataclass
class ListOf(Expect):
    item: type
    length: int | None = None

    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        return (
            type(value) is list
            and all(type(v) is self.item for v in value)
            and (self.length is None or len(value) == self.length)
        )


@dataclass
class TupleOf(Expect):
    items: tuple[type, ...]

    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        return (
            type(value) is tuple
            and len(value) == len(self.items)
            and all(isinstance(v, t) for v, t in zip(value, self.items, strict=True))
        )


@dataclass
class ArrayOf(Expect):
    """A ctypes array of ``item`` (what nvmlDeviceGetFieldValues returns)."""

    item: type

    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        return isinstance(value, ctypes.Array) and value._type_ is self.item


@dataclass
class SamplesTuple(Expect):
    """``(valueType, [c_nvmlSample_t, ...])``."""

    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        return (
            type(value) is tuple
            and type(value[0]) is int
            and ListOf(pynvml.c_nvmlSample_t).check(value[1], args)
        )


@dataclass
class SameAsArg(Expect):
    """The wrapper hands back the object it was given (GPM samples, caller-built structs)."""

    index: int
    cls: type

    def check(self, value: Any, args: tuple[Any, ...]) -> bool:
        return value is args[self.index] and type(value) is self.cls


NONE = Is(type(None))
INT = Is(int)
STR = Is(str)
DEVICE = Is(pynvml.c_nvmlDevice_t)
FRIENDLY = ListOf(pynvml.nvmlFriendlyObject)
INT_PAIR = ListOf(int, 2)


# --------------------------------------------------------------------------- environments


class Env:
    """Handles into the contract scenario (core rows)."""

    def __init__(self) -> None:
        self.sim: SimNvml = create(parse_scenario(CONTRACT_SCENARIO), ManualClock())
        sim = self.sim
        sim.nvmlInit()
        self.h = sim.nvmlDeviceGetHandleByIndex(0)
        self.events = sim.nvmlEventSetCreate()
        sim.nvmlDeviceRegisterEvents(self.h, pynvml.nvmlEventTypeXidCriticalError, self.events)
        sim.clock.advance(2.0)
        self.hm = sim.nvmlDeviceGetHandleByIndex(1)
        self.hv = sim.nvmlDeviceGetHandleByIndex(2)
        self.mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(self.hm, 0)
        self.gi = sim.nvmlDeviceGetGpuInstanceById(self.hm, 1)
        self.ci = sim.nvmlGpuInstanceGetComputeInstanceById(self.gi, 0)
        self.count = ctypes.c_uint()

    def gpm_pair(self) -> tuple[Any, Any]:
        a, b = self.sim.nvmlGpmSampleAlloc(), self.sim.nvmlGpmSampleAlloc()
        self.sim.nvmlGpmSampleGet(self.h, a)
        self.sim.clock.advance(0.5)
        self.sim.nvmlGpmSampleGet(self.h, b)
        return a, b

    def metrics_request(self) -> Any:
        a, b = self.gpm_pair()
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version, mg.numMetrics, mg.sample1, mg.sample2 = (
            pynvml.NVML_GPM_METRICS_GET_VERSION,
            1,
            a,
            b,
        )
        mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        return mg

    def pci_ext(self) -> Any:
        info = pynvml.nvmlPciInfoExt_v1_t()
        info.version = pynvml.nvmlPciInfoExt_v1
        return ctypes.byref(info)


class VgpuEnv:
    """Handles and ids into the built-in vGPU host scenarios (extension rows)."""

    def __init__(self) -> None:
        self.sim = create("kvm-vgpu-timesliced", ManualClock())
        self.sim.nvmlInit()
        self.sim.clock.advance(3.0)
        self.h = self.sim.nvmlDeviceGetHandleByIndex(0)
        self.vis = self.sim.nvmlDeviceGetActiveVgpus(self.h)
        self.vi = self.vis[0]
        self.type_id = self.sim.nvmlVgpuInstanceGetType(self.vi)
        self.type_ids = self.sim.nvmlDeviceGetSupportedVgpus(self.h)
        self.r595 = create("h100-mig-backed-vgpu", ManualClock())
        self.r595.nvmlInit()
        self.r595.clock.advance(3.0)
        self.h595 = self.r595.nvmlDeviceGetHandleByIndex(1)
        parent = self.r595.nvmlDeviceGetHandleByIndex(0)
        mig = self.r595.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
        self.gi = self.r595.nvmlDeviceGetGpuInstanceById(
            parent, self.r595.nvmlDeviceGetGpuInstanceId(mig)
        )

        self.surfaces: dict[str, SimNvml] = {}

    def surface(self, name: str) -> SimNvml:
        if name not in self.surfaces:
            sim = create(name, ManualClock())
            sim.nvmlInit()
            sim.clock.advance(3.0)
            self.surfaces[name] = sim
        return self.surfaces[name]

    def sh(self, name: str, index: int = 0) -> Any:
        return self.surface(name).nvmlDeviceGetHandleByIndex(index)

    def surface_gi(self) -> Any:
        sim = self.surface("mig-timesliced-vgpu")
        return sim.nvmlDeviceGetGpuInstanceById(self.sh("mig-timesliced-vgpu"), 1)

    def first(self, fn: Callable[[Any], Any], candidates: list[Any]) -> Any:
        """fn on the first candidate that answers (an instance with a limiter, accounting on...)."""
        error: pynvml.NVMLError | None = None
        for candidate in candidates:
            try:
                return fn(candidate)
            except pynvml.NVMLError as err:
                error = err
        assert error is not None
        raise error


Row = tuple[str, Callable[[Any], tuple[Any, ...]], Expect]


def core_rows() -> list[Row]:
    """(function, arguments from Env, expected return)."""
    s = pynvml
    return [
        ("nvmlInit", lambda e: (), NONE),
        ("nvmlInitWithFlags", lambda e: (0,), NONE),
        ("nvmlShutdown", lambda e: (), NONE),
        ("nvmlErrorString", lambda e: (3,), STR),
        ("nvmlSystemGetDriverVersion", lambda e: (), STR),
        ("nvmlSystemGetNVMLVersion", lambda e: (), STR),
        ("nvmlSystemGetCudaDriverVersion", lambda e: (), INT),
        ("nvmlSystemGetCudaDriverVersion_v2", lambda e: (), INT),
        ("nvmlSystemGetDriverBranch", lambda e: (), Is(s.c_nvmlSystemDriverBranchInfo_v1_t)),
        ("nvmlSystemGetProcessName", lambda e: (10,), STR),
        ("nvmlDeviceGetCount", lambda e: (), INT),
        ("nvmlDeviceGetHandleByIndex", lambda e: (0,), DEVICE),
        ("nvmlDeviceGetHandleByUUID", lambda e: (e.sim.nvmlDeviceGetUUID(e.h),), DEVICE),
        ("nvmlDeviceGetHandleByUUID", lambda e: (e.sim.nvmlDeviceGetUUID(e.mig),), DEVICE),
        ("nvmlDeviceGetHandleByPciBusId", lambda e: ("00000000:18:00.0",), DEVICE),
        ("nvmlDeviceGetHandleBySerial", lambda e: (e.sim.nvmlDeviceGetSerial(e.h),), DEVICE),
        ("nvmlDeviceGetName", lambda e: (e.h,), STR),
        ("nvmlDeviceGetUUID", lambda e: (e.h,), STR),
        ("nvmlDeviceGetSerial", lambda e: (e.h,), STR),
        ("nvmlDeviceGetVbiosVersion", lambda e: (e.h,), STR),
        ("nvmlDeviceGetBoardPartNumber", lambda e: (e.h,), STR),
        ("nvmlDeviceGetIndex", lambda e: (e.h,), INT),
        ("nvmlDeviceGetMinorNumber", lambda e: (e.h,), INT),
        ("nvmlDeviceGetArchitecture", lambda e: (e.h,), INT),
        ("nvmlDeviceGetBrand", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPersistenceMode", lambda e: (e.h,), INT),
        ("nvmlDeviceGetComputeMode", lambda e: (e.h,), INT),
        ("nvmlDeviceGetDisplayMode", lambda e: (e.h,), INT),
        ("nvmlDeviceGetDisplayActive", lambda e: (e.h,), INT),
        ("nvmlDeviceGetNumGpuCores", lambda e: (e.h,), INT),
        ("nvmlDeviceGetVirtualizationMode", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPciInfo", lambda e: (e.h,), Is(s.nvmlPciInfo_t)),
        ("nvmlDeviceGetPciInfo_v3", lambda e: (e.h,), Is(s.nvmlPciInfo_t)),
        ("nvmlDeviceGetPciInfoExt", lambda e: (e.h, e.pci_ext()), NONE),
        ("nvmlDeviceGetCudaComputeCapability", lambda e: (e.h,), TupleOf((int, int))),
        ("nvmlDeviceGetMemoryInfo", lambda e: (e.h,), Is(s.c_nvmlMemory_t)),
        ("nvmlDeviceGetMemoryInfo", lambda e: (e.h, s.nvmlMemory_v2), Is(s.c_nvmlMemory_v2_t)),
        ("nvmlDeviceGetBAR1MemoryInfo", lambda e: (e.h,), Is(s.c_nvmlBAR1Memory_t)),
        ("nvmlDeviceGetUtilizationRates", lambda e: (e.h,), Is(s.c_nvmlUtilization_t)),
        ("nvmlDeviceGetEncoderUtilization", lambda e: (e.h,), INT_PAIR),
        ("nvmlDeviceGetDecoderUtilization", lambda e: (e.h,), INT_PAIR),
        ("nvmlDeviceGetJpgUtilization", lambda e: (e.h,), INT_PAIR),
        ("nvmlDeviceGetOfaUtilization", lambda e: (e.h,), INT_PAIR),
        ("nvmlDeviceGetTemperature", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetTemperatureV", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetTemperatureThreshold", lambda e: (e.h, 1), INT),
        ("nvmlDeviceGetMarginTemperature", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPowerUsage", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPowerManagementMode", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPowerManagementLimit", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPowerManagementLimitConstraints", lambda e: (e.h,), INT_PAIR),
        ("nvmlDeviceGetPowerManagementDefaultLimit", lambda e: (e.h,), INT),
        ("nvmlDeviceGetEnforcedPowerLimit", lambda e: (e.h,), INT),
        ("nvmlDeviceGetTotalEnergyConsumption", lambda e: (e.h,), INT),
        ("nvmlDeviceGetClockInfo", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetMaxClockInfo", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetClock", lambda e: (e.h, 0, 0), INT),
        ("nvmlDeviceGetApplicationsClock", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetDefaultApplicationsClock", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetMaxCustomerBoostClock", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetCurrentClocksEventReasons", lambda e: (e.h,), INT),
        ("nvmlDeviceGetSupportedClocksEventReasons", lambda e: (e.h,), INT),
        ("nvmlDeviceGetCurrentClocksThrottleReasons", lambda e: (e.h,), INT),
        ("nvmlDeviceGetSupportedClocksThrottleReasons", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPerformanceState", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPcieThroughput", lambda e: (e.h, 0), INT),
        ("nvmlDeviceGetCurrPcieLinkGeneration", lambda e: (e.h,), INT),
        ("nvmlDeviceGetCurrPcieLinkWidth", lambda e: (e.h,), INT),
        ("nvmlDeviceGetMaxPcieLinkGeneration", lambda e: (e.h,), INT),
        ("nvmlDeviceGetMaxPcieLinkWidth", lambda e: (e.h,), INT),
        ("nvmlDeviceGetGpuMaxPcieLinkGeneration", lambda e: (e.h,), INT),
        ("nvmlDeviceGetPcieReplayCounter", lambda e: (e.h,), INT),
        ("nvmlDeviceGetEccMode", lambda e: (e.h,), INT_PAIR),
        ("nvmlDeviceGetTotalEccErrors", lambda e: (e.h, 0, 0), INT),
        ("nvmlDeviceGetMemoryErrorCounter", lambda e: (e.h, 0, 0, 2), INT),
        ("nvmlDeviceGetRetiredPages", lambda e: (e.hv, 0), ListOf(int)),
        ("nvmlDeviceGetRetiredPages_v2", lambda e: (e.hv, 0), ListOf(dict)),
        ("nvmlDeviceGetRetiredPagesPendingStatus", lambda e: (e.hv,), INT),
        ("nvmlDeviceGetRemappedRows", lambda e: (e.h,), TupleOf((int, int, int, int))),
        (
            "nvmlDeviceGetRowRemapperHistogram",
            lambda e: (e.h,),
            Is(s.c_nvmlRowRemapperHistogramValues),
        ),
        ("nvmlDeviceGetNumFans", lambda e: (e.h,), INT),
        ("nvmlDeviceGetFanSpeed", lambda e: (e.h,), INT),
        ("nvmlDeviceGetFanSpeed_v2", lambda e: (e.h, 1), INT),
        ("nvmlDeviceGetAccountingBufferSize", lambda e: (e.h,), INT),
        ("nvmlDeviceGetComputeRunningProcesses", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetComputeRunningProcesses_v2", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetComputeRunningProcesses_v3", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetGraphicsRunningProcesses", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetGraphicsRunningProcesses_v2", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetGraphicsRunningProcesses_v3", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetMPSComputeRunningProcesses", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetMPSComputeRunningProcesses_v2", lambda e: (e.h,), FRIENDLY),
        ("nvmlDeviceGetMPSComputeRunningProcesses_v3", lambda e: (e.h,), FRIENDLY),
        (
            "nvmlDeviceGetRunningProcessDetailList",
            lambda e: (e.h, s.nvmlProcessDetailList_v1, s.NVML_PROCESS_MODE_COMPUTE),
            ListOf(s.c_nvmlProcessDetail_v1_t),
        ),
        (
            "nvmlDeviceGetProcessUtilization",
            lambda e: (e.h, 0),
            ListOf(s.c_nvmlProcessUtilizationSample_t),
        ),
        (
            "nvmlDeviceGetProcessesUtilizationInfo",
            lambda e: (e.h, 0),
            ListOf(s.c_nvmlProcessUtilizationInfo_v1_t),
        ),
        (
            "nvmlDeviceGetSamples",
            lambda e: (e.h, s.NVML_GPU_UTILIZATION_SAMPLES, 0),
            SamplesTuple(),
        ),
        (
            "nvmlDeviceGetFieldValues",
            lambda e: (e.h, [83, (186, 0)]),
            ArrayOf(s.c_nvmlFieldValue_t),
        ),
        ("nvmlDeviceGetSupportedEventTypes", lambda e: (e.h,), INT),
        ("nvmlEventSetCreate", lambda e: (), Is(s.c_nvmlEventSet_t)),
        (
            "nvmlDeviceRegisterEvents",
            lambda e: (e.h, s.nvmlEventTypeXidCriticalError, e.events),
            NONE,
        ),
        ("nvmlEventSetWait", lambda e: (e.events, 0), Is(s.c_nvmlEventData_t)),
        ("nvmlEventSetWait_v2", lambda e: (e.events, 0), Is(s.c_nvmlEventData_t)),
        ("nvmlEventSetFree", lambda e: (e.sim.nvmlEventSetCreate(),), NONE),
        (
            "nvmlDeviceGetGridLicensableFeatures",
            lambda e: (e.h,),
            Is(s.c_nvmlGridLicensableFeatures_v4_t),
        ),
        (
            "nvmlDeviceGetGridLicensableFeatures_v4",
            lambda e: (e.h,),
            Is(s.c_nvmlGridLicensableFeatures_v4_t),
        ),
        # MIG
        ("nvmlDeviceGetMigMode", lambda e: (e.hm,), INT_PAIR),
        ("nvmlDeviceGetMaxMigDeviceCount", lambda e: (e.hm,), INT),
        ("nvmlDeviceGetMigDeviceHandleByIndex", lambda e: (e.hm, 0), DEVICE),
        ("nvmlDeviceIsMigDeviceHandle", lambda e: (e.mig,), Is(ctypes.c_uint)),
        ("nvmlDeviceGetGpuInstanceId", lambda e: (e.mig,), INT),
        ("nvmlDeviceGetComputeInstanceId", lambda e: (e.mig,), INT),
        ("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", lambda e: (e.mig,), DEVICE),
        ("nvmlDeviceGetAttributes", lambda e: (e.mig,), Is(s.c_nvmlDeviceAttributes)),
        ("nvmlDeviceGetAttributes_v2", lambda e: (e.mig,), Is(s.c_nvmlDeviceAttributes)),
        (
            "nvmlDeviceGetGpuInstanceProfileInfo",
            lambda e: (e.hm, 0),
            Is(s.c_nvmlGpuInstanceProfileInfo_v2_t),
        ),
        (
            "nvmlDeviceGetGpuInstanceProfileInfo",
            lambda e: (e.hm, 0, 1),
            Is(s.c_nvmlGpuInstanceProfileInfo_t),
        ),
        (
            "nvmlDeviceGetGpuInstanceProfileInfoV",
            lambda e: (e.hm, 2),
            Is(s.c_nvmlGpuInstanceProfileInfo_v2_t),
        ),
        (
            "nvmlDeviceGetGpuInstanceProfileInfoById",
            lambda e: (e.hm, 19),
            Is(s.c_nvmlGpuInstanceProfileInfo_v2_t),
        ),
        (
            "nvmlDeviceGetGpuInstanceProfileInfoByIdV",
            lambda e: (e.hm, 9),
            Is(s.c_nvmlGpuInstanceProfileInfo_v2_t),
        ),
        ("nvmlDeviceGetGpuInstanceRemainingCapacity", lambda e: (e.hm, 19), INT),
        (
            "nvmlDeviceGetGpuInstancePossiblePlacements",
            lambda e: (e.hm, 19, (s.c_nvmlGpuInstancePlacement_t * 7)(), ctypes.byref(e.count)),
            INT,
        ),
        (
            "nvmlDeviceGetGpuInstances",
            lambda e: (e.hm, 9, (s.c_nvmlGpuInstance_t * 2)(), ctypes.byref(e.count)),
            INT,
        ),
        ("nvmlDeviceGetGpuInstanceById", lambda e: (e.hm, 1), Is(s.c_nvmlGpuInstance_t)),
        ("nvmlGpuInstanceGetInfo", lambda e: (e.gi,), Is(s.c_nvmlGpuInstanceInfo_t)),
        (
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            lambda e: (e.gi, 0, 0),
            Is(s.c_nvmlComputeInstanceProfileInfo_v2_t),
        ),
        (
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            lambda e: (e.gi, 0, 0, 1),
            Is(s.c_nvmlComputeInstanceProfileInfo_t),
        ),
        (
            "nvmlGpuInstanceGetComputeInstanceProfileInfoV",
            lambda e: (e.gi, 1, 0),
            Is(s.c_nvmlComputeInstanceProfileInfo_v2_t),
        ),
        ("nvmlGpuInstanceGetComputeInstanceRemainingCapacity", lambda e: (e.gi, 0), INT),
        (
            "nvmlGpuInstanceGetComputeInstancePossiblePlacements",
            lambda e: (e.gi, 0, (s.c_nvmlComputeInstancePlacement_t * 3)(), ctypes.byref(e.count)),
            INT,
        ),
        (
            "nvmlGpuInstanceGetComputeInstances",
            lambda e: (e.gi, 1, (s.c_nvmlComputeInstance_t * 1)(), ctypes.byref(e.count)),
            INT,
        ),
        (
            "nvmlGpuInstanceGetComputeInstanceById",
            lambda e: (e.gi, 1),
            Is(s.c_nvmlComputeInstance_t),
        ),
        ("nvmlComputeInstanceGetInfo", lambda e: (e.ci,), Is(s.c_nvmlComputeInstanceInfo_t)),
        ("nvmlComputeInstanceGetInfo_v2", lambda e: (e.ci,), Is(s.c_nvmlComputeInstanceInfo_t)),
        # GPM
        ("nvmlGpmQueryDeviceSupport", lambda e: (e.h,), Is(s.c_nvmlGpmSupport_t)),
        ("nvmlGpmQueryIfStreamingEnabled", lambda e: (e.h,), INT),
        ("nvmlGpmSampleAlloc", lambda e: (), Is(s.c_nvmlGpmSample_t)),
        ("nvmlGpmSampleFree", lambda e: (e.sim.nvmlGpmSampleAlloc(),), NONE),
        (
            "nvmlGpmSampleGet",
            lambda e: (e.h, e.sim.nvmlGpmSampleAlloc()),
            SameAsArg(1, s.c_nvmlGpmSample_t),
        ),
        (
            "nvmlGpmMigSampleGet",
            lambda e: (e.hm, 1, e.sim.nvmlGpmSampleAlloc()),
            SameAsArg(2, s.c_nvmlGpmSample_t),
        ),
        (
            "nvmlGpmMetricsGet",
            lambda e: (e.metrics_request(),),
            SameAsArg(0, s.c_nvmlGpmMetricsGet_t),
        ),
    ]


def vgpu_rows() -> list[Row]:
    """Rows for the vGPU extension, against its built-in host scenarios."""
    s = pynvml

    def sched_v2(cls: type) -> Callable[[Any], tuple[Any, ...]]:
        return lambda v: (v.h595, cls())

    def versioned(cls: type, version: int) -> Any:
        struct = cls()
        struct.version = version
        return struct

    return [
        ("nvmlDeviceGetActiveVgpus", lambda v: (v.h,), ListOf(int)),
        ("nvmlDeviceGetSupportedVgpus", lambda v: (v.h,), ListOf(int)),
        ("nvmlDeviceGetCreatableVgpus", lambda v: (v.h,), ListOf(int)),
        ("nvmlDeviceGetHostVgpuMode", lambda v: (v.h,), INT),
        ("nvmlDeviceGetVgpuHeterogeneousMode", lambda v: (v.h,), INT),
        ("nvmlDeviceGetVgpuCapabilities", lambda v: (v.h, 0), INT),
        ("nvmlGetVgpuDriverCapabilities", lambda v: (0,), INT),
        (
            "nvmlDeviceGetVgpuUtilization",
            lambda v: (v.h, 0),
            ListOf(s.c_nvmlVgpuInstanceUtilizationSample_t),
        ),
        (
            "nvmlDeviceGetVgpuInstancesUtilizationInfo",
            lambda v: (v.h, 0),
            ListOf(s.c_nvmlVgpuInstanceUtilizationInfo_v1_t),
        ),
        (
            "nvmlDeviceGetVgpuProcessUtilization",
            lambda v: (v.h, 0),
            ListOf(s.c_nvmlVgpuProcessUtilizationSample_t),
        ),
        (
            "nvmlDeviceGetVgpuProcessesUtilizationInfo",
            lambda v: (v.h, 0),
            ListOf(s.c_nvmlVgpuProcessUtilizationInfo_v1_t),
        ),
        ("nvmlDeviceGetVgpuSchedulerState", lambda v: (v.h,), Is(s.c_nvmlVgpuSchedulerGetState_t)),
        ("nvmlDeviceGetVgpuSchedulerLog", lambda v: (v.h,), Is(s.c_nvmlVgpuSchedulerLog_t)),
        (
            "nvmlDeviceGetVgpuSchedulerCapabilities",
            lambda v: (v.h,),
            Is(s.c_nvmlVgpuSchedulerCapabilities_t),
        ),
        (
            "nvmlDeviceGetVgpuSchedulerState_v2",
            sched_v2(s.c_nvmlVgpuSchedulerStateInfo_v2_t),
            SameAsArg(1, s.c_nvmlVgpuSchedulerStateInfo_v2_t),
        ),
        (
            "nvmlDeviceGetVgpuSchedulerLog_v2",
            sched_v2(s.c_nvmlVgpuSchedulerLogInfo_v2_t),
            SameAsArg(1, s.c_nvmlVgpuSchedulerLogInfo_v2_t),
        ),
        (
            "nvmlDeviceGetVgpuTypeCreatablePlacements",
            lambda v: (v.h, v.type_id),
            Is(s.c_nvmlVgpuPlacementList_v1_t),
        ),
        (
            "nvmlDeviceGetVgpuTypeSupportedPlacements",
            lambda v: (v.h, v.type_id),
            Is(s.c_nvmlVgpuPlacementList_v1_t),
        ),
        (
            "nvmlGpuInstanceGetActiveVgpus",
            lambda v: (
                v.gi,
                versioned(s.c_nvmlActiveVgpuInstanceInfo_v1_t, s.nvmlActiveVgpuInstanceInfo_v1),
            ),
            SameAsArg(1, s.c_nvmlActiveVgpuInstanceInfo_v1_t),
        ),
        (
            "nvmlGpuInstanceGetCreatableVgpus",
            lambda v: (v.gi, versioned(s.c_nvmlVgpuTypeIdInfo_v1_t, s.nvmlVgpuTypeIdInfo_v1)),
            SameAsArg(1, s.c_nvmlVgpuTypeIdInfo_v1_t),
        ),
        ("nvmlGpuInstanceGetVgpuHeterogeneousMode", lambda v: (v.gi,), INT),
        (
            "nvmlGpuInstanceGetVgpuSchedulerState",
            lambda v: (
                v.gi,
                versioned(s.c_nvmlVgpuSchedulerStateInfo_v1_t, s.nvmlVgpuSchedulerStateInfo_v1),
            ),
            SameAsArg(1, s.c_nvmlVgpuSchedulerStateInfo_v1_t),
        ),
        (
            "nvmlGpuInstanceGetVgpuSchedulerLog",
            lambda v: (
                v.gi,
                versioned(s.c_nvmlVgpuSchedulerLogInfo_v1_t, s.nvmlVgpuSchedulerLogInfo_v1),
            ),
            SameAsArg(1, s.c_nvmlVgpuSchedulerLogInfo_v1_t),
        ),
        (
            "nvmlGpuInstanceGetVgpuSchedulerState_v2",
            lambda v: (v.gi, s.c_nvmlVgpuSchedulerStateInfo_v2_t()),
            SameAsArg(1, s.c_nvmlVgpuSchedulerStateInfo_v2_t),
        ),
        (
            "nvmlGpuInstanceGetVgpuSchedulerLog_v2",
            lambda v: (v.gi, s.c_nvmlVgpuSchedulerLogInfo_v2_t()),
            SameAsArg(1, s.c_nvmlVgpuSchedulerLogInfo_v2_t),
        ),
        ("nvmlVgpuTypeGetName", lambda v: (v.type_id,), STR),
        ("nvmlVgpuTypeGetClass", lambda v: (v.type_id,), STR),
        ("nvmlVgpuTypeGetLicense", lambda v: (v.type_id,), STR),
        ("nvmlVgpuTypeGetFramebufferSize", lambda v: (v.type_id,), INT),
        ("nvmlVgpuTypeGetMaxInstances", lambda v: (v.h, v.type_id), INT),
        ("nvmlVgpuTypeGetMaxInstancesPerVm", lambda v: (v.type_id,), INT),
        ("nvmlVgpuTypeGetMaxInstancesPerGpuInstance", lambda v: (v.type_id,), INT),
        ("nvmlVgpuTypeGetGpuInstanceProfileId", lambda v: (v.type_id,), INT),
        ("nvmlVgpuTypeGetNumDisplayHeads", lambda v: (v.type_id,), INT),
        ("nvmlVgpuTypeGetResolution", lambda v: (v.type_id,), TupleOf((int, int))),
        ("nvmlVgpuTypeGetDeviceID", lambda v: (v.type_id,), TupleOf((int, int))),
        (
            "nvmlVgpuTypeGetFrameRateLimit",
            lambda v: (_answering(v, v.sim.nvmlVgpuTypeGetFrameRateLimit, v.type_ids),),
            INT,
        ),
        ("nvmlVgpuInstanceGetVmID", lambda v: (v.vi,), TupleOf((bytes, int))),
        ("nvmlVgpuInstanceGetUUID", lambda v: (v.vi,), STR),
        ("nvmlVgpuInstanceGetMdevUUID", lambda v: (v.vi,), STR),
        ("nvmlVgpuInstanceGetVmDriverVersion", lambda v: (v.vi,), STR),
        ("nvmlVgpuInstanceGetGpuPciId", lambda v: (v.vi,), STR),
        ("nvmlVgpuInstanceGetFbUsage", lambda v: (v.vi,), INT),
        ("nvmlVgpuInstanceGetType", lambda v: (v.vi,), INT),
        (
            "nvmlVgpuInstanceGetFrameRateLimit",
            lambda v: (_answering(v, v.sim.nvmlVgpuInstanceGetFrameRateLimit, v.vis),),
            INT,
        ),
        ("nvmlVgpuInstanceGetEccMode", lambda v: (v.vi,), INT),
        ("nvmlVgpuInstanceGetGpuInstanceId", lambda v: (v.vi,), INT),
        ("nvmlVgpuInstanceGetPlacementId", lambda v: (v.vi,), INT),
        ("nvmlVgpuInstanceGetEncoderCapacity", lambda v: (v.vi,), INT),
        ("nvmlVgpuInstanceGetEncoderStats", lambda v: (v.vi,), TupleOf((int, int, int))),
        ("nvmlVgpuInstanceGetEncoderSessions", lambda v: (v.vi,), ListOf(s.c_nvmlEncoderSession_t)),
        ("nvmlVgpuInstanceGetFBCStats", lambda v: (v.vi,), Is(s.c_nvmlFBCStats_t)),
        ("nvmlVgpuInstanceGetFBCSessions", lambda v: (v.vi,), ListOf(s.c_nvmlFBCSession_t)),
        ("nvmlVgpuInstanceGetAccountingMode", lambda v: (v.vi,), INT),
        (
            "nvmlVgpuInstanceGetAccountingPids",
            lambda v: (_answering(v, v.sim.nvmlVgpuInstanceGetAccountingPids, v.vis),),
            TupleOf((ctypes.c_uint, ctypes.Array)),
        ),
        (
            "nvmlVgpuInstanceGetAccountingStats",
            lambda v: _accounting_stats_args(v),
            Is(s.c_nvmlAccountingStats_t),
        ),
        ("nvmlVgpuInstanceGetLicenseInfo", lambda v: (v.vi,), Is(s.c_nvmlVgpuLicenseInfo_t)),
        ("nvmlVgpuInstanceGetLicenseInfo_v2", lambda v: (v.vi,), Is(s.c_nvmlVgpuLicenseInfo_t)),
        ("nvmlVgpuInstanceGetLicenseStatus", lambda v: (v.vi,), INT),
        ("nvmlVgpuInstanceGetMetadata", lambda v: (v.vi,), Is(s.c_nvmlVgpuMetadata_t)),
        ("nvmlDeviceGetVgpuMetadata", lambda v: (v.h,), Is(s.c_nvmlVgpuPgpuMetadata_t)),
        # driver health and capacity surfaces (vgpumon.sim.driver_health, vgpu_capacity_api),
        # called on the scenario of SURFACES that answers them
        ("nvmlDeviceGetRepairStatus", lambda v: (v.sh("recovery-reset"),), ListOf(int, 2)),
        ("nvmlDeviceGetUnrepairableMemoryFlag_v1", lambda v: (v.sh("recovery-reset"),), INT),
        ("nvmlSystemGetConfComputeState", lambda v: (), Is(s.c_nvmlConfComputeSystemState_t)),
        (
            "nvmlSystemGetConfComputeSettings",
            lambda v: (s.c_nvmlSystemConfComputeSettings_v1_t(),),
            INT,
        ),
        (
            "nvmlSystemGetConfComputeCapabilities",
            lambda v: (),
            Is(s.c_nvmlConfComputeSystemCaps_t),
        ),
        ("nvmlSystemGetConfComputeGpusReadyState", lambda v: (), INT),
        (
            "nvmlDeviceGetConfComputeMemSizeInfo",
            lambda v: (v.sh("confidential-computing"),),
            Is(s.c_nvmlConfComputeMemSizeInfo_t),
        ),
        (
            "nvmlDeviceGetConfComputeProtectedMemoryUsage",
            lambda v: (v.sh("confidential-computing"),),
            Is(s.c_nvmlMemory_t),
        ),
        ("nvmlDeviceGetAccountingMode", lambda v: (v.sh("accounting-known-load"),), INT),
        ("nvmlDeviceGetAccountingPids", lambda v: (v.sh("accounting-known-load"),), ListOf(int)),
        (
            "nvmlDeviceGetAccountingStats",
            lambda v: (v.sh("accounting-known-load"), 8101),
            Is(s.c_nvmlAccountingStats_t),
        ),
        (
            "nvmlDeviceGetAccountingStats_v2",
            lambda v: (v.sh("accounting-known-load"), 8101),
            Is(s.c_nvmlAccountingStats_v2_t),
        ),
        ("nvmlVgpuInstanceGetRuntimeStateSize", lambda v: (201,), Is(s.nvmlVgpuRuntimeState_v1_t)),
        ("nvmlVgpuTypeGetFbReservation", lambda v: (2301,), INT),
        ("nvmlVgpuTypeGetGspHeapSize", lambda v: (2301,), INT),
        ("nvmlVgpuTypeGetBAR1Info", lambda v: (2301,), Is(s.c_nvmlVgpuTypeBar1Info_v1_t)),
        (
            "nvmlGpuInstanceGetVgpuTypeCreatablePlacements",
            lambda v: (v.surface_gi(), _gi_placements(2301)),
            SameAsArg(1, s.c_nvmlVgpuCreatablePlacementInfo_v1_t),
        ),
        (
            "nvmlGetVgpuCompatibility",
            lambda v: (
                v.sim.nvmlVgpuInstanceGetMetadata(v.vi),
                v.sim.nvmlDeviceGetVgpuMetadata(v.h),
            ),
            Is(s.c_nvmlVgpuPgpuCompatibility_t),
        ),
    ]


def _answering(v: VgpuEnv, fn: Callable[[Any], Any], candidates: list[Any]) -> Any:
    """The first id for which ``fn`` answers (a type with a frame-rate limiter, ...)."""
    return v.first(lambda c: (fn(c), c)[1], candidates)


def _gi_placements(type_id: int) -> Any:
    info = pynvml.c_nvmlVgpuCreatablePlacementInfo_v1_t()
    info.version = pynvml.nvmlVgpuCreatablePlacementInfo_v1
    info.vgpuTypeId = type_id
    return info


# Where the driver-surface rows are called: a built-in scenario that answers each of them.
SURFACES = {
    "nvmlDeviceGetRepairStatus": "recovery-reset",
    "nvmlDeviceGetUnrepairableMemoryFlag_v1": "recovery-reset",
    "nvmlSystemGetConfComputeState": "confidential-computing",
    "nvmlSystemGetConfComputeSettings": "confidential-computing",
    "nvmlSystemGetConfComputeCapabilities": "confidential-computing",
    "nvmlSystemGetConfComputeGpusReadyState": "confidential-computing",
    "nvmlDeviceGetConfComputeMemSizeInfo": "confidential-computing",
    "nvmlDeviceGetConfComputeProtectedMemoryUsage": "confidential-computing",
    "nvmlDeviceGetAccountingMode": "accounting-known-load",
    "nvmlDeviceGetAccountingPids": "accounting-known-load",
    "nvmlDeviceGetAccountingStats": "accounting-known-load",
    "nvmlDeviceGetAccountingStats_v2": "accounting-known-load",
    "nvmlVgpuInstanceGetRuntimeStateSize": "mig-timesliced-vgpu",
    "nvmlVgpuTypeGetFbReservation": "mig-timesliced-vgpu",
    "nvmlVgpuTypeGetGspHeapSize": "mig-timesliced-vgpu",
    "nvmlVgpuTypeGetBAR1Info": "mig-timesliced-vgpu",
    "nvmlGpuInstanceGetVgpuTypeCreatablePlacements": "mig-timesliced-vgpu",
}


def _accounting_stats_args(v: VgpuEnv) -> tuple[Any, ...]:
    vi = _answering(v, v.sim.nvmlVgpuInstanceGetAccountingPids, v.vis)
    _count, pids = v.sim.nvmlVgpuInstanceGetAccountingPids(vi)
    return (vi, pids[0])


CORE = core_rows()
VGPU = vgpu_rows()


@pytest.fixture(scope="module")
def implemented() -> dict[str, str]:
    """Simulated function name -> module of the provider that implements it."""
    sim = create(parse_scenario(CONTRACT_SCENARIO), ManualClock())
    core = sim._core
    out: dict[str, str] = {}
    for provider in core.providers:
        for name in dir(type(provider)):
            if hasattr(getattr(type(provider), name), "_nvml_spec"):
                out[name] = type(provider).__module__
    assert set(out) == set(sim.implemented_functions)
    return out


def test_every_simulated_function_has_a_return_type_row(implemented: dict[str, str]) -> None:
    rows = {name for name, _, _ in CORE + VGPU}
    assert sorted(set(implemented) - rows) == []
    assert sorted(rows - set(implemented)) == []


def test_core_functions_are_checked_by_core_rows(implemented: dict[str, str]) -> None:
    core_names = {n for n, module in implemented.items() if module.startswith("vgpumon.sim.api.")}
    assert core_names <= {name for name, _, _ in CORE}


def _signature(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_signatures_match_pynvml(implemented: dict[str, str]) -> None:
    sim = create(parse_scenario(CONTRACT_SCENARIO), ManualClock())
    mismatched = []
    for name in sorted(implemented):
        real = getattr(pynvml, name, None)
        assert inspect.isfunction(real), f"{name} is not a pynvml function"
        if _signature(real) != _signature(getattr(sim, name)):
            ours = inspect.signature(getattr(sim, name))
            mismatched.append(f"{name}: pynvml {inspect.signature(real)} vs sim {ours}")
    assert mismatched == []


@pytest.fixture(scope="module")
def env() -> Env:
    return Env()


@pytest.mark.parametrize(
    ("name", "args", "expect"), CORE, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CORE)]
)
def test_core_return_types(
    env: Env, name: str, args: Callable[[Env], tuple[Any, ...]], expect: Expect
) -> None:
    arguments = args(env)
    value = getattr(env.sim, name)(*arguments)
    assert expect.check(value, arguments), f"{name} returned {type(value).__name__}: {value!r}"


@pytest.fixture(scope="module")
def vgpu_env() -> VgpuEnv:
    if not {"kvm-vgpu-timesliced", "h100-mig-backed-vgpu"} <= set(builtin_scenarios()):
        pytest.skip("the vGPU host scenarios are not part of this build")
    return VgpuEnv()


@pytest.mark.parametrize(("name", "args", "expect"), VGPU, ids=[n for n, _, _ in VGPU])
def test_vgpu_return_types(
    vgpu_env: VgpuEnv, name: str, args: Callable[[VgpuEnv], tuple[Any, ...]], expect: Expect
) -> None:
    try:
        arguments = args(vgpu_env)
        on_r595 = any(a is vgpu_env.h595 or a is vgpu_env.gi for a in arguments)
        target = vgpu_env.r595 if on_r595 else vgpu_env.sim
        if name in SURFACES:
            target = vgpu_env.surface(SURFACES[name])
        value = getattr(target, name)(*arguments)
    except pynvml.NVMLError as err:
        assert name not in SURFACES, f"{name} must answer in {SURFACES[name]}: {err}"
        pytest.skip(f"{name} does not answer in the built-in vGPU scenarios ({err})")
    assert expect.check(value, arguments), f"{name} returned {type(value).__name__}: {value!r}"
