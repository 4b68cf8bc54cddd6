"""Change a simulated GPU's load while it runs: how ``vgpumon validate`` drives the simulator.

A scenario describes load as patterns fixed when the file is written; ``validate`` needs the
opposite, load that follows a ladder decided at run time, exactly as :class:`LoadRunner` steers
real CUDA workers. :func:`set_load` gives the simulator that without touching its scenario model:
it swaps the load fields it changes for a :class:`LiveValue` and adds or stops processes on the
GPU's state objects.

Every simulated reading stays a function of scenario time. A :class:`LiveValue` keeps each value
with the time it was set, so a question about an earlier instant (a GPM interval that began before
the change, a utilization sample already taken) still gets the value that held then; processes are
stopped by giving them a stop time, never removed, so their lingering utilization samples behave as
the simulator models for any exited process.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from vgpumon.errors import ConfigError
from vgpumon.sim.core import SimNvml
from vgpumon.sim.patterns import PatternSpec
from vgpumon.sim.scenario_specs import ProcessSpec
from vgpumon.sim.state import (
    ComputeInstanceState,
    GpuInstanceState,
    GpuState,
    LoadModel,
    ProcessState,
)

Evaluator = Callable[[float], float]
EXT_KEY = "live"


class LiveValue:
    """A value set at run time, remembered with the scenario time of each change.

    Before the first change it is the evaluator it replaced (the scenario's own pattern).
    """

    def __init__(self, before: Evaluator) -> None:
        self._before = before
        self._times: tuple[float, ...] = ()
        self._values: tuple[float, ...] = ()
        self._lock = threading.Lock()

    def set(self, t: float, value: float) -> None:
        with self._lock:
            times, values = list(self._times), list(self._values)
            while times and times[-1] >= t:  # a change at the same instant replaces it
                times.pop()
                values.pop()
            times.append(t)
            values.append(float(value))
            # One assignment each, read together below: readers in other threads see either the
            # old pair or the new one (the tuples are swapped under the lock, read as a pair).
            self._times, self._values = tuple(times), tuple(values)

    def __call__(self, t: float) -> float:
        with self._lock:
            times, values = self._times, self._values
        i = bisect.bisect_right(times, t)
        return self._before(t) if i == 0 else values[i - 1]


@dataclass(frozen=True)
class LiveProcess:
    """A process the simulated GPU should list from now on.

    ``sm_utilization`` ``None`` gives it the simulator's default: an equal share of the GPU's
    utilization among the processes without their own value.
    """

    pid: int
    memory_bytes: int
    name: str = "vgpumon-load"
    sm_utilization: float | None = None


@dataclass
class _LiveState:
    """Per-GPU bookkeeping, kept in ``GpuState.ext``."""

    running: dict[int, tuple[ProcessState, LiveProcess]] = field(default_factory=dict)
    started: list[ProcessState] = field(default_factory=list)  # every live process ever, for memory
    memory_wrapped: set[str] = field(default_factory=set)

    def memory(self, t: float, gpu_instance: int | None = None) -> int:
        return sum(
            p.memory(t)
            for p in self.started
            if p.running(t) and (gpu_instance is None or p.spec.gpu_instance == gpu_instance)
        )


@dataclass(frozen=True)
class _Place:
    gpu: GpuState
    gi: GpuInstanceState | None = None
    ci: ComputeInstanceState | None = None


def set_load(
    sim: SimNvml,
    gpu_index: int,
    *,
    duty: float,
    sm_fraction: float = 1.0,
    processes: Sequence[LiveProcess] = (),
    mig_uuid: str | None = None,
) -> None:
    """From now (scenario time) on, run this load on a GPU or one of its MIG devices.

    ``duty`` drives NVML utilization and GPM graphics activity, ``duty × sm_fraction`` GPM SM
    activity (of the MIG device, and weighted by its SMs of its GPU instance and GPU).
    ``processes`` is the whole list of live processes on that GPU: processes started by an earlier
    call and missing here are stopped now; a PID whose memory or SM value changed is restarted.
    Memory used grows by the running processes' memory, on top of the scenario's own.
    """
    for name, value in (("duty", duty), ("SM fraction", sm_fraction)):
        if not 0.0 <= float(value) <= 1.0:
            raise ConfigError(f"{name} must be between 0 and 1, got {value}")
    core = sim._core
    with core.lock:
        t = core.t()
        place = _place(core.gpus, gpu_index, mig_uuid)
        model = _load_model(place)
        _live_field(model, "duty").set(t, duty)
        _live_field(model, "sm_fraction").set(t, sm_fraction)
        _set_processes(place, t, processes)


def clear(sim: SimNvml, gpu_index: int, mig_uuid: str | None = None) -> None:
    """No live load and no live processes from now on (the scenario's own processes stay)."""
    set_load(sim, gpu_index, duty=0.0, sm_fraction=1.0, processes=(), mig_uuid=mig_uuid)


def live_pids(sim: SimNvml, gpu_index: int) -> list[int]:
    """PIDs of the live processes running now on a GPU."""
    gpu = _gpu(sim._core.gpus, gpu_index)
    state = gpu.ext.get(EXT_KEY)
    return sorted(state.running) if isinstance(state, _LiveState) else []


# ----------------------------------------------------------------------------------- internals


def _gpu(gpus: Sequence[GpuState], index: int) -> GpuState:
    if not 0 <= index < len(gpus):
        raise ConfigError(f"the simulated host has no GPU {index} (it has {len(gpus)})")
    return gpus[index]


def _place(gpus: Sequence[GpuState], index: int, mig_uuid: str | None) -> _Place:
    gpu = _gpu(gpus, index)
    if mig_uuid is None:
        if gpu.mig_enabled:
            raise ConfigError(
                f"simulated GPU {index} has MIG enabled: load runs on a MIG device (give its UUID)"
            )
        return _Place(gpu)
    for gi in gpu.gis:
        for ci in gi.cis:
            if ci.uuid.lower() == mig_uuid.lower():
                return _Place(gpu, gi, ci)
    raise ConfigError(f"simulated GPU {index} has no MIG device {mig_uuid}")


def _load_model(place: _Place) -> LoadModel:
    """The load model whose values the target's activity is read from."""
    if place.ci is None or place.gi is None:
        return place.gpu.load
    if place.ci.own_load is not None:
        return place.ci.own_load
    if len(place.gi.cis) == 1:
        return place.gi.own_load
    # One compute instance of several: give it a load of its own (idle until set), so the GPU
    # instance combines it with its siblings weighted by SMs.
    place.ci.own_load = LoadModel({}, place.gpu.seed, f"{place.gi.path}.ci{place.ci.id}.live")
    return place.ci.own_load


def _live_field(model: LoadModel, name: str) -> LiveValue:
    current = model.fields[name]
    if isinstance(current, LiveValue):
        return current
    live = LiveValue(current)
    model.fields[name] = live
    return live


def _state(gpu: GpuState) -> _LiveState:
    state = gpu.ext.get(EXT_KEY)
    if not isinstance(state, _LiveState):
        state = gpu.ext[EXT_KEY] = _LiveState()
    return state


def _wrap_memory(place: _Place, state: _LiveState) -> None:
    """Make explicit ``memory.used`` patterns count live processes too.

    Without an explicit pattern memory used is the sum of the running processes, which already
    includes ours. ``GpuState._memory_used`` is the simulator's private evaluator of that pattern:
    this module is the one place that wraps it.
    """
    gpu = place.gpu
    if "gpu" not in state.memory_wrapped:
        state.memory_wrapped.add("gpu")
        scenario_used: Evaluator | None = getattr(gpu, "_memory_used", None)
        if scenario_used is not None:
            gpu._memory_used = _plus(scenario_used, lambda t: state.memory(t))
    gi = place.gi
    if gi is not None and f"gi{gi.id}" not in state.memory_wrapped:
        state.memory_wrapped.add(f"gi{gi.id}")
        if gi.memory_used_fn is not None:
            gi_id = gi.id
            gi.memory_used_fn = _plus(gi.memory_used_fn, lambda t: state.memory(t, gi_id))


def _plus(base: Evaluator, extra: Callable[[float], int]) -> Evaluator:
    return lambda t: base(t) + extra(t)


def _set_processes(place: _Place, t: float, processes: Sequence[LiveProcess]) -> None:
    state = _state(place.gpu)
    _wrap_memory(place, state)
    wanted = {p.pid: p for p in processes}
    if len(wanted) != len(processes):
        raise ConfigError("live processes need distinct PIDs")
    for pid, (proc, spec) in list(state.running.items()):
        if wanted.get(pid) != spec:
            proc.spec = dataclasses.replace(proc.spec, stop=t)
            del state.running[pid]
    for pid, live in wanted.items():
        if pid in state.running:
            continue
        proc = _new_process(place, live, t)
        place.gpu.processes.append(proc)
        state.started.append(proc)
        state.running[pid] = (proc, live)


def _new_process(place: _Place, live: LiveProcess, t: float) -> ProcessState:
    utilization: dict[str, PatternSpec] = {}
    if live.sm_utilization is not None:
        utilization["sm"] = PatternSpec.constant(min(1.0, max(0.0, live.sm_utilization)))
    spec = ProcessSpec(
        pid=live.pid,
        name=live.name,
        kind="compute",
        memory=PatternSpec.constant(float(live.memory_bytes)),
        utilization=utilization,
        start=t,
        gpu_instance=place.gi.id if place.gi is not None else None,
        compute_instance=place.ci.id if place.ci is not None else None,
    )
    salt = f"gpu{place.gpu.index}.live.{live.pid}.{t:.6f}"
    return ProcessState(spec, place.gpu.seed, salt)


def sm_count(sim: SimNvml, gpu_index: int, mig_uuid: str | None = None) -> int:
    """SMs a load on this GPU or MIG device sees (what CUDA's multiprocessor count would say)."""
    place = _place(sim._core.gpus, gpu_index, mig_uuid)
    return place.ci.sm_count if place.ci is not None else place.gpu.spec.sm_count
