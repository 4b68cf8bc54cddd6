"""Metering: usage counters per vGPU, MIG instance, process and pod, and the GPU's energy split.

The sampler runs this stage after each cycle, as the last of its enrichers (it asks no one; it
only integrates what the cycle read), and its state outlives snapshots: every tenant's counters
start at 0 when it is first seen and grow for its life. The results go into
:attr:`vgpumon.model.Gpu.metering`, which the exposition, the JSON API and the TUI read.

Methods (docs/metering.md says each one's error bound):

* **Busy seconds** ``+= utilization x dt`` each cycle, ``dt`` the time since the previous
  metered snapshot of the GPU and the utilization the one the cycle read (a vGPU's average of
  NVML's samples since the last cycle; a process's the cadenced value, held between reads; a MIG
  instance's GPM SM activity, an average over the GPM interval, held between reads).
* **Memory byte-seconds** ``+= bytes held x dt`` likewise.
* **Gaps**: a ``dt`` longer than ``max_gap_seconds`` (a wedged sampler, a GPU that was down) is
  not integrated (nothing is invented for time nobody saw); it is added to
  ``unmetered_seconds``, and the energy the GPU spent in it goes to ``unattributed``.
* **Energy**: the GPU's energy counter is read at its own cadence, so each tenant collects a
  *weight* in seconds per cycle until the counter moves, then the increase is split by weight:
  a tenant's busy seconds (scaled down if the tenants' sum exceeds ``dt``), plus the idle rest
  of the cycle ``(1 - U) x dt`` shared by framebuffer *reserved* (a vGPU's profile framebuffer,
  a MIG instance's memory, a process's used memory). What no tenant gets (idle time with no
  holder, processes outside pods, gaps, tenants that ended) is ``unattributed``; per kind of
  tenant the parts add up to the counter's increase exactly.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vgpumon.collect.enrich import METERING
from vgpumon.collect.podcgroups import ContainerName, PodResolver, in_host_pid_namespace
from vgpumon.model import (
    Gpu,
    GpuMetering,
    MigGpuInstance,
    MigMeter,
    PodMeter,
    ProcessMeter,
    Snapshot,
    Usage,
    VgpuInstance,
    VgpuMeter,
)

DEFAULT_IDLE_RATIO = 0.05
# MIG compute slices of a whole GPU (the "7" of 7g.80gb on A100/H100/H200/B200): a GPU instance
# of profile "Ng.*" counts as N/7 of the GPU when the GPU's energy is split among instances.
MIG_COMPUTE_SLICES = 7
_PROFILE_SLICES = re.compile(r"^(\d+)g\.")
KINDS = ("vgpu", "mig", "pod")


@dataclass(frozen=True)
class MeteringConfig:
    interval_seconds: float = 1.0
    # A vGPU under this SM utilization counts as idle (docs/metering.md, "Idle holders").
    idle_ratio: float = DEFAULT_IDLE_RATIO
    # Longer gaps between two metered snapshots of a GPU are not integrated; None: the larger of
    # three intervals and 3 s (a cycle or two late is integrated, a wedged stretch is not).
    max_gap_seconds: float | None = None
    # The host's /proc for pod attribution and dead holders; None: off (the simulator, a host
    # whose PIDs vgpumon cannot see). ``host_pid`` None: find out from /proc/self/ns/pid.
    proc: str | None = None
    host_root: str = "/"
    host_pid: bool | None = None

    @property
    def gap_limit(self) -> float:
        if self.max_gap_seconds is not None:
            return self.max_gap_seconds
        return max(3.0 * self.interval_seconds, 3.0)


@dataclass(slots=True)
class _Acc:
    busy: float = 0.0
    memory: float = 0.0
    energy: float = 0.0
    idle: float | None = None
    # The driver's lifetime busy seconds of a process at its last accounting read: the counter
    # grows by the record's increase (docs/metering.md, "Per-process busy time").
    accounted: float | None = None


@dataclass
class _Split:
    """One kind of tenant's energy split on one GPU: weights pending until the counter moves."""

    weights: dict[Hashable, float] = field(default_factory=dict)
    unattributed: float = 0.0

    def add(self, busy: dict[Hashable, float], reserved: dict[Hashable, float], dt: float) -> None:
        total_busy = sum(busy.values())
        scale = dt / total_busy if total_busy > dt > 0 else 1.0
        for k, b in busy.items():
            self.weights[k] = self.weights.get(k, 0.0) + b * scale
        idle = max(0.0, dt - total_busy * scale)
        held = sum(reserved.values())
        if idle > 0 and held > 0:
            for k, m in reserved.items():
                self.weights[k] = self.weights.get(k, 0.0) + idle * m / held

    def pay(self, energy: float, window: float, accs: Mapping[Any, _Acc]) -> None:
        paid = 0.0
        if window > 0:
            for k, w in self.weights.items():
                acc = accs.get(k)
                if acc is not None and w > 0:
                    share = energy * w / window
                    acc.energy += share
                    paid += share
        # Rounding can make the shares add up to a hair over the increase; a counter never drops.
        self.unattributed += max(0.0, energy - paid)
        self.weights.clear()


