"""Runtime state of the simulated GPUs: what each one reads at scenario time ``t``.

Everything here is a pure function of ``t`` except the two integrals (energy and PCIe byte
counters), which are accumulated on a fixed grid from t = 0 so they too depend only on ``t``, not on
when or how often they were asked. The load model follows the load generator: NVML utilization is
the duty cycle, GPM SM activity is duty × SM fraction, occupancy scales with resident warps
(docs/nvml-notes.md §14). MIG GPUs aggregate their GPU instances, weighted by SM count.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vgpumon.sim.patterns import Evaluator, PatternSpec
from vgpumon.sim.scenario_build import ci_name
from vgpumon.sim.scenario_keys import LOAD_FIELDS
from vgpumon.sim.scenario_specs import (
    ComputeInstanceSpec,
    GpuInstanceSpec,
    GpuSpec,
    MigProfile,
    ProcessSpec,
)

UTIL_PERIOD = 0.2  # NVML's utilization sample cadence (docs/nvml-notes.md §4.13)
UTIL_DEPTH = 72
POWER_PERIOD = 0.02
POWER_DEPTH = 120
# seconds an exited process keeps its last sample (docs/nvml-notes.md §4.12)
PROCESS_SAMPLE_LINGER = 1.5
INTEGRATION_STEP = 0.1


@dataclass(frozen=True)
class Activity:
    """Engine activity ratios at one instant (multiplied through: sm = duty × SM fraction)."""

    graphics: float = 0.0
    sm: float = 0.0
    occupancy: float = 0.0
    tensor: float = 0.0
    fp64: float = 0.0
    fp32: float = 0.0
    fp16: float = 0.0
    integer: float = 0.0
    dram: float = 0.0
    pcie_tx: float = 0.0  # bytes/s
    pcie_rx: float = 0.0
    encoder: float = 0.0
    decoder: float = 0.0
    jpeg: float = 0.0
    ofa: float = 0.0


IDLE = Activity()


class LoadModel:
    """A ``load:`` mapping bound to its seed; ``at(t)`` gives the activity."""

    def __init__(self, spec: dict[str, PatternSpec], seed: int, salt: str) -> None:
        self.fields: dict[str, Evaluator] = {}
        for name, (unit, default, _doc) in LOAD_FIELDS.items():
            pattern = spec.get(name, PatternSpec.constant(default))
            hi = 1.0 if unit == "ratio" else None
            self.fields[name] = pattern.build(seed, f"{salt}.{name}", lo=0.0, hi=hi)

    def at(self, t: float) -> Activity:
        f = {name: ev(t) for name, ev in self.fields.items()}
        duty, busy = f["duty"], f["duty"] * f["sm_fraction"]
        return Activity(
            graphics=duty,
            sm=busy,
            occupancy=busy * f["occupancy"],
            tensor=busy * f["tensor"],
            fp64=busy * f["fp64"],
            fp32=busy * f["fp32"],
            fp16=busy * f["fp16"],
            integer=busy * f["integer"],
            dram=f["dram"],
            pcie_tx=f["pcie_tx"],
            pcie_rx=f["pcie_rx"],
            encoder=f["encoder"],
            decoder=f["decoder"],
            jpeg=f["jpeg"],
            ofa=f["ofa"],
        )


def combine(parts: list[tuple[float, Activity]]) -> Activity:
    """Activity of a whole made of parts with weights (their share of the SMs).

    Time-based activity (graphics) is the busiest part; SM-based ratios add up by weight; PCIe
    traffic adds up unweighted.
    """
    if not parts:
        return IDLE

    def weighted(attr: str) -> float:
        return min(1.0, sum(w * getattr(a, attr) for w, a in parts))

    return Activity(
        graphics=max(a.graphics for _, a in parts),
        sm=weighted("sm"),
        occupancy=weighted("occupancy"),
        tensor=weighted("tensor"),
        fp64=weighted("fp64"),
        fp32=weighted("fp32"),
        fp16=weighted("fp16"),
        integer=weighted("integer"),
        dram=weighted("dram"),
        pcie_tx=sum(a.pcie_tx for _, a in parts),
        pcie_rx=sum(a.pcie_rx for _, a in parts),
        encoder=weighted("encoder"),
        decoder=weighted("decoder"),
        jpeg=weighted("jpeg"),
        ofa=weighted("ofa"),
    )


class Integrator:
    """∫ f dt from 0 to t on a fixed grid (midpoint rule), extended incrementally and thread-safely.

    The grid makes the result a function of ``t`` alone; non-negative ``f`` makes it monotonic.
    A constant ``f`` (the common case) is integrated in closed form, so long clock jumps stay cheap.
    """

    def __init__(
        self, f: Callable[[float], float], step: float = INTEGRATION_STEP, constant: bool = False
    ) -> None:
        self.f = f
        self.step = step
        self.constant = constant
        self._cells = 0
        self._sum = 0.0
        self._lock = threading.Lock()

    def at(self, t: float) -> float:
        if t <= 0:
            return 0.0
        if self.constant:
            return self.f(0.0) * t
        cells = int(t / self.step)
        with self._lock:
            if cells < self._cells:  # an earlier time (a concurrent caller): recompute that prefix
                total = sum(self.f((k + 0.5) * self.step) for k in range(cells)) * self.step
            else:
                for k in range(self._cells, cells):
                    self._sum += self.f((k + 0.5) * self.step) * self.step
                self._cells = cells
                total = self._sum
        rest = t - cells * self.step
        return total + self.f(cells * self.step + rest / 2) * rest


class ComputeInstanceState:
    def __init__(self, gi: GpuInstanceState, spec: ComputeInstanceSpec, seed: int) -> None:
        self.gi = gi
        self.spec = spec
        self.id = spec.id
        self.mig_index = spec.mig_index
        self.uuid = spec.uuid
        self.slices = spec.slices
        self.placement = spec.placement
        profile = gi.profile
        self.sm_count = (
            profile.sm_count
            if spec.slices == profile.slices
            else profile.sm_count * spec.slices // profile.slices
        )
        self.profile_name = ci_name(profile, spec.slices)
        self.own_load = (
            LoadModel(spec.load, seed, f"{gi.path}.ci{spec.id}.load")
            if spec.load is not None
            else None
        )

    def activity(self, t: float) -> Activity:
        return self.own_load.at(t) if self.own_load is not None else self.gi.own_load.at(t)


class GpuInstanceState:
    def __init__(self, gpu: GpuState, spec: GpuInstanceSpec, seed: int) -> None:
        self.gpu = gpu
        self.spec = spec
        self.id = spec.id
        self.path = spec.path
        self.profile: MigProfile = spec.profile
        self.placement = spec.placement
        self.own_load = LoadModel(spec.load, seed, f"{spec.path}.load")
        self.memory_used_fn = (
            spec.memory_used.build(seed, f"{spec.path}.memory_used", lo=0.0)
            if spec.memory_used is not None
            else None
        )
        self.cis = [ComputeInstanceState(self, c, seed) for c in spec.compute_instances]

    @property
    def memory_total(self) -> int:
        return self.profile.memory_bytes

    def activity(self, t: float) -> Activity:
        if all(ci.own_load is None for ci in self.cis):
            return self.own_load.at(t)
        return combine([(ci.sm_count / self.profile.sm_count, ci.activity(t)) for ci in self.cis])

    def memory_used(self, t: float) -> int:
        if self.memory_used_fn is not None:
            used = int(self.memory_used_fn(t))
        else:
            used = sum(
                p.memory(t)
                for p in self.gpu.processes
                if p.spec.gpu_instance == self.id and p.running(t)
            )
        return min(used, self.memory_total)


class ProcessState:
    def __init__(self, spec: ProcessSpec, seed: int, salt: str) -> None:
        self.spec = spec
        self.pid = spec.pid
        self._memory = spec.memory.build(seed, f"{salt}.memory", lo=0.0)
        self.utilization: dict[str, Evaluator] = {
            k: v.build(seed, f"{salt}.utilization.{k}", lo=0.0, hi=1.0)
            for k, v in spec.utilization.items()
        }

    def running(self, t: float) -> bool:
        return self.spec.running(t)

    def memory(self, t: float) -> int:
        return int(self._memory(t))


class GpuState:
    """One simulated GPU: its spec bound to the seed, plus the few things that accumulate."""

    def __init__(self, spec: GpuSpec, seed: int) -> None:
        self.spec = spec
        self.index = spec.index
        self.seed = seed
        salt = f"gpu{spec.index}"
        self.load = LoadModel(spec.load, seed, f"{salt}.load")
        self.processes = [
            ProcessState(p, seed, f"{salt}.processes.{p.pid}") for p in spec.processes
        ]
        self.gis = [GpuInstanceState(self, g, seed) for g in spec.gpu_instances]
        self.gi_by_id = {gi.id: gi for gi in self.gis}
        self.mig_devices: dict[int, ComputeInstanceState] = {
            ci.mig_index: ci for gi in self.gis for ci in gi.cis
        }
        self._power = (
            spec.power_draw.build(seed, f"{salt}.power.draw", lo=0.0) if spec.power_draw else None
        )
        self._temp_gpu = (
            spec.temp_gpu.build(seed, f"{salt}.temperature.gpu") if spec.temp_gpu else None
        )
        self._temp_mem = (
            spec.temp_memory.build(seed, f"{salt}.temperature.memory") if spec.temp_memory else None
        )
        self._memory_used = (
            spec.memory_used.build(seed, f"{salt}.memory.used", lo=0.0)
            if spec.memory_used
            else None
        )
        self._bar1_used = spec.bar1_used.build(seed, f"{salt}.memory.bar1_used", lo=0.0)
        self._clocks = {
            k: v.build(seed, f"{salt}.clocks.current.{k}", lo=0.0)
            for k, v in spec.clocks_current.items()
        }
        self._pstate = spec.performance_state.build(
            seed, f"{salt}.performance_state", lo=0.0, hi=32.0
        )
        self._fan = spec.fan_speed.build(seed, f"{salt}.fans.speed", lo=0.0)
        steady = self._steady_load()
        power_steady = spec.power_draw.is_constant if spec.power_draw is not None else steady
        self.energy = Integrator(self.power_watts, constant=power_steady)
        self.pcie_tx_total = Integrator(lambda t: self.activity(t).pcie_tx, constant=steady)
        self.pcie_rx_total = Integrator(lambda t: self.activity(t).pcie_rx, constant=steady)
        self.ext: dict[str, Any] = {}  # per-GPU state of extensions (registry.register_gpu_state)
        # Framebuffer that extensions hold outside this model's processes, e.g. the vGPUs of a
        # vGPU host: each running vGPU has its whole profile allocated on the physical GPU.
        self.memory_claims: list[Callable[[float], int]] = []

    # ---------------------------------------------------------------- activity

    def _steady_load(self) -> bool:
        """Whether every load pattern behind this GPU's activity is a constant."""
        specs = [self.spec.load] + [g.load for g in self.spec.gpu_instances]
        specs += [c.load for g in self.spec.gpu_instances for c in g.compute_instances if c.load]
        return all(p.is_constant for load in specs for p in load.values())

    @property
    def mig_enabled(self) -> bool:
        return self.spec.mig_enabled

    def activity(self, t: float) -> Activity:
        if not self.spec.mig_enabled:
            return self.load.at(t)
        return combine(
            [(gi.profile.sm_count / self.spec.sm_count, gi.activity(t)) for gi in self.gis]
        )

    # ---------------------------------------------------------------- power, thermals, clocks

    def power_watts(self, t: float) -> float:
        if self._power is not None:
            return self._power(t)
        a = self.activity(t)
        level = 0.5 * a.graphics + 0.5 * a.sm
        return self.spec.power_idle + (self.spec.power_max_draw - self.spec.power_idle) * level

    def energy_joules(self, t: float) -> float:
        return self.energy.at(t)

    def power_fraction(self, t: float) -> float:
        span = self.spec.power_max_draw - self.spec.power_idle
        if span <= 0:
            return 0.0
        return min(1.0, max(0.0, (self.power_watts(t) - self.spec.power_idle) / span))

    def temperature_gpu(self, t: float) -> float:
        if self._temp_gpu is not None:
            return self._temp_gpu(t)
        s = self.spec
        return s.temp_idle + (s.temp_load - s.temp_idle) * self.power_fraction(t)

    def temperature_memory(self, t: float) -> float:
        if self._temp_mem is not None:
            return self._temp_mem(t)
        return self.temperature_gpu(t) - 4.0

    def clock_mhz(self, kind: str, t: float) -> float:
        if kind in self._clocks:
            return self._clocks[kind](t)
        a = self.activity(t)
        busy = a.encoder > 0 or a.decoder > 0 if kind == "video" else a.graphics > 0
        return self.spec.clocks_max[kind] if busy else self.spec.clocks_idle[kind]

    def clock_reasons(self, t: float) -> int:
        if self.spec.clock_reasons_active is not None:
            return self.spec.clock_reasons_active
        return 0x1 if self.activity(t).graphics == 0 else 0

    def performance_state(self, t: float) -> int:
        return round(self._pstate(t))

    def fan_percent(self, t: float) -> int:
        return round(self._fan(t) * 100)

    # ---------------------------------------------------------------- memory and processes

    def running_processes(self, t: float) -> list[ProcessState]:
        return [p for p in self.processes if p.running(t)]

    def memory_used(self, t: float) -> int:
        """Application memory (NVML v2 ``used``), capped so free never goes negative."""
        if self.spec.mig_enabled:
            used = sum(gi.memory_used(t) for gi in self.gis)
        elif self._memory_used is not None:
            used = int(self._memory_used(t))
        else:
            used = sum(p.memory(t) for p in self.running_processes(t))
        used += sum(claim(t) for claim in self.memory_claims)
        return min(used, max(0, self.spec.memory_total - self.spec.memory_reserved))

    def process_utilization(self, process: ProcessState, t: float) -> dict[str, float]:
        """Ratios a process shows in utilization samples at ``t``.

        A process with its own ``utilization`` pattern reports that; the others share what is left
        of the GPU's utilization equally, so one busy process reads like the GPU itself, as on a
        real driver (docs/nvml-notes.md §4.13).
        """
        a = self.activity(t)
        running = [p for p in self.processes if p.running(t)]
        out: dict[str, float] = {}
        for key, total in (
            ("sm", a.graphics),
            ("memory", a.dram),
            ("encoder", a.encoder),
            ("decoder", a.decoder),
        ):
            if key in process.utilization:
                out[key] = process.utilization[key](t)
                continue
            implicit = [p for p in running if key not in p.utilization]
            explicit = sum(p.utilization[key](t) for p in running if key in p.utilization)
            share = max(0.0, total - explicit) / len(implicit) if process in implicit else 0.0
            out[key] = share
        return out

    def bar1_used(self, t: float) -> int:
        return min(int(self._bar1_used(t)), self.spec.bar1_total)

    # ---------------------------------------------------------------- time grids

    @staticmethod
    def grid(t: float, period: float) -> float:
        """The latest sample time at or before ``t`` on a grid of ``period`` (0 before any)."""
        return max(0.0, math.floor(t / period + 1e-9) * period)

    def utilization_at(self, t: float) -> Activity:
        """Activity as NVML's utilization sampler saw it at its latest sample."""
        return self.activity(self.grid(t, UTIL_PERIOD))


def percent(ratio: float) -> int:
    return max(0, min(100, round(ratio * 100)))
