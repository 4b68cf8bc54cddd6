"""Simulated vGPU host: scenario keys, and which vGPUs exist on each GPU at scenario time ``t``.

Scenario keys (documented in ``docs/vgpu.md``): per GPU ``vgpu`` (the type table, the scheduler,
the instances) and top level ``vgpu_events`` (churn generators: a VM every ``every`` seconds that
lives ``lifetime`` seconds). A GPU with a ``vgpu`` section must be in ``host_vgpu`` mode.

Everything is a function of scenario time: an instance exists while ``start <= t < stop``; churned
VMs are numbered ``k = 0, 1, …`` and VM ``k`` lives from ``start + k·every`` for ``lifetime``, so
the set alive at ``t`` is computed, not stored. Only the instances alive recently are kept as
objects (:meth:`VgpuHost.prune`), so a scenario with thousands of churned VMs holds a bounded
amount of memory. Instance ids are global across GPUs, as NVML's are.

NVML's active-vGPU list is ordered by creation (start time, then id); the simulated scheduler's
``swRunlistId`` is the 0-based position in that list (the convention the collector documents).
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vgpumon.sim import registry
from vgpumon.sim.licensing import LICENSE, LicenseTimeline
from vgpumon.sim.patterns import PATTERN_PARAMS, Evaluator, PatternSpec
from vgpumon.sim.scenario_build import derived_uuid
from vgpumon.sim.scenario_keys import ARCHITECTURES, VIRTUALIZATION_MODES
from vgpumon.sim.scenario_specs import Scenario
from vgpumon.sim.schema import (
    GPU,
    TOP_LEVEL,
    Bool,
    Ctx,
    Enum,
    IdOrName,
    Int,
    Key,
    Map,
    PatternOf,
    Seq,
    Size,
    Str,
    Type,
    Unit,
    join,
)

if TYPE_CHECKING:
    import yaml

    from vgpumon.sim.core import SimCore
    from vgpumon.sim.state import GpuState

HOST_VGPU = VIRTUALIZATION_MODES["host_vgpu"]
GIB = 2**30
CHURN_ID_BASE = 1_000_000  # churned VM k of generator g gets id (g + 1) * CHURN_ID_BASE + k
KEEP_ENDED_SECONDS = 15.0  # ended instances stay known this long (> the 14.4 s sample ring)
DEFAULT_GUEST_DRIVER = "580.82.07"
POLICIES = {"best_effort": 1, "equal_share": 2, "fixed_share": 3}
ARR_MODES = {"default": 0, "disable": 1, "enable": 2}
ECC_MODES = {"disabled": 0, "enabled": 1, "unsupported": None}
HYPERVISORS = ("kvm", "vmware", "citrix", "other")
CLASS_BY_SERIES = {"Q": "Quadro", "B": "NVS", "A": "NVS", "C": "Compute"}
LICENSE_BY_SERIES = {
    "Q": "NVIDIA-RTX-Virtual-Workstation,1.0;Quadro-Virtual-DWS,5.0",
    "B": "NVIDIA-Virtual-PC,2.0;GRID-Virtual-PC,2.0",
    "A": "NVIDIA-Virtual-Applications,3.0;GRID-Virtual-Apps,3.0",
    "C": "NVIDIA-Virtual-Compute-Server,9.0",
}
LOAD_KEYS = ("sm", "memory", "encoder", "decoder")


# --------------------------------------------------------------------------- scenario keys


TYPE_REF = IdOrName("a vGPU type id or name")
VGPU_TYPE = Map(
    {
        "id": Key(Int(1, 0xFFFFFFFE), "vGPU type id", required=True),
        "name": Key(Str(), 'type name, e.g. "NVIDIA L40S-12Q"', required=True),
        "class": Key(Str(), "type class", "from the series letter: Q Quadro, B/A NVS, C Compute"),
        "framebuffer": Key(Size(lo=1), "framebuffer of one vGPU", required=True),
        "max_instances": Key(
            Int(1, 64), "most vGPUs of this type on the GPU", "framebuffer / type size"
        ),
        "max_per_vm": Key(Int(1, 16), "vGPUs of this type per VM", "1"),
        "frame_rate_limit": Key(
            Int(0, 1000), "fps cap (0: limiter off)", "60 for Q/B/A, off for C"
        ),
        "gpu_instance_profile": Key(
            Int(lo=0), "MIG GPU-instance profile id (MIG-backed types)", "none"
        ),
        "license": Key(Str(), "nvmlVgpuTypeGetLicense text", "by series"),
        "max_per_gpu_instance": Key(
            Int(1, 64), "vGPUs of this MIG-backed type per GPU instance (GB20x time-sliced)", "1"
        ),
        "framebuffer_reservation": Key(
            Size(lo=0), "framebuffer the driver reserves per vGPU (R550+)", "not reported"
        ),
        "gsp_heap": Key(Size(lo=0), "GSP heap per vGPU (R550+)", "not reported"),
        "bar1": Key(Size(lo=0), "BAR1 aperture of one vGPU (R550+)", "not reported"),
    },
    expected="a vGPU type mapping",
)
SCHEDULER = Map(
    {
        "policy": Key(Enum(POLICIES), ", ".join(POLICIES), "best_effort"),
        "arr": Key(Enum(ARR_MODES), "adaptive round robin: default, disable, enable", "disable"),
        "timeslice": Key(Unit("duration", lo=1e-6, hi=4.0), "time slice", "2ms"),
        "average_factor": Key(Int(0, 1000), "ARR averaging factor", "33"),
        "min_timeslice": Key(Unit("duration", lo=1e-6, hi=4.0), "capability", "1ms"),
        "max_timeslice": Key(Unit("duration", lo=1e-6, hi=4.0), "capability", "30ms"),
        "supported": Key(Seq(Enum(POLICIES)), "policies the GPU supports", "all three"),
    },
    expected="a scheduler mapping",
)
LOAD = Map({k: Key(PatternOf("ratio"), "", "0") for k in LOAD_KEYS}, expected="a vGPU load mapping")
GUEST_PROCESS = Map(
    {
        "pid": Key(Int(1, 2**31), "guest PID", required=True),
        "name": Key(Str(), "guest process name", "process-PID"),
        **{k: Key(PatternOf("ratio"), f"{k} utilization", "0") for k in LOAD_KEYS},
    },
    expected="a guest process mapping",
)
ENCODER = Map(
    {
        "capacity": Key(Unit("ratio"), "share of the encoder the vGPU may use", "100%"),
        "sessions": Key(Int(0, 64), "active encoder sessions", "0"),
        "fps": Key(Int(0, 1000), "average fps", "30"),
        "latency": Key(Unit("duration", lo=0), "average latency", "2ms"),
    }
)
FBC = Map(
    {
        "sessions": Key(Int(0, 64), "active frame-buffer-capture sessions", "0"),
        "fps": Key(Int(0, 1000), "average fps", "60"),
        "latency": Key(Unit("duration", lo=0), "average latency", "5ms"),
    }
)


class _OptionalStr(Type):
    expected = 'a guest driver version like "580.82.07", or null when not loaded'

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> str | None:
        value = self.scalar(node, path, ctx)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(node, path, ctx)
        return value


INSTANCE_KEYS: dict[str, Key] = {
    "id": Key(Int(1, CHURN_ID_BASE - 1), "vGPU instance id", "1, 2, … across the host"),
    "type": Key(TYPE_REF, "type id or name from the GPU's types", required=True),
    "vm_id": Key(Str(), "VM id (a UUID on KVM, a domain number elsewhere)", "derived"),
    "uuid": Key(Str(), "vGPU UUID", "derived"),
    "mdev_uuid": Key(Str(), "mdev UUID (KVM only)", "derived"),
    "start": Key(Unit("duration", lo=0), "scenario time the VM starts", "0s"),
    "stop": Key(Unit("duration", lo=0), "scenario time the VM stops", "never"),
    "guest_driver": Key(
        _OptionalStr(), "guest driver version; null: not loaded", DEFAULT_GUEST_DRIVER
    ),
    "load": Key(LOAD, "demand: sm is the share of the GPU it would use alone", "idle"),
    "framebuffer_used": Key(PatternOf("size"), "framebuffer in use", "a quarter of the type's"),
    "gpu_instance": Key(Int(lo=0), "GPU instance id (MIG-backed types)"),
    "placement": Key(Int(lo=0), "placement slot (heterogeneous mode)", "first free"),
    "ecc": Key(Enum({k: k for k in ECC_MODES}), "enabled, disabled or unsupported", "disabled"),
    "accounting": Key(Bool(), "accounting mode", "false"),
    "accounting_pids": Key(Seq(Int(1, 2**31)), "guest PIDs in the accounting buffer", "none"),
    "encoder": Key(ENCODER, "NVENC use"),
    "fbc": Key(FBC, "frame buffer capture"),
    "frame_rate_limit": Key(Int(0, 1000), "fps cap for this VM (0: off)", "the type's"),
    "processes": Key(Seq(GUEST_PROCESS), "guest processes (per-process utilization)", "none"),
    "license": Key(LICENSE, "host-side license timeline (see licensing)", "licensed"),
    "migration": Key(Bool(), "the vGPU can be live-migrated", "the host's migration"),
    "migration_state": Key(
        PatternOf("size"),
        "bytes a live migration moves (R565+)",
        "framebuffer in use + 64 MiB",
    ),
}
INSTANCE = Map(INSTANCE_KEYS, expected="a vGPU instance mapping")
VGPU = Map(
    {
        "sriov": Key(Bool(), "host vGPU mode SR-IOV", "true from Ampere on"),
        "heterogeneous": Key(Bool(), "mixed-size time-sliced vGPUs (placements)", "false"),
        "placement_slots": Key(Int(1, 256), "placement slots of the GPU", "memory / smallest type"),
        "hypervisor": Key(Enum({h: h for h in HYPERVISORS}), ", ".join(HYPERVISORS), "kvm"),
        "migration": Key(Bool(), "the GPU supports vGPU live migration", "true"),
        "gpu_instance_heterogeneous": Key(
            Bool(),
            "mixed-size vGPUs inside GPU instances (GB20x, R575+)",
            "not supported",
        ),
        "types": Key(Seq(VGPU_TYPE, min_len=1), "supported vGPU types", required=True),
        "scheduler": Key(SCHEDULER, "time-slice scheduler", "best effort"),
        "instances": Key(Seq(INSTANCE), "vGPU instances (VMs)", "none"),
    },
    expected="a vGPU host mapping",
)
CHURN = Map(
    {
        "gpu": Key(Int(lo=0), "GPU index", required=True),
        "types": Key(
            Seq(TYPE_REF, min_len=1, one_or_many=True), "types, used in turn", required=True
        ),
        "start": Key(Unit("duration", lo=0), "first VM starts", "0s"),
        "every": Key(Unit("duration", lo=1e-3), "a new VM every", required=True),
        "lifetime": Key(Unit("duration", lo=1e-3), "each VM lives", required=True),
        "count": Key(Int(lo=1), "number of VMs", "unbounded"),
        "load": Key(LOAD, "demand of each VM", "sm 30%"),
        "framebuffer_used": Key(PatternOf("size"), "framebuffer in use", "a quarter of the type's"),
        "license": Key(LICENSE, "license of each VM", "licensed"),
    },
    expected="a churn mapping",
)
GPU.register("vgpu", Key(VGPU, "vGPU host: types, scheduler, instances (docs/vgpu.md)", "none"))
TOP_LEVEL.register(
    "vgpu_events", Key(Seq(CHURN), "vGPU churn: VMs created and destroyed over time", "none")
)


# --------------------------------------------------------------------------- parsed objects


@dataclass(frozen=True)
class VgpuTypeSpec:
    id: int
    name: str
    type_class: str
    framebuffer: int
    max_instances: int
    max_per_vm: int
    frame_rate_limit: int  # 0: limiter off
    gi_profile: int | None
    license: str
    max_per_gi: int = 1
    fb_reservation: int | None = None
    gsp_heap: int | None = None
    bar1: int | None = None


@dataclass(frozen=True)
class SchedulerSpec:
    policy: int = POLICIES["best_effort"]
    arr: int = ARR_MODES["disable"]
    timeslice_ns: int = 2_000_000
    average_factor: int = 33
    min_timeslice_ns: int = 1_000_000
    max_timeslice_ns: int = 30_000_000
    supported: tuple[int, ...] = (1, 2, 3)


@dataclass(frozen=True)
class GuestProcessSpec:
    pid: int
    name: str
    load: dict[str, PatternSpec]


@dataclass(frozen=True)
class InstanceSpec:
    id: int
    type_id: int
    uuid: str
    vm_id: str
    mdev_uuid: str
    start: float
    stop: float | None
    guest_driver: str | None
    load: dict[str, PatternSpec]
    framebuffer_used: PatternSpec | None
    gpu_instance: int | None
    placement: int | None
    ecc: int | None
    accounting: bool
    accounting_pids: tuple[int, ...]
    encoder: dict[str, Any]
    fbc: dict[str, Any]
    frame_rate_limit: int | None
    processes: tuple[GuestProcessSpec, ...]
    license: LicenseTimeline
    salt: str
    migration: bool | None = None  # None: as the host
    migration_state: PatternSpec | None = None  # None: framebuffer in use + 64 MiB

    def alive(self, t: float) -> bool:
        """Running at ``t``; a VM that starts at 0 was already running before the scenario began
        (so NVML's sample history reaches back before t = 0, as on a host that was up)."""
        return (self.start <= t or self.start == 0.0) and (self.stop is None or t < self.stop)


@dataclass(frozen=True)
class ChurnSpec:
    gpu: int
    types: tuple[int, ...]
    start: float
    every: float
    lifetime: float
    count: int | None
    load: dict[str, PatternSpec]
    framebuffer_used: PatternSpec | None
    license: LicenseTimeline
    base_id: int
    salt: str

    def k_range(self, t0: float, t1: float) -> range:
        """VMs alive at some time in [t0, t1]."""
        if t1 < self.start:
            return range(0)
        hi = math.floor((t1 - self.start) / self.every + 1e-9)
        lo = math.floor((t0 - self.start - self.lifetime) / self.every + 1e-9) + 1
        lo = max(0, lo)
        if self.count is not None:
            hi = min(hi, self.count - 1)
        return range(lo, hi + 1)


class InstanceRuntime:
    """An instance bound to the scenario seed: its demand and usage as functions of time."""

    def __init__(self, spec: InstanceSpec, seed: int) -> None:
        self.spec = spec
        self.id = spec.id
        s = spec.salt
        self.load: dict[str, Evaluator] = {
            k: spec.load.get(k, PatternSpec.constant(0.0)).build(seed, f"{s}.load.{k}", 0.0, 1.0)
            for k in LOAD_KEYS
        }
        self._state: Evaluator | None = (
            spec.migration_state.build(seed, f"{s}.migration_state", lo=0.0)
            if spec.migration_state is not None
            else None
        )
        self._fb: Evaluator | None = (
            spec.framebuffer_used.build(seed, f"{s}.framebuffer_used", lo=0.0)
            if spec.framebuffer_used is not None
            else None
        )
        self.processes = [
            (
                p,
                {
                    k: p.load.get(k, PatternSpec.constant(0.0)).build(
                        seed, f"{s}.processes.{p.pid}.{k}", 0.0, 1.0
                    )
                    for k in LOAD_KEYS
                },
            )
            for p in spec.processes
        ]

    def demand(self, t: float) -> float:
        return self.load["sm"](t)

    def framebuffer_used(self, t: float, total: int) -> int:
        used = int(self._fb(t)) if self._fb is not None else total // 4
        return max(0, min(used, total))

    def migration_state(self, t: float, total: int) -> int:
        """Bytes a live migration moves now: the scenario's, or framebuffer in use + 64 MiB."""
        if self._state is not None:
            return max(0, int(self._state(t)))
        return self.framebuffer_used(t, total) + MIGRATION_STATE_OVERHEAD


# --------------------------------------------------------------------------- the host


@dataclass
class VgpuHost:
    """Per-GPU vGPU state (``GpuState.ext["vgpu"]``)."""

    gpu: GpuState
    seed: int
    sriov: bool
    heterogeneous: bool
    hypervisor: str
    types: dict[int, VgpuTypeSpec]
    scheduler: SchedulerSpec
    statics: list[InstanceRuntime]
    churn: list[ChurnSpec]
    slot_bytes: int
    slots: int
    migration: bool = True  # pGPU migration capability
    gi_heterogeneous: bool | None = None  # None: per-GPU-instance mode not supported
    _runtimes: dict[int, InstanceRuntime] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # statics by id: a host of 16 x 48 vGPUs made every instance call a linear search otherwise
    _static_by_id: dict[int, InstanceRuntime] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._static_by_id.update((i.id, i) for i in self.statics)

    # ---------------------------------------------------------------- instances

    def active(self, t: float) -> list[InstanceRuntime]:
        """Instances alive at ``t``, in NVML's order (creation time, then id)."""
        out = [i for i in self.statics if i.spec.alive(t)]
        for c in self.churn:
            for k in c.k_range(t, t):
                inst = self._churned(c, k)
                if inst.spec.alive(t):
                    out.append(inst)
        out.sort(key=lambda i: (i.spec.start, i.id))
        return out

    def framebuffer_allocated(self, t: float) -> int:
        """Physical framebuffer the running time-sliced vGPUs hold: each its whole profile.

        MIG-backed vGPUs live inside a GPU instance, whose memory is accounted there.
        """
        return sum(
            self.types[i.spec.type_id].framebuffer
            for i in self.active(t)
            if self.types[i.spec.type_id].gi_profile is None
        )

    def known(self, t: float) -> list[InstanceRuntime]:
        """Instances alive at any time in the recent past (for sample history)."""
        out = [i for i in self.statics if i.spec.start <= t]
        for c in self.churn:
            for k in c.k_range(t - KEEP_ENDED_SECONDS, t):
                out.append(self._churned(c, k))
        return out

    def find(self, vgpu: int, t: float) -> InstanceRuntime | None:
        inst = self._static_by_id.get(vgpu)
        if inst is not None:
            return inst if inst.spec.alive(t) else None
        for c in self.churn:
            k = vgpu - c.base_id
            if 0 <= k < CHURN_ID_BASE and (c.count is None or k < c.count):
                inst = self._churned(c, k)
                return inst if inst.spec.alive(t) else None
        return None

    def _churned(self, c: ChurnSpec, k: int) -> InstanceRuntime:
        vid = c.base_id + k
        with self._lock:
            inst = self._runtimes.get(vid)
            if inst is None:
                inst = InstanceRuntime(churn_instance(c, k, self.seed, self.hypervisor), self.seed)
                self._runtimes[vid] = inst
            return inst

    def prune(self, t: float) -> None:
        """Forget churned instances that ended long ago (bounded memory under churn)."""
        with self._lock:
            for vid in [
                v
                for v, i in self._runtimes.items()
                if i.spec.stop is not None and i.spec.stop < t - KEEP_ENDED_SECONDS
            ]:
                del self._runtimes[vid]

    @property
    def cached_instances(self) -> int:
        return len(self._runtimes)

    # ---------------------------------------------------------------- capacity

    def placement_size(self, vtype: VgpuTypeSpec) -> int:
        return max(1, vtype.framebuffer // self.slot_bytes)

    def taken_slots(self, t: float) -> list[tuple[int, int]]:
        out = []
        for inst in self.active(t):
            vtype = self.types[inst.spec.type_id]
            if inst.spec.placement is not None and vtype.gi_profile is None:
                out.append((inst.spec.placement, self.placement_size(vtype)))
        return out

    def supported_placements(self, vtype: VgpuTypeSpec) -> list[int]:
        size = self.placement_size(vtype)
        return list(range(0, self.slots - size + 1, size))

    def creatable_placements(self, vtype: VgpuTypeSpec, t: float) -> list[int]:
        # A type at its own instance limit has no creatable placement, free slots or not.
        if sum(1 for i in self.active(t) if i.spec.type_id == vtype.id) >= vtype.max_instances:
            return []
        taken = self.taken_slots(t)
        size = self.placement_size(vtype)
        return [
            p
            for p in self.supported_placements(vtype)
            if all(not (p < s + n and s < p + size) for s, n in taken)
        ]

    def creatable(self, t: float) -> list[int]:
        """Type ids that could be created now (the driver's creatable list)."""
        active = self.active(t)
        out = []
        for vtype in self.types.values():
            if vtype.gi_profile is not None:
                if not self.gpu.mig_enabled:
                    continue
                used = {i.spec.gpu_instance for i in active}
                if any(
                    gi.profile.id == vtype.gi_profile and gi.id not in used for gi in self.gpu.gis
                ):
                    out.append(vtype.id)
                continue
            if self.gpu.mig_enabled:
                continue
            sliced = [i for i in active if self.types[i.spec.type_id].gi_profile is None]
            if self.heterogeneous:
                if self.creatable_placements(vtype, t):
                    out.append(vtype.id)
            elif not sliced:
                out.append(vtype.id)
            else:
                sizes = {self.types[i.spec.type_id].framebuffer for i in sliced}
                if sizes == {vtype.framebuffer} and len(sliced) < vtype.max_instances:
                    out.append(vtype.id)
        return out


def find_instance(core: SimCore, vgpu: int, t: float) -> tuple[VgpuHost, InstanceRuntime] | None:
    for gpu in core.gpus:
        host = gpu.ext.get("vgpu")
        if isinstance(host, VgpuHost):
            inst = host.find(vgpu, t)
            if inst is not None:
                return host, inst
    return None


def host_of(gpu: GpuState) -> VgpuHost | None:
    host = gpu.ext.get("vgpu")
    return host if isinstance(host, VgpuHost) else None


# --------------------------------------------------------------------------- building


def _series(name: str) -> str:
    tail = name.rstrip()[-1:].upper()
    return tail if tail in CLASS_BY_SERIES else "C"


def _vm_id(hypervisor: str, seed: int, *salt: object) -> str:
    if hypervisor == "kvm":
        return derived_uuid("vm", seed, *salt)[3:]
    return str(1 + int(derived_uuid("d", seed, *salt)[2:10], 16) % 4000)


def churn_instance(c: ChurnSpec, k: int, seed: int, hypervisor: str) -> InstanceSpec:
    start = c.start + k * c.every
    vid = c.base_id + k
    return InstanceSpec(
        id=vid,
        type_id=c.types[k % len(c.types)],
        uuid=derived_uuid("vgpu", seed, "churn", c.base_id, k)[5:],
        vm_id=_vm_id(hypervisor, seed, "churn-vm", c.base_id, k),
        mdev_uuid=derived_uuid("mdev", seed, "churn", c.base_id, k)[5:],
        start=start,
        stop=start + c.lifetime,
        guest_driver=DEFAULT_GUEST_DRIVER,
        load=c.load,
        framebuffer_used=c.framebuffer_used,
        gpu_instance=None,
        placement=None,
        ecc=0,
        accounting=False,
        accounting_pids=(),
        encoder={},
        fbc={},
        frame_rate_limit=None,
        processes=(),
        license=c.license,
        salt=f"{c.salt}[{k}]",
    )


def _type_id(ref: int | str, types: dict[int, VgpuTypeSpec]) -> int | None:
    if isinstance(ref, int):
        return ref if ref in types else None
    return next((t.id for t in types.values() if t.name == ref), None)


Fail = Callable[[str, str], Exception]


def _types(
    gpu_spec: Any, raw: list[dict[str, Any]], path: str, fail: Fail
) -> dict[int, VgpuTypeSpec]:
    usable = gpu_spec.memory_total - gpu_spec.memory_reserved
    out: dict[int, VgpuTypeSpec] = {}
    for i, t in enumerate(raw):
        tpath = f"{path}.types[{i}]"
        if t["id"] in out:
            raise fail(join(tpath, "id"), f"vGPU type id {t['id']} is used twice")
        series = _series(t["name"])
        gi_profile = t.get("gpu_instance_profile")
        if gi_profile is not None:
            profile = next((p for p in gpu_spec.mig_profiles if p.id == gi_profile), None)
            if profile is None:
                raise fail(join(tpath, "gpu_instance_profile"), f"no MIG profile {gi_profile}")
            default_max = profile.instances * t.get("max_per_gpu_instance", 1)
        else:
            default_max = max(1, min(32, usable // t["framebuffer"]))
        out[t["id"]] = VgpuTypeSpec(
            id=t["id"],
            name=t["name"],
            type_class=t.get("class", CLASS_BY_SERIES[series]),
            framebuffer=t["framebuffer"],
            max_instances=t.get("max_instances", default_max),
            max_per_vm=t.get("max_per_vm", 1),
            frame_rate_limit=t.get("frame_rate_limit", 0 if series == "C" else 60),
            gi_profile=gi_profile,
            license=t.get("license", LICENSE_BY_SERIES[series]),
            max_per_gi=t.get("max_per_gpu_instance", 1),
            fb_reservation=_size(t.get("framebuffer_reservation")),
            gsp_heap=_size(t.get("gsp_heap")),
            bar1=_size(t.get("bar1")),
        )
    return out


def _size(value: float | None) -> int | None:
    return None if value is None else int(value)


def _scheduler(raw: dict[str, Any]) -> SchedulerSpec:
    return SchedulerSpec(
        policy=raw.get("policy", POLICIES["best_effort"]),
        arr=raw.get("arr", ARR_MODES["disable"]),
        timeslice_ns=round(raw.get("timeslice", 2e-3) * 1e9),
        average_factor=raw.get("average_factor", 33),
        min_timeslice_ns=round(raw.get("min_timeslice", 1e-3) * 1e9),
        max_timeslice_ns=round(raw.get("max_timeslice", 30e-3) * 1e9),
        supported=tuple(dict.fromkeys(raw.get("supported", [1, 2, 3]))),
    )


class _Ids:
    """vGPU instance ids across the host: explicit ones reserved, the rest 1, 2, … in order."""

    def __init__(self, scenario: Scenario) -> None:
        self.used: set[int] = set()
        for g in scenario.gpus:
            for inst in (g.extra.get("vgpu") or {}).get("instances", []):
                if "id" in inst:
                    self.used.add(inst["id"])
        self.next = 1

    def take(self) -> int:
        while self.next in self.used:
            self.next += 1
        self.used.add(self.next)
        return self.next


@dataclass
class HostBuild:
    types: dict[int, VgpuTypeSpec]
    scheduler: SchedulerSpec
    instances: list[InstanceSpec]
    churn: list[ChurnSpec]
    raw: dict[str, Any]


def build_hosts(scenario: Scenario, ctx: Ctx | None) -> dict[int, HostBuild]:
    """Check and build every GPU's vGPU section; raises ConfigError citing the line (with ctx)."""

    def fail(path: str, message: str) -> Exception:
        if ctx is not None:
            return ctx.error_at(path, message)
        return ValueError(f"{path}: {message}")

    ids = _Ids(scenario)
    seen_ids: dict[int, str] = {}
    out: dict[int, HostBuild] = {}
    for g in scenario.gpus:
        raw = g.extra.get("vgpu")
        if raw is None:
            continue
        path = f"{g.path}.vgpu"
        if g.virtualization_mode != HOST_VGPU:
            raise fail(path, "needs virtualization_mode: host_vgpu")
        types = _types(g, raw["types"], path, fail)
        hypervisor = raw.get("hypervisor", "kvm")
        instances: list[InstanceSpec] = []
        for i, d in enumerate(raw.get("instances", [])):
            ipath = f"{path}.instances[{i}]"
            type_id = _type_id(d["type"], types)
            if type_id is None:
                raise fail(join(ipath, "type"), f"no vGPU type {d['type']!r} on this GPU")
            vtype = types[type_id]
            vid = d["id"] if "id" in d else ids.take()
            if vid in seen_ids:
                raise fail(
                    join(ipath, "id"), f"vGPU instance id {vid} is also used by {seen_ids[vid]}"
                )
            seen_ids[vid] = ipath
            gi = d.get("gpu_instance")
            if vtype.gi_profile is not None:
                if not g.mig_enabled:
                    raise fail(join(ipath, "type"), "a MIG-backed type needs mig.enabled: true")
                match = next((x for x in g.gpu_instances if x.id == gi), None)
                if match is None:
                    raise fail(
                        ipath, "a MIG-backed vGPU needs gpu_instance: the id of a GPU instance"
                    )
                if match.profile.id != vtype.gi_profile:
                    raise fail(
                        join(ipath, "gpu_instance"),
                        f"GPU instance {gi} has profile {match.profile.id}, "
                        f"the type needs {vtype.gi_profile}",
                    )
            elif gi is not None:
                raise fail(join(ipath, "gpu_instance"), "only for MIG-backed types")
            elif g.mig_enabled:
                raise fail(join(ipath, "type"), "time-sliced vGPUs need MIG disabled")
            if "stop" in d and d["stop"] <= d.get("start", 0.0):
                raise fail(join(ipath, "stop"), "must be later than start")
            _check_framebuffer_used(d.get("framebuffer_used"), vtype, ipath, fail)
            instances.append(
                InstanceSpec(
                    id=vid,
                    type_id=type_id,
                    uuid=d.get("uuid") or derived_uuid("vgpu", scenario.seed, "vgpu", vid)[5:],
                    vm_id=d.get("vm_id") or _vm_id(hypervisor, scenario.seed, "vm", vid),
                    mdev_uuid=d.get("mdev_uuid") or derived_uuid("mdev", scenario.seed, vid)[5:],
                    start=d.get("start", 0.0),
                    stop=d.get("stop"),
                    guest_driver=d.get("guest_driver", DEFAULT_GUEST_DRIVER),
                    load=d.get("load", {}),
                    framebuffer_used=d.get("framebuffer_used"),
                    gpu_instance=gi,
                    placement=d.get("placement"),
                    ecc=ECC_MODES[d.get("ecc", "disabled")],
                    accounting=d.get("accounting", False),
                    accounting_pids=tuple(d.get("accounting_pids", [])),
                    encoder=d.get("encoder", {}),
                    fbc=d.get("fbc", {}),
                    frame_rate_limit=d.get("frame_rate_limit"),
                    processes=tuple(
                        GuestProcessSpec(
                            p["pid"],
                            p.get("name", f"process-{p['pid']}"),
                            {k: p[k] for k in LOAD_KEYS if k in p},
                        )
                        for p in d.get("processes", [])
                    ),
                    license=d.get("license", LicenseTimeline.constant()),
                    salt=ipath,
                    migration=d.get("migration"),
                    migration_state=d.get("migration_state"),
                )
            )
        _check_instance_counts(instances, types, path, fail)
        out[g.index] = HostBuild(types, _scheduler(raw.get("scheduler", {})), instances, [], raw)
    for i, c in enumerate(scenario.extra.get("vgpu_events", [])):
        cpath = f"vgpu_events[{i}]"
        if c["gpu"] not in out:
            raise fail(join(cpath, "gpu"), f"GPU {c['gpu']} has no vgpu section")
        build = out[c["gpu"]]
        types = build.types
        g = scenario.gpus[c["gpu"]]
        if g.mig_enabled or build.raw.get("heterogeneous"):
            raise fail(join(cpath, "gpu"), "churn is simulated on homogeneous, non-MIG vGPU hosts")
        type_ids = []
        for j, ref in enumerate(c["types"]):
            tid = _type_id(ref, types)
            if tid is None or types[tid].gi_profile is not None:
                raise fail(
                    f"{cpath}.types[{j}]", f"no time-sliced vGPU type {ref!r} on GPU {c['gpu']}"
                )
            type_ids.append(tid)
            _check_framebuffer_used(
                c.get("framebuffer_used"), types[tid], join(cpath, "framebuffer_used"), fail
            )
        build.churn.append(
            ChurnSpec(
                gpu=c["gpu"],
                types=tuple(type_ids),
                start=c.get("start", 0.0),
                every=c["every"],
                lifetime=c["lifetime"],
                count=c.get("count"),
                load=c.get("load", {"sm": PatternSpec.constant(0.3)}),
                framebuffer_used=c.get("framebuffer_used"),
                license=c.get("license", LicenseTimeline.constant()),
                base_id=(i + 1) * CHURN_ID_BASE,
                salt=cpath,
            )
        )
    return out


def _peak(pattern: PatternSpec) -> float:
    """The largest value a pattern is written to reach (jitter aside)."""
    if pattern.kind == "steps":
        values = [value for _at, value in pattern.steps]
    elif pattern.kind in ("sine", "noise"):
        values = [pattern.params["mean"] + abs(pattern.params["amplitude"])]
    else:
        values = [
            v for k, v in pattern.params.items() if PATTERN_PARAMS[pattern.kind][k][0] == "value"
        ]
    peak = max(values, default=0.0)
    return min(peak, pattern.hi) if pattern.hi is not None else peak


def _check_framebuffer_used(
    pattern: PatternSpec | None, vtype: VgpuTypeSpec, path: str, fail: Fail
) -> None:
    """A vGPU cannot use more framebuffer than its type gives it; once silently clamped."""
    if pattern is not None and _peak(pattern) > vtype.framebuffer:
        where = path if path.endswith("framebuffer_used") else join(path, "framebuffer_used")
        raise fail(
            where,
            f"{int(_peak(pattern))} bytes is more than the {vtype.framebuffer} bytes of "
            f"vGPU type {vtype.name!r}",
        )


def _check_instance_counts(
    instances: list[InstanceSpec], types: dict[int, VgpuTypeSpec], path: str, fail: Fail
) -> None:
    """At no time may more vGPUs of a type run on a GPU than the type's ``max_instances``."""
    for type_id, vtype in types.items():
        edges: list[tuple[float, int]] = []
        for inst in instances:
            if inst.type_id == type_id:
                edges.append((inst.start, 1))
                if inst.stop is not None:
                    edges.append((inst.stop, -1))
        running = 0
        for _t, step in sorted(edges):  # a stop sorts before a start at the same time
            running += step
            if running > vtype.max_instances:
                raise fail(
                    join(path, "instances"),
                    f"{running} vGPUs of type {vtype.name!r} run at once; the type allows at "
                    f"most {vtype.max_instances} (max_instances)",
                )


def _assign_placements(
    instances: list[InstanceSpec], types: dict[int, VgpuTypeSpec], slot_bytes: int, slots: int
) -> list[InstanceSpec]:
    """First free aligned slot for heterogeneous-mode instances that did not name one."""
    taken: list[tuple[int, int]] = []
    out = []
    for inst in sorted(instances, key=lambda i: (i.start, i.id)):
        vtype = types[inst.type_id]
        size = max(1, vtype.framebuffer // slot_bytes)
        placement = inst.placement
        if placement is None:
            placement = next(
                (
                    p
                    for p in range(0, slots - size + 1, size)
                    if all(not (p < s + n and s < p + size) for s, n in taken)
                ),
                None,
            )
        if placement is not None:
            taken.append((placement, size))
        out.append(dataclasses.replace(inst, placement=placement))
    return out


def _check(scenario: Scenario, ctx: Ctx) -> None:
    build_hosts(scenario, ctx)


def _host_factory(gpu: GpuState, core: SimCore) -> VgpuHost | None:
    built = _built(core).get(gpu.index)
    if built is None:
        return None
    types, instances, raw = built.types, built.instances, built.raw
    spec = gpu.spec
    sliced = [t.framebuffer for t in types.values() if t.gi_profile is None]
    slot_bytes = min(sliced) if sliced else GIB
    slots = raw.get("placement_slots") or max(
        1, (spec.memory_total - spec.memory_reserved) // slot_bytes
    )
    hetero = bool(raw.get("heterogeneous", False))
    if hetero:
        instances = _assign_placements(instances, types, slot_bytes, slots)
    host = VgpuHost(
        gpu=gpu,
        seed=core.scenario.seed,
        sriov=bool(raw.get("sriov", spec.architecture >= ARCHITECTURES["ampere"])),
        heterogeneous=hetero,
        hypervisor=raw.get("hypervisor", "kvm"),
        types=types,
        scheduler=built.scheduler,
        statics=[InstanceRuntime(i, core.scenario.seed) for i in instances],
        churn=built.churn,
        slot_bytes=slot_bytes,
        slots=slots,
        migration=bool(raw.get("migration", True)),
        gi_heterogeneous=raw.get("gpu_instance_heterogeneous"),
    )
    gpu.memory_claims.append(host.framebuffer_allocated)
    return host


_BUILT_ATTR = "_vgpu_built"
# What a migration moves beyond the framebuffer in use (the simulator's default; a scenario gives
# its own with ``migration_state``): GPU context and channel state.
MIGRATION_STATE_OVERHEAD = 64 * 1024 * 1024


def _built(core: SimCore) -> dict[int, HostBuild]:
    cached = getattr(core, _BUILT_ATTR, None)
    if cached is None:
        cached = build_hosts(core.scenario, None)
        setattr(core, _BUILT_ATTR, cached)
    return cached


registry.register_scenario_check(_check)
registry.register_gpu_state("vgpu", _host_factory)