@dataclass
class _GpuState:
    last_time: float | None = None
    energy_last: float | None = None
    energy_metered: float = 0.0
    pending_seconds: float = 0.0  # time covered by the pending weights (gaps included)
    unmetered: float = 0.0
    vgpus: dict[Hashable, _Acc] = field(default_factory=dict)
    migs: dict[Hashable, _Acc] = field(default_factory=dict)
    processes: dict[Hashable, _Acc] = field(default_factory=dict)
    pods: dict[tuple[str, str, str], _Acc] = field(default_factory=dict)
    splits: dict[str, _Split] = field(default_factory=lambda: {k: _Split() for k in KINDS})
    process_methods: set[str] = field(default_factory=set)  # of the last cycle


def _vgpu_key(v: VgpuInstance) -> Hashable:
    # The id alone is reused when a VM restarts; the UUID tells the new vGPU from the old one.
    return (v.vgpu_id, v.uuid or v.mdev_uuid or "")


def _mig_key(gi: MigGpuInstance) -> Hashable:
    return (gi.id, gi.profile_id, gi.placement_start)


def mig_share(gi: MigGpuInstance, count: int) -> float:
    """The part of the whole GPU's SMs a GPU instance has (for splitting the GPU's energy)."""
    match = _PROFILE_SLICES.match(gi.profile_name or "")
    if match:
        return min(1.0, int(match.group(1)) / MIG_COMPUTE_SLICES)
    return 1.0 / max(1, count)


def _idle(
    previous: float | None, candidate: bool, used: float | None, ratio: float, dt: float
) -> float | None:
    """Seconds idle without a break: grows while under ``ratio``, 0 once used, None if unknown."""
    if not candidate or used is None:
        return None
    if used < ratio:
        return (previous or 0.0) + dt
    return 0.0


