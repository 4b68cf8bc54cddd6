"""Simulated vGPU time-slice scheduler: who gets the GPU under each policy, and the log it writes.

Shares (what each time-sliced vGPU gets, from the vGPUs' demand at that instant):

* **best effort** follows demand: every vGPU gets what it asks for while the total fits; when the
  GPU is oversubscribed each gets a share proportional to its demand.
* **equal share** splits the GPU equally between the busy vGPUs (demand > 0); one that needs less
  than an equal split keeps only what it needs and the rest is shared by the others (max-min fair).
* **fixed share** gives every vGPU its own slot whatever the load: ``1 / max_instances`` of its type
  (``placement size / slots`` in heterogeneous mode). The slot counts as run time in the log even
  when the vGPU has nothing to do; its utilization is ``min(demand, slot)``.

MIG-backed vGPUs are not time-sliced: they get their demand, and the device-level scheduler calls
answer NOT_SUPPORTED with MIG on (the per-GPU-instance calls too, before Blackwell GB20x, which is
not simulated).

The encoder engines (R590+ engine ids, read through the ``_v2`` log call) are scheduled alike:
NVENC0 shares out the vGPUs' ``encoder`` demand under the same policy, with its own log; NVENC1
has nothing scheduled (an empty log).

The log is generated period by period: a period gives each scheduled vGPU one run of
``share × P`` (``P = timeslice × scheduled vGPUs``) followed by a ``PREEMPT_NS`` switch, and writes
one entry per run, stamped when the runlist is preempted, with that vGPU's cumulative run and
preemption time; ``swRunlistId`` is the vGPU's 0-based position in the active-vGPU list. Preemption
time is the switch plus the time the vGPU had work left but was held off: ``(demand - share) × P``
where it asked for more than it got (the meaning vgpumon reads it with, docs/verdicts.md). The
driver keeps the last 200 entries. Periods are generated up to the time of each read; when reads
are far apart, the time before the last stretch that the ring can still hold is integrated in
coarse steps (same totals, no entries), so a long idle reader costs little.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, NoReturn

import pynvml

from vgpumon.sim import registry
from vgpumon.sim.core import SimCore, nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.state import GpuState
from vgpumon.sim.vgpu import ARR_MODES, POLICIES, InstanceRuntime, VgpuHost, host_of

RING = pynvml.NVML_SCHEDULER_SW_MAX_LOG_ENTRIES
PREEMPT_NS = 10_000
GPU_NS_AT_ZERO = 1_000_000_000_000  # the GPU's ns counter at scenario t = 0 (any boot time)
COARSE_STEP = 0.1
ENGINE_GRAPHICS = pynvml.NVML_VGPU_SCHEDULER_ENGINE_TYPE_GRAPHICS
ENGINE_NVENC0 = pynvml.NVML_VGPU_SCHEDULER_ENGINE_TYPE_NVENC0
V2_DRIVER = 595  # header 13.2: the _v2 scheduler calls (FUNCTION_NOT_FOUND before)
GI_DRIVER = 575  # header 12.9: per-GPU-instance vGPU calls


def driver_major(core: SimCore) -> int:
    try:
        return int(core.scenario.driver.version.split(".")[0])
    except ValueError:
        return 0


def need_driver(core: SimCore, major: int) -> None:
    """FUNCTION_NOT_FOUND for a symbol newer than the simulated driver (pynvml's own answer)."""
    if driver_major(core) < major:
        raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


# --------------------------------------------------------------------------- shares


@dataclass(frozen=True)
class Share:
    granted: float  # share of GPU time the scheduler gives (what the log shows as run time)
    used: float  # share of GPU time the vGPU actually keeps busy (its utilization)


def water_fill(demands: dict[int, float]) -> dict[int, float]:
    """Max-min fair split of 1.0 among positive demands."""
    out = {k: 0.0 for k in demands}
    left = sorted((d, k) for k, d in demands.items() if d > 0)
    remaining = 1.0
    while left:
        level = remaining / len(left)
        d, k = left[0]
        if d <= level:
            out[k] = d
            remaining -= d
            left.pop(0)
            continue
        for _, k2 in left:
            out[k2] = level
        break
    return out


def fixed_slot(host: VgpuHost, inst: InstanceRuntime) -> float:
    vtype = host.types[inst.spec.type_id]
    if host.heterogeneous:
        return host.placement_size(vtype) / host.slots
    return 1.0 / vtype.max_instances


def compute_shares(
    host: VgpuHost, active: list[InstanceRuntime], t: float, load: str = "sm"
) -> dict[int, Share]:
    """Each active vGPU's share of one engine at ``t``: the graphics engine from the ``sm``
    demand, an encoder engine from the ``encoder`` one (the same policy schedules both)."""
    demands = {i.id: i.load[load](t) if load != "sm" else i.demand(t) for i in active}
    sliced = [i for i in active if host.types[i.spec.type_id].gi_profile is None]
    out = {
        i.id: Share(demands[i.id], demands[i.id])
        for i in active
        if host.types[i.spec.type_id].gi_profile is not None
    }
    policy = host.scheduler.policy
    if policy == POLICIES["fixed_share"]:
        slots = {i.id: fixed_slot(host, i) for i in sliced}
        total = sum(slots.values())
        scale = 1.0 / total if total > 1.0 else 1.0
        for i in sliced:
            slot = slots[i.id] * scale
            out[i.id] = Share(slot, min(demands[i.id], slot))
    elif policy == POLICIES["equal_share"]:
        fair = water_fill({i.id: demands[i.id] for i in sliced})
        out.update({k: Share(v, v) for k, v in fair.items()})
    else:
        total = sum(demands[i.id] for i in sliced)
        scale = 1.0 / total if total > 1.0 else 1.0
        for i in sliced:
            v = demands[i.id] * scale
            out[i.id] = Share(v, v)
    return out


class SchedulerSim:
    """Per-GPU scheduler state (``GpuState.ext["vgpu_scheduler"]``): the log ring and totals."""

    def __init__(self, host: VgpuHost, load: str = "sm") -> None:
        self.host = host
        self.load = load  # the demand this engine schedules: "sm" (graphics) or "encoder"
        self.gen_t = 0.0
        self.ring: deque[tuple[int, int, int, int, int, int]] = deque(maxlen=RING)
        self.run_total: dict[int, int] = {}
        self.preempt_total: dict[int, int] = {}
        self.entries_written = 0
        self._periods = 0
        self._lock = threading.Lock()

    # ---------------------------------------------------------------- shares

    def demand(self, inst: InstanceRuntime, t: float) -> float:
        """What the vGPU asks of this scheduler's engine at ``t``."""
        return inst.load[self.load](t) if self.load != "sm" else inst.demand(t)

    def shares(self, t: float) -> dict[int, Share]:
        """The shares at ``t``: a pure function of the scenario and ``t``, so computed on each
        ask. (A cache of recent instants held megabytes on a large host and saved nothing: a
        reader asks for each sample instant once, the ones newer than its cursor.)"""
        return compute_shares(self.host, self.host.active(t), t, self.load)

    # ---------------------------------------------------------------- log

    @property
    def timeslice_s(self) -> float:
        return self.host.scheduler.timeslice_ns / 1e9

    def _scheduled(self, t: float) -> list[tuple[int, InstanceRuntime, float, float]]:
        """(runlist, instance, granted share, share held off) of every vGPU the scheduler runs
        at ``t``; held off: what it asked for beyond what it was granted."""
        active = self.host.active(t)
        shares = compute_shares(self.host, active, t, self.load)
        out = []
        for pos, inst in enumerate(active):
            granted = shares[inst.id].granted
            if self.host.types[inst.spec.type_id].gi_profile is None and granted > 0:
                held = max(0.0, min(1.0, self.demand(inst, t)) - granted)
                out.append((pos, inst, granted, held))
        return out

    def advance(self, t: float) -> None:
        """Generate the log up to scenario time ``t``."""
        with self._lock:
            scheduled = self._scheduled(self.gen_t)
            period = self.timeslice_s * max(1, len(scheduled)) + len(scheduled) * PREEMPT_NS / 1e9
            exact_window = max(1.0, (RING + 1) * period)
            if t - self.gen_t > exact_window + COARSE_STEP:
                self._coarse(t - exact_window)
            while True:
                scheduled = self._scheduled(self.gen_t)
                if not scheduled:
                    if self.gen_t + self.timeslice_s > t:
                        break
                    self.gen_t += self.timeslice_s
                    continue
                budget_ns = self.host.scheduler.timeslice_ns * len(scheduled)
                length = (budget_ns + len(scheduled) * PREEMPT_NS) / 1e9
                if self.gen_t + length > t:
                    break
                cursor_ns = self._gpu_ns(self.gen_t)
                for runlist, inst, share, held in scheduled:
                    run = round(share * budget_ns)
                    cursor_ns += run + PREEMPT_NS
                    total = self.run_total.get(inst.id, 0) + run
                    preempt = (
                        self.preempt_total.get(inst.id, 0) + PREEMPT_NS + round(held * budget_ns)
                    )
                    self.run_total[inst.id] = total
                    self.preempt_total[inst.id] = preempt
                    target = self.host.scheduler.timeslice_ns
                    self.ring.append((cursor_ns, total, run, runlist, target, preempt))
                    self.entries_written += 1
                self.gen_t += length
                self._periods += 1
                if self._periods % 256 == 0:
                    self._prune({i.id for i in self.host.active(self.gen_t)})

    def _coarse(self, until: float) -> None:
        """Advance totals to ``until`` without writing entries (the ring would drop them)."""
        while self.gen_t < until:
            step = min(COARSE_STEP, until - self.gen_t)
            scheduled = self._scheduled(self.gen_t)
            if scheduled:
                budget = self.timeslice_s * len(scheduled)
                length = budget + len(scheduled) * PREEMPT_NS / 1e9
                periods = step / length
                for _, inst, share, held in scheduled:
                    self.run_total[inst.id] = self.run_total.get(inst.id, 0) + round(
                        share * budget * 1e9 * periods
                    )
                    self.preempt_total[inst.id] = self.preempt_total.get(inst.id, 0) + round(
                        (PREEMPT_NS + held * budget * 1e9) * periods
                    )
                self.entries_written += round(periods * len(scheduled))
            self.gen_t += step
        self.ring.clear()

    def _prune(self, keep: set[int]) -> None:
        """Drop the totals of destroyed vGPUs (bounded memory under churn)."""
        for table in (self.run_total, self.preempt_total):
            for vid in [v for v in table if v not in keep]:
                del table[vid]

    @staticmethod
    def _gpu_ns(t: float) -> int:
        return GPU_NS_AT_ZERO + round(t * 1e9)

    def entries(self, t: float) -> list[tuple[int, int, int, int, int, int]]:
        self.advance(t)
        with self._lock:
            return list(self.ring)


def scheduler_of(gpu: GpuState) -> SchedulerSim | None:
    sim = gpu.ext.get("vgpu_scheduler")
    return sim if isinstance(sim, SchedulerSim) else None


def encoder_scheduler_of(gpu: GpuState) -> SchedulerSim | None:
    """NVENC0's scheduler: the vGPUs' ``encoder`` demand under the same policy."""
    sim = gpu.ext.get("vgpu_scheduler_nvenc0")
    return sim if isinstance(sim, SchedulerSim) else None


def _factory(gpu: GpuState, core: SimCore) -> SchedulerSim | None:
    host = host_of(gpu)
    return SchedulerSim(host) if host is not None else None


def _encoder_factory(gpu: GpuState, core: SimCore) -> SchedulerSim | None:
    host = host_of(gpu)
    return SchedulerSim(host, "encoder") if host is not None else None


registry.register_gpu_state("vgpu_scheduler", _factory)
registry.register_gpu_state("vgpu_scheduler_nvenc0", _encoder_factory)


# --------------------------------------------------------------------------- the API


def _fill_params(params: Any, arr_mode: int, policy: int, timeslice: int, avg: int) -> None:
    """Write the union member that matches ``arrMode`` (docs/nvml-notes.md §7.2)."""
    if policy == POLICIES["best_effort"]:
        timeslice, avg = 0, 0  # "0 when there is no active scheduling"
    if arr_mode == ARR_MODES["enable"]:
        params.vgpuSchedDataWithARR.avgFactor = avg
        params.vgpuSchedDataWithARR.timeslice = timeslice
    else:
        params.vgpuSchedData.timeslice = timeslice


_ENTRY = {48: struct.Struct("<QQQI4xQQ"), 56: struct.Struct("<QQQI4xQQI4x")}


def _fill_entries(target: Any, rows: list[tuple[int, int, int, int, int, int]]) -> None:
    """Write log entries into a v1 or v2 log structure (packed bytes: 200 entries, ten times a
    second per GPU, are too many for pynvml's per-field attribute hooks)."""
    target.entriesCount = len(rows)
    array = target.logEntries
    size = ctypes.sizeof(array._type_)
    layout = _ENTRY[size]
    extra = (0,) if size == 56 else ()
    data = b"".join(layout.pack(*row, *extra) for row in rows)
    ctypes.memmove(ctypes.addressof(array), data, len(data))


def _struct(value: Any) -> Any:
    return value._obj if hasattr(value, "_obj") else value


@register_provider
class SchedulerApi(Provider):
    def _sched(self, handle: Any) -> SchedulerSim:
        gpu = self.core.physical(handle)
        sim = scheduler_of(gpu)
        if gpu.mig_enabled or sim is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return sim

    def _gi_sched(self, gpu_instance: Any) -> NoReturn:
        # Time-sliced vGPUs inside a GPU instance are a Blackwell GB20x feature, not simulated:
        # every GPU instance answers as a pre-GB20x one does.
        self.core.gpu_instance(gpu_instance)
        raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    @nvml_function()
    def nvmlDeviceGetVgpuSchedulerState(self, handle: Any) -> Any:
        sim = self._sched(handle)
        spec = sim.host.scheduler
        out = pynvml.c_nvmlVgpuSchedulerGetState_t()
        out.schedulerPolicy, out.arrMode = spec.policy, spec.arr
        _fill_params(
            out.schedulerParams, spec.arr, spec.policy, spec.timeslice_ns, spec.average_factor
        )
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuSchedulerLog(self, handle: Any) -> Any:
        sim = self._sched(handle)
        spec = sim.host.scheduler
        out = pynvml.c_nvmlVgpuSchedulerLog_t()
        out.engineId = ENGINE_GRAPHICS
        out.schedulerPolicy, out.arrMode = spec.policy, spec.arr
        _fill_params(
            out.schedulerParams, spec.arr, spec.policy, spec.timeslice_ns, spec.average_factor
        )
        _fill_entries(out, sim.entries(self.core.t()))
        return out

    @nvml_function()
    def nvmlDeviceGetVgpuSchedulerCapabilities(self, handle: Any) -> Any:
        sim = self._sched(handle)
        spec = sim.host.scheduler
        out = pynvml.c_nvmlVgpuSchedulerCapabilities_t()
        for i, policy in enumerate(
            spec.supported[: pynvml.NVML_SUPPORTED_VGPU_SCHEDULER_POLICY_COUNT]
        ):
            out.supportedSchedulers[i] = policy
        out.maxTimeslice, out.minTimeslice = spec.max_timeslice_ns, spec.min_timeslice_ns
        out.isArrModeSupported = 1
        out.maxFrequencyForARR, out.minFrequencyForARR = 960, 100
        out.maxAvgFactorForARR, out.minAvgFactorForARR = 60, 1
        return out

    # ---------------------------------------------------------------- _v2 (R595+)

    def _v2(self, handle: Any, struct: Any) -> tuple[SchedulerSim, Any]:
        need_driver(self.core, V2_DRIVER)  # the symbol is missing before R595, on any GPU
        gpu = self.core.physical(handle)
        if gpu.spec.virtualization_mode != 3:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self._sched(handle), _struct(struct)

    @nvml_function()
    def nvmlDeviceGetVgpuSchedulerState_v2(
        self, handle: Any, c_vgpu_sched_state_info_v2: Any
    ) -> Any:
        sim, out = self._v2(handle, c_vgpu_sched_state_info_v2)
        spec = sim.host.scheduler
        if out.engineId != ENGINE_GRAPHICS:
            out.schedulerPolicy, out.avgFactor, out.timeslice = POLICIES["best_effort"], 0, 0
            return c_vgpu_sched_state_info_v2
        best = spec.policy == POLICIES["best_effort"]
        out.schedulerPolicy = spec.policy
        out.avgFactor = 0 if best or spec.arr != ARR_MODES["enable"] else spec.average_factor
        out.timeslice = 0 if best else spec.timeslice_ns
        return c_vgpu_sched_state_info_v2

    @nvml_function()
    def nvmlDeviceGetVgpuSchedulerLog_v2(self, handle: Any, c_vgpu_sched_log_info_v2: Any) -> Any:
        sim, out = self._v2(handle, c_vgpu_sched_log_info_v2)
        spec = sim.host.scheduler
        if out.engineId == ENGINE_NVENC0:
            # The first encoder engine schedules the vGPUs' encoder demand (R590+ engine ids);
            # the second has nothing scheduled in the simulator.
            encoder = encoder_scheduler_of(self.core.physical(handle))
            if encoder is not None:
                sim = encoder
        elif out.engineId != ENGINE_GRAPHICS:
            out.schedulerPolicy, out.entriesCount = spec.policy, 0
            return c_vgpu_sched_log_info_v2
        best = spec.policy == POLICIES["best_effort"]
        out.schedulerPolicy = spec.policy
        out.avgFactor = 0 if best or spec.arr != ARR_MODES["enable"] else spec.average_factor
        out.timeslice = 0 if best else spec.timeslice_ns
        _fill_entries(out, sim.entries(self.core.t()))
        return c_vgpu_sched_log_info_v2

    # ---------------------------------------------------------------- per GPU instance

    def _gi_call(self, gpu_instance: Any, struct: Any, version: int | None) -> NoReturn:
        need_driver(self.core, GI_DRIVER)
        target = _struct(struct)
        if version is not None and target.version != version:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        self._gi_sched(gpu_instance)

    @nvml_function()
    def nvmlGpuInstanceGetVgpuSchedulerState(
        self, gpuInstance: Any, c_vgpu_sched_state_info: Any
    ) -> Any:
        return self._gi_call(
            gpuInstance, c_vgpu_sched_state_info, pynvml.nvmlVgpuSchedulerStateInfo_v1
        )

    @nvml_function()
    def nvmlGpuInstanceGetVgpuSchedulerLog(
        self, gpuInstance: Any, c_vgpu_sched_log_info: Any
    ) -> Any:
        return self._gi_call(gpuInstance, c_vgpu_sched_log_info, pynvml.nvmlVgpuSchedulerLogInfo_v1)

    @nvml_function()
    def nvmlGpuInstanceGetVgpuSchedulerState_v2(
        self, gpuInstance: Any, c_vgpu_sched_state_info_v2: Any
    ) -> Any:
        need_driver(self.core, V2_DRIVER)
        return self._gi_call(gpuInstance, c_vgpu_sched_state_info_v2, None)

    @nvml_function()
    def nvmlGpuInstanceGetVgpuSchedulerLog_v2(
        self, gpuInstance: Any, c_vgpu_sched_log_info_v2: Any
    ) -> Any:
        need_driver(self.core, V2_DRIVER)
        return self._gi_call(gpuInstance, c_vgpu_sched_log_info_v2, None)
