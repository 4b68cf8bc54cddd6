"""Simulated health surfaces of newer drivers: recovery action, repair status, unrepairable
memory, confidential computing and accounting stats.

Scenario keys, per GPU (docs/scenarios.md)::

    recovery:
      action: [[0s, none], [30s, gpu_reset], [90s, none]]   # or one name for all time
      channel_repair_pending: false                          # a bool, or [[at, bool], ...]
      tpc_repair_pending: [[0s, false], [40s, true]]
      unrepairable_memory: false
    conf_compute:
      feature: true            # CC mode on
      environment: prod        # unavailable | sim | prod
      devtools: false
      multi_gpu_mode: none     # none | protected_pcie | nvle
      cpu: amd_sev_snp         # none | amd_sev | intel_tdx | amd_sev_snp | amd_snp_vtom
      ready: [[0s, false], [20s, true]]
      protected_memory: 70GiB
      protected_memory_used: 12GiB
    accounting: true           # accounting mode on (per-process records of the GPU's processes)

Driver gating, as pynvml answers on an older driver (FUNCTION_NOT_FOUND, 13): repair status before
R580, the unrepairable-memory flag before R590, ``nvmlDeviceGetAccountingStats_v2`` before R610;
the recovery-action field answers "not supported" per entry before R565. Without a section the
driver has the calls and reports nothing wrong (no action, no repair, CC off, accounting off).

**Accounting.** The driver samples each running process's utilization on a grid of
:data:`ACCOUNTING_PERIOD` seconds from its start: ``sumGpuUtil`` is the sum of the samples'
percentages (each rounded), ``sampleCount`` their number, ``gpuUtilization`` the rounded mean,
``time`` the lifetime in ms once the process ended (0 while it runs). A test can therefore
hand-compute every record from the process's utilization pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pynvml
import yaml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_gpu_state, register_provider
from vgpumon.sim.scheduler import driver_major, need_driver
from vgpumon.sim.schema import GPU, Bool, Ctx, Enum, Key, Map, Seq, Size, Type, _StepType
from vgpumon.sim.state import GpuState

RECOVERY_ACTIONS = {
    "none": 0,
    "gpu_reset": 1,
    "node_reboot": 2,
    "drain_p2p": 3,
    "drain_and_reset": 4,
    "recover_imex_domain": 5,
    "bus_reset": 6,
    "system_reboot": 7,
}
CC_ENVIRONMENTS = {"unavailable": 0, "sim": 1, "prod": 2}
CC_MULTI_GPU = {"none": 0, "protected_pcie": 1, "nvle": 2}
CC_CPUS = {"none": 0, "amd_sev": 1, "intel_tdx": 2, "amd_sev_snp": 3, "amd_snp_vtom": 4}
RECOVERY_DRIVER = 565
REPAIR_DRIVER = 580
UNREPAIRABLE_DRIVER = 590
ACCOUNTING_V2_DRIVER = 610
ACCOUNTING_PERIOD = 0.2  # seconds between the driver's per-process samples
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
HOST_VGPU = 3  # NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU

Steps = tuple[tuple[float, Any], ...]


class Timeline(Type):
    """A value for all time, or ``[[at, value], ...]`` steps (the first holds before its time)."""

    def __init__(self, value_type: Type) -> None:
        self.value_type = value_type
        self.expected = f"{value_type.expected}, or a list of [at, value] steps"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> Steps:
        if isinstance(node, yaml.SequenceNode):
            steps = Seq(_StepType(self.value_type), min_len=1).parse(node, path, ctx)
            return tuple(sorted(steps, key=lambda s: s[0]))
        return ((0.0, self.value_type.parse(node, path, ctx)),)


def at(steps: Steps, t: float) -> Any:
    value = steps[0][1]
    for when, v in steps:
        if when <= t:
            value = v
    return value


RECOVERY = Map(
    {
        "action": Key(Timeline(Enum(RECOVERY_ACTIONS)), "what the driver asks for", "none"),
        "channel_repair_pending": Key(Timeline(Bool()), "a channel repair is pending", "false"),
        "tpc_repair_pending": Key(Timeline(Bool()), "a TPC repair is pending", "false"),
        "unrepairable_memory": Key(Timeline(Bool()), "memory beyond repair", "false"),
    },
    expected="a recovery mapping",
)
CONF_COMPUTE = Map(
    {
        "feature": Key(Bool(), "confidential computing on", "false"),
        "environment": Key(Enum(CC_ENVIRONMENTS), ", ".join(CC_ENVIRONMENTS), "prod when on"),
        "devtools": Key(Bool(), "developer-tools mode", "false"),
        "multi_gpu_mode": Key(Enum(CC_MULTI_GPU), ", ".join(CC_MULTI_GPU), "none"),
        "cpu": Key(Enum(CC_CPUS), ", ".join(CC_CPUS), "none"),
        "gpus_capable": Key(Bool(), "the GPUs are CC capable", "true when on"),
        "ready": Key(Timeline(Bool()), "GPUs accept client work", "true when on"),
        "protected_memory": Key(Size(lo=0), "protected memory of the GPU", "90% of memory"),
        "protected_memory_used": Key(Size(lo=0), "protected memory in use", "0"),
    },
    expected="a confidential computing mapping",
)
GPU.register("recovery", Key(RECOVERY, "recovery action and repair status over time", "none"))
GPU.register("conf_compute", Key(CONF_COMPUTE, "confidential computing state", "off"))
GPU.register("accounting", Key(Bool(), "accounting mode (per-process records)", "false"))


@dataclass
class DriverHealth:
    """Per-GPU state (``GpuState.ext["driver_health"]``): the parsed sections."""

    recovery: dict[str, Steps]
    cc: dict[str, Any]
    accounting: bool
    driver_major: int


def _factory(gpu: GpuState, core: Any) -> DriverHealth:
    extra = gpu.spec.extra
    return DriverHealth(
        recovery=dict(extra.get("recovery") or {}),
        cc=dict(extra.get("conf_compute") or {}),
        accounting=bool(extra.get("accounting", False)),
        driver_major=driver_major(core),
    )


register_gpu_state("driver_health", _factory)


def health_of(gpu: GpuState) -> DriverHealth:
    found: DriverHealth = gpu.ext["driver_health"]
    return found


def recovery_action(gpu: GpuState, t: float) -> int | None:
    """Field 230 (the field-value simulation's source): None (not supported) before R565."""
    health = health_of(gpu)
    if health.driver_major < RECOVERY_DRIVER:
        return None
    steps = health.recovery.get("action")
    return int(at(steps, t)) if steps else 0


def _flag(gpu: GpuState, key: str, t: float) -> int:
    steps = health_of(gpu).recovery.get(key)
    return int(bool(at(steps, t))) if steps else 0


def accounting_record(process: Any, t: float, period: float = ACCOUNTING_PERIOD) -> dict[str, Any]:
    """The driver's record of one simulated process at scenario time ``t``."""
    spec = process.spec
    end = t if spec.stop is None or t < spec.stop else spec.stop
    count = max(0, math.floor((end - spec.start) / period + 1e-9) + 1) if end >= spec.start else 0
    sm = process.utilization.get("sm")
    total = sum(round(100 * sm(spec.start + k * period)) for k in range(count)) if sm else 0
    running = spec.running(t)
    return {
        "isRunning": int(running),
        "sampleCount": count,
        "sumGpuUtil": total,
        "gpuUtilization": round(total / count) if count else 0,
        "time": 0 if running else round((spec.stop - spec.start) * 1000),
        "maxMemoryUsage": process.memory(min(t, end)),
    }


@register_provider
class DriverHealthApi(Provider):
    # ---------------------------------------------------------------- recovery and repair

    @nvml_function()
    def nvmlDeviceGetRepairStatus(self, device: Any) -> list[int]:
        need_driver(self.core, REPAIR_DRIVER)
        gpu = self.core.physical(device)
        t = self.core.t()
        return [_flag(gpu, "channel_repair_pending", t), _flag(gpu, "tpc_repair_pending", t)]

    @nvml_function()
    def nvmlDeviceGetUnrepairableMemoryFlag_v1(self, device: Any) -> int:
        need_driver(self.core, UNREPAIRABLE_DRIVER)
        gpu = self.core.physical(device)
        return _flag(gpu, "unrepairable_memory", self.core.t())

    # ---------------------------------------------------------------- confidential computing

    def _cc(self) -> dict[str, Any]:
        """The system's CC section: the first GPU's (CC is a property of the whole system)."""
        return health_of(self.core.gpus[0]).cc if self.core.gpus else {}

    @nvml_function(target=None)
    def nvmlSystemGetConfComputeState(self) -> Any:
        cc = self._cc()
        on = bool(cc.get("feature"))
        state = pynvml.c_nvmlConfComputeSystemState_t()
        state.environment = cc.get("environment", CC_ENVIRONMENTS["prod" if on else "unavailable"])
        state.ccFeature = int(on)
        state.devToolsMode = int(bool(cc.get("devtools")))
        return state

    @nvml_function(target=None)
    def nvmlSystemGetConfComputeSettings(self, settings: Any) -> int:
        # pynvml's wrapper returns the C code; vgpumon reads the filled structure.
        cc = self._cc()
        on = bool(cc.get("feature"))
        settings = getattr(settings, "_obj", settings)
        settings.environment = cc.get(
            "environment", CC_ENVIRONMENTS["prod" if on else "unavailable"]
        )
        settings.ccFeature = int(on)
        settings.devToolsMode = int(bool(cc.get("devtools")))
        settings.multiGpuMode = cc.get("multi_gpu_mode", 0)
        return pynvml.NVML_SUCCESS

    @nvml_function(target=None)
    def nvmlSystemGetConfComputeCapabilities(self) -> Any:
        cc = self._cc()
        caps = pynvml.c_nvmlConfComputeSystemCaps_t()
        caps.cpuCaps = cc.get("cpu", 0)
        caps.gpusCaps = int(cc.get("gpus_capable", bool(cc.get("feature"))))
        return caps

    @nvml_function(target=None)
    def nvmlSystemGetConfComputeGpusReadyState(self) -> int:
        cc = self._cc()
        steps = cc.get("ready")
        if steps:
            return int(bool(at(steps, self.core.t())))
        return int(bool(cc.get("feature")))

    def _protected(self, device: Any) -> tuple[GpuState, dict[str, Any]]:
        gpu = self.core.physical(device)
        cc = self._cc()
        if not cc.get("feature"):
            raise nvml_error(NOT_SUPPORTED)
        return gpu, cc

    @nvml_function()
    def nvmlDeviceGetConfComputeMemSizeInfo(self, device: Any) -> Any:
        gpu, cc = self._protected(device)
        total = int(cc.get("protected_memory", gpu.spec.memory_total * 0.9))
        info = pynvml.c_nvmlConfComputeMemSizeInfo_t()
        info.protectedMemSizeKib = total // 1024
        info.unprotectedMemSizeKib = max(0, gpu.spec.memory_total - total) // 1024
        return info

    @nvml_function()
    def nvmlDeviceGetConfComputeProtectedMemoryUsage(self, device: Any) -> Any:
        gpu, cc = self._protected(device)
        total = int(cc.get("protected_memory", gpu.spec.memory_total * 0.9))
        used = min(total, int(cc.get("protected_memory_used", 0)))
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = total, used, total - used
        return memory

    # ---------------------------------------------------------------- accounting

    def _accounted(self, handle: Any, pid: Any) -> dict[str, Any]:
        gpu = self.core.physical(handle)
        if not health_of(gpu).accounting:
            raise nvml_error(NOT_SUPPORTED)
        t = self.core.t()
        for p in gpu.processes:
            if p.pid == pid and p.spec.start <= t:
                record = accounting_record(p, t)
                record["startTime"] = self.core.timestamp_us(p.spec.start)
                return record
        raise nvml_error(NOT_FOUND)

    @nvml_function()
    def nvmlDeviceGetAccountingMode(self, handle: Any) -> int:
        gpu = self.core.physical(handle)
        if gpu.spec.virtualization_mode == HOST_VGPU:
            raise nvml_error(NOT_SUPPORTED)  # vGPU hosts account per vGPU (docs/nvml-notes.md)
        if gpu.spec.mig_enabled:
            return pynvml.NVML_FEATURE_DISABLED  # MIG forces accounting off
        return int(health_of(gpu).accounting)

    @nvml_function()
    def nvmlDeviceGetAccountingPids(self, handle: Any) -> list[int]:
        gpu = self.core.physical(handle)
        if not health_of(gpu).accounting or gpu.spec.mig_enabled:
            return []
        t = self.core.t()
        return [p.pid for p in gpu.processes if p.spec.start <= t]

    @nvml_function()
    def nvmlDeviceGetAccountingStats(self, handle: Any, pid: int) -> Any:
        record = self._accounted(handle, pid)
        stats = pynvml.c_nvmlAccountingStats_t()
        for name in ("gpuUtilization", "maxMemoryUsage", "time", "startTime", "isRunning"):
            setattr(stats, name, record[name])
        return stats

    @nvml_function()
    def nvmlDeviceGetAccountingStats_v2(self, handle: Any, pid: int) -> Any:
        need_driver(self.core, ACCOUNTING_V2_DRIVER)
        record = self._accounted(handle, pid)
        stats = pynvml.c_nvmlAccountingStats_v2_t()
        stats.pid = pid
        for name, value in record.items():
            setattr(stats, name, value)
        return stats