class MeteringStage:
    """The sampler's last stage: integrates each snapshot into the usage counters.

    It has the enricher's shape so the sampler runs it after the names are merged (pods and VMs
    known); it reports no collector status of its own.
    """

    name = METERING

    def __init__(self, config: MeteringConfig | None = None) -> None:
        self.config = config or MeteringConfig()
        self._gpus: dict[str, _GpuState] = {}
        proc = self.config.proc
        self._resolver = PodResolver(proc, self.config.host_root) if proc else None
        host_pid = self.config.host_pid
        if host_pid is None and proc is not None:
            host_pid = in_host_pid_namespace(proc)
        self._host_pid = bool(host_pid) and proc is not None

    # ------------------------------------------------------------------ enricher shape

    def start(self) -> None:
        return None

    def status(self) -> bool | None:
        return None

    def settled(self) -> bool:
        return True

    def close(self) -> None:
        return None

    def apply(self, snapshot: Snapshot) -> Snapshot:
        allocated = _allocated_names(snapshot)
        gpus = tuple(
            self._gpu(snapshot.timestamp, g, allocated.get(g.uuid, ())) if g.up else g
            for g in snapshot.gpus
        )
        seen = {g.uuid for g in snapshot.gpus}
        for uuid in [u for u in self._gpus if u not in seen]:
            del self._gpus[uuid]
        return dataclasses.replace(snapshot, gpus=gpus)

    # ------------------------------------------------------------------ one GPU

    def _gpu(self, now: float, g: Gpu, allocated: tuple[ContainerName, ...]) -> Gpu:
        st = self._gpus.setdefault(g.uuid, _GpuState())
        dt = 0.0 if st.last_time is None else max(0.0, now - st.last_time)
        integrate = st.last_time is not None and dt <= self.config.gap_limit
        if st.last_time is not None and not integrate:
            st.unmetered += dt
        st.last_time = now
        st.pending_seconds += dt
        step = dt if integrate else 0.0

        # Weights first, then the energy split (it may pay this cycle's weights), then the
        # meters, so that each snapshot's counters include every payment made so far.
        vgpu_accs = self._vgpus(st, g, step)
        mig_accs = self._migs(st, g, step)
        processes = self._processes(st, g, step, allocated)
        self._energy(st, g)
        vgpus = tuple(VgpuMeter(i, _usage(acc, g), acc.idle) for i, acc in vgpu_accs)
        migs = tuple(MigMeter(i, _usage(acc, g)) for i, acc in mig_accs)
        pods = tuple(
            PodMeter(ns, pod, container, _usage(acc, g))
            for (ns, pod, container), acc in sorted(st.pods.items())
        )
        dead = [p for p in processes if p.alive is False]
        metering = GpuMetering(
            energy_joules_metered=st.energy_metered if st.energy_last is not None else None,
            unattributed_energy_joules=(
                {k: s.unattributed for k, s in st.splits.items() if k in tenant_kinds(g)}
                if st.energy_last is not None
                else {}
            ),
            unmetered_seconds=st.unmetered,
            vgpus=vgpus,
            migs=migs,
            processes=processes,
            pods=pods,
            longest_idle_holder_seconds=(
                max((p.idle_seconds or 0.0 for p in processes), default=0.0)
                if g.processes is not None
                else None
            ),
            dead_holders=len(dead) if self._host_pid and g.processes is not None else None,
            dead_holder_memory_bytes=(
                sum(p_mem for p_mem in _dead_memory(g, dead))
                if self._host_pid and g.processes is not None
                else None
            ),
            methods=_methods(g, st, vgpus, migs, pods),
        )
        return dataclasses.replace(g, metering=metering)

    def _energy(self, st: _GpuState, g: Gpu) -> None:
        energy = g.energy_joules
        if energy is None:
            return
        if st.energy_last is None or energy < st.energy_last:
            # First reading, or the counter went back (driver reloaded): start from here.
            st.energy_last = energy
            st.pending_seconds = 0.0
            for split in st.splits.values():
                split.weights.clear()
            return
        if energy == st.energy_last:
            return  # not read this cycle (cadenced): keep collecting weights
        delta = energy - st.energy_last
        st.energy_last = energy
        st.energy_metered += delta
        window, st.pending_seconds = st.pending_seconds, 0.0
        st.splits["vgpu"].pay(delta, window, st.vgpus)
        st.splits["mig"].pay(delta, window, st.migs)
        st.splits["pod"].pay(delta, window, st.pods)

    def _vgpus(self, st: _GpuState, g: Gpu, dt: float) -> list[tuple[int, _Acc]]:
        live: dict[Hashable, _Acc] = {}
        busy: dict[Hashable, float] = {}
        reserved: dict[Hashable, float] = {}
        out = []
        for v in g.vgpu_instances:
            key = _vgpu_key(v)
            acc = st.vgpus.get(key) or _Acc()
            live[key] = acc
            sm = v.utilization.sm
            if sm is not None:
                acc.busy += sm * dt
                busy[key] = sm * dt
            if v.framebuffer_used_bytes is not None:
                acc.memory += v.framebuffer_used_bytes * dt
            held = v.framebuffer_total_bytes or v.framebuffer_used_bytes
            if held:
                reserved[key] = float(held)
            candidate = v.license.licensed is not False and (
                v.vm is None or v.vm.state in (None, "running")
            )
            acc.idle = _idle(acc.idle, candidate, sm, self.config.idle_ratio, dt)
            out.append((v.vgpu_id, acc))
        st.vgpus = live
        if dt > 0:
            st.splits["vgpu"].add(busy, reserved, dt)
        return out

    def _migs(self, st: _GpuState, g: Gpu, dt: float) -> list[tuple[int, _Acc]]:
        live: dict[Hashable, _Acc] = {}
        busy: dict[Hashable, float] = {}
        reserved: dict[Hashable, float] = {}
        out = []
        count = len(g.mig_instances)
        for gi in g.mig_instances:
            key = _mig_key(gi)
            acc = st.migs.get(key) or _Acc()
            live[key] = acc
            active = gi.gpm.sm_active if gi.gpm is not None else None
            if active is not None:
                acc.busy += active * dt  # in units of the instance's own SMs
                busy[key] = active * mig_share(gi, count) * dt  # in units of the GPU's
            if gi.memory_used_bytes is not None:
                acc.memory += gi.memory_used_bytes * dt
            if gi.memory_total_bytes:
                reserved[key] = float(gi.memory_total_bytes)
            out.append((gi.id, acc))
        st.migs = live
        if dt > 0:
            st.splits["mig"].add(busy, reserved, dt)
        return out

    def _processes(
        self, st: _GpuState, g: Gpu, dt: float, allocated: tuple[ContainerName, ...]
    ) -> tuple[ProcessMeter, ...]:
        live: dict[Hashable, _Acc] = {}
        pods: dict[tuple[str, str, str], _Acc] = {}
        busy: dict[Hashable, float] = {}
        reserved: dict[Hashable, float] = {}
        out = []
        records = {r.pid: r for r in g.accounting or ()} if g.accounting_enabled else {}
        methods: set[str] = set()
        for p in g.processes or ():
            key = (p.pid, p.name, p.gpu_instance_id, p.compute_instance_id)
            acc = st.processes.get(key) or _Acc()
            live[key] = acc
            sm = p.sm_utilization
            used = p.used_memory_bytes
            record = records.get(p.pid)
            lifetime = record.busy_seconds if record is not None else None
            if lifetime is not None:
                # The driver's integral: the counter grows by its increase since the last read
                # (from the first read on: counters start when vgpumon first sees the process).
                method = "accounting" if record and record.sample_count else "accounting_average"
                seen = acc.accounted is not None
                grown = max(0.0, lifetime - acc.accounted) if acc.accounted is not None else 0.0
                acc.accounted = max(lifetime, acc.accounted or 0.0)
                acc.busy += grown
                if seen and dt > 0:
                    sm = grown / dt  # this cycle's share, for the energy split and idle time
            else:
                method = "process_samples"
                if sm is not None:
                    acc.busy += sm * dt
            if sm is not None or lifetime is not None:
                methods.add(method)
            if used is not None:
                acc.memory += used * dt
            acc.idle = _idle(acc.idle, bool(used), sm, 1e-9, dt)
            alive = self._resolver.exists(p.pid) if self._resolver and self._host_pid else None
            names = None
            if self._resolver is not None and self._host_pid and alive:
                _, names = self._resolver.resolve(p.pid, allocated)
            if names is not None:
                pod_key = (names.namespace, names.pod, names.container)
                pod = pods.get(pod_key) or st.pods.get(pod_key) or _Acc()
                pods[pod_key] = pod
                if sm is not None:
                    pod.busy += sm * dt
                    busy[pod_key] = busy.get(pod_key, 0.0) + sm * dt
                if used is not None:
                    pod.memory += used * dt
                    reserved[pod_key] = reserved.get(pod_key, 0.0) + used
            elif sm is not None or used:
                # Outside any pod (or not nameable): its part of the energy stays unattributed.
                busy[("", key)] = (sm or 0.0) * dt
                if used:
                    reserved[("", key)] = float(used)
            out.append(
                ProcessMeter(
                    p.pid,
                    p.name,
                    p.gpu_instance_id,
                    p.compute_instance_id,
                    Usage(acc.busy, acc.memory, None),
                    acc.idle,
                    alive,
                    names.namespace if names else None,
                    names.pod if names else None,
                    names.container if names else None,
                    method if sm is not None or lifetime is not None else None,
                )
            )
        st.processes = live
        st.process_methods = methods
        st.pods = pods
        if dt > 0 and (busy or reserved):
            st.splits["pod"].add(busy, reserved, dt)
        return tuple(out)


def _methods(
    g: Gpu,
    st: _GpuState,
    vgpus: tuple[VgpuMeter, ...],
    migs: tuple[MigMeter, ...],
    pods: tuple[PodMeter, ...],
) -> dict[str, str]:
    """Per busy counter, how it grew this cycle (docs/metering.md gives each one's bound).

    Processes (and the pods they belong to) by the driver's accounting records where accounting
    is on and gave one, else by NVML's per-process samples; a GPU whose processes used both (one
    started before accounting was turned on) says the one with the weaker bound.
    """
    out: dict[str, str] = {}
    if vgpus:
        out["vgpu"] = "vgpu_samples"
    if migs:
        out["mig"] = "gpm"
    if st.process_methods:
        order = ("process_samples", "accounting_average", "accounting")
        weakest = min(st.process_methods, key=order.index)
        out["process"] = weakest
        if pods:
            out["pod"] = weakest
    return out


def tenant_kinds(g: Gpu) -> tuple[str, ...]:
    """The kinds of tenant among which this GPU's energy is split.

    vGPUs on a vGPU host; MIG GPU instances where MIG is on; pods where the GPU runs processes of
    its own (not a vGPU host, whose guests' processes NVML lists by guest PID).
    """
    kinds = []
    if g.virtualization_mode == "host_vgpu":
        kinds.append("vgpu")
    if g.mig_mode_current or g.mig_instances:
        kinds.append("mig")
    if g.processes is not None and g.virtualization_mode != "host_vgpu":
        kinds.append("pod")
    return tuple(kinds)


def _usage(acc: _Acc, g: Gpu) -> Usage:
    return Usage(acc.busy, acc.memory, acc.energy if g.energy_joules is not None else None)


def _dead_memory(g: Gpu, dead: Iterable[ProcessMeter]) -> Iterable[int]:
    pids = {p.pid for p in dead}
    return (p.used_memory_bytes or 0 for p in g.processes or () if p.pid in pids)


def _allocated_names(snapshot: Snapshot) -> dict[str, tuple[ContainerName, ...]]:
    """Per GPU UUID, the containers pod-resources gives a device of that GPU to."""
    out: dict[str, list[ContainerName]] = {}
    for a in snapshot.allocations:
        if a.gpu_uuid and a.namespace and a.pod:
            out.setdefault(a.gpu_uuid, []).append(
                ContainerName(a.namespace, a.pod, a.container or "")
            )
    return {k: tuple(v) for k, v in out.items()}
