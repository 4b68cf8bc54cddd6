"""Row models: what each table of any front end shows, built from one :class:`Snapshot`.

Rows are frozen dataclasses holding raw values (bytes, ratios, seconds; ``None`` when NVML did not
give it) plus a stable ``key``, so a front end can diff two refreshes by key and update only the
cells that changed, sort on raw values, and format with :mod:`vgpumon.view.format` at the last
moment. ``fields`` gives the text a filter term matches (see :mod:`vgpumon.view.filter`).

A vGPU's scheduler share, its due and whether it is starved are the collector's verdict, read
from the snapshot (``vgpu_schedulers[].shares``, docs/verdicts.md): no row decides them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from vgpumon.model import (
    DeviceAllocation,
    Gpu,
    HostRollup,
    Snapshot,
    VgpuInstance,
    VgpuScheduler,
    VgpuShare,
)
from vgpumon.view import badges as b
from vgpumon.view.badges import Badge
from vgpumon.view.capacity import fitting_names, migration_readiness
from vgpumon.view.filter import FITS_SEPARATOR

# Filter/display names for the GPU's role on this host.
MODE_LABELS = {
    "mig": "MIG",
    "baremetal": "bare metal",
    "passthrough": "pass-through",
    "vgpu-host": "vGPU host",
    "vgpu-guest": "vGPU guest",
    "vsga-host": "vSGA host",
    "unknown": "—",
}
_VIRT_MODES = {
    "none": "baremetal",
    "passthrough": "passthrough",
    "host_vgpu": "vgpu-host",
    "vgpu": "vgpu-guest",
    "host_vsga": "vsga-host",
}
# Clock event reasons that are not a hold-down worth showing.
_NOT_HELD = frozenset({"idle", "applications_clocks_setting", "display_clock_setting"})
_SHORT_REASONS = {
    "sw_power_cap": "power cap",
    "hw_slowdown": "hw slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "sw thermal",
    "hw_thermal": "hw thermal",
    "power_brake": "power brake",
}


def gpu_mode(gpu: Gpu) -> str:
    """The GPU's role: ``mig`` when MIG is on (whatever sits on top), else its virtualization."""
    if gpu.mig_mode_current:
        return "mig"
    return _VIRT_MODES.get(gpu.virtualization_mode or "", "unknown")


def _ratio(used: float | None, total: float | None) -> float | None:
    if used is None or not total:
        return None
    return used / total


# --------------------------------------------------------------------------- vGPU


def _scheduler_for(gpu: Gpu, vgpu: VgpuInstance) -> VgpuScheduler | None:
    for s in gpu.vgpu_schedulers:
        if s.gpu_instance_id == vgpu.gpu_instance_id:
            return s
    return gpu.vgpu_schedulers[0] if len(gpu.vgpu_schedulers) == 1 else None


def _holders(snapshot: Snapshot | None, kind: str, gpu_uuid: str, ident: int | None) -> Holders:
    """The pods (and KubeVirt VMs) the kubelet gave this device to, from the snapshot."""
    if snapshot is None or not snapshot.allocations:
        return NO_HOLDERS
    return _HOLDERS.of(snapshot.allocations).get((kind, gpu_uuid, ident), NO_HOLDERS)


class _HolderIndex:
    """Holders by device, built once per snapshot's allocation list rather than once per row.

    A screen asks for every GPU, MIG instance and vGPU row of a snapshot many times a second;
    scanning all allocations for each row would cost rows x allocations. The list is immutable,
    so the index of the last one asked for is kept, recognised by identity.
    """

    def __init__(self) -> None:
        self._allocations: tuple[DeviceAllocation, ...] | None = None
        self._index: dict[tuple[str, str, int | None], Holders] = {}

    def of(
        self, allocations: tuple[DeviceAllocation, ...]
    ) -> dict[tuple[str, str, int | None], Holders]:
        if allocations is not self._allocations:
            grouped: dict[tuple[str, str, int | None], list[DeviceAllocation]] = {}
            for a in allocations:
                if a.kind is None or a.gpu_uuid is None or a.pod is None:
                    continue
                ident = {"mig": a.gpu_instance_id, "vgpu": a.vgpu_id}.get(a.kind)
                grouped.setdefault((a.kind, a.gpu_uuid, ident), []).append(a)
            self._index = {
                key: Holders(
                    " ".join(a.pod or "" for a in group),
                    " ".join(a.namespace or "" for a in group),
                    " ".join(a.vm_name for a in group if a.vm_name),
                    _pod_label(group),
                )
                for key, group in grouped.items()
            }
            self._allocations = allocations
        return self._index


_HOLDERS = _HolderIndex()


def _pod_label(group: list[DeviceAllocation]) -> str:
    """``namespace/pod`` of the first holder, ``+N`` for the others (a shared GPU's pods)."""
    pods = sorted({(a.namespace or "", a.pod or "") for a in group})
    first = "/".join(part for part in pods[0] if part)
    return first if len(pods) == 1 else f"{first} +{len(pods) - 1}"


@dataclass(frozen=True)
class Holders:
    """Who holds a device, as filter text (``pod:``, ``ns:``); empty strings where nobody does."""

    pods: str = ""
    namespaces: str = ""
    vms: str = ""
    label: str = ""  # what the pod column shows: ``namespace/pod``, ``+N`` when shared

    @property
    def fields(self) -> dict[str, str]:
        return {"vm": self.vms, "pod": self.pods, "ns": self.namespaces}


NO_HOLDERS = Holders()


def vm_label(v: VgpuInstance, holders: Holders) -> str | None:
    """What a person calls the VM: libvirt's domain name, KubeVirt's VM name, else NVML's VM id."""
    if v.vm is not None and v.vm.name:
        return v.vm.name
    return holders.vms or v.vm_id


@dataclass(frozen=True)
class VgpuRow:
    key: str
    host: str
    gpu_index: int
    gpu_uuid: str
    gpu_name: str | None
    vgpu_id: int
    vm: str | None
    type_name: str | None
    type_class: str | None
    gpu_instance_id: int | None
    framebuffer_used: int | None
    framebuffer_total: int | None
    sm: float | None
    memory: float | None
    encoder: float | None
    decoder: float | None
    license_state: str | None
    licensed: bool | None
    expiry_status: str | None
    expiry: float | None
    expires_in: float | None  # seconds from the snapshot's time; None when no expiry applies
    frame_rate_limit: int | None
    policy: str | None
    # The scheduler verdict over its window (collect/starvation.py): what it received, what it
    # was due, and the state (starved, ok, or why there is none; None: no scheduler data).
    received: float | None
    due: float | None
    share_state: str | None
    starved: bool
    unlicensed: bool
    expiring: bool
    vm_id: str | None = None  # NVML's id of the VM; ``vm`` is its name where one is known
    holders: Holders = NO_HOLDERS
    # How long it has stayed under the idle ratio, licensed and running (metering; None: not
    # metered), and whether that is long enough for the idle badge.
    idle_seconds: float | None = None
    idle: bool = False
    # This host's side of a live migration (docs/capacity.md): ready, and what says no.
    migration_ready: bool | None = None
    migration_blockers: tuple[str, ...] = ()
    migration_bytes: int | None = None  # what a live migration would move now (R565+)
    gpu_fits: frozenset[str] = frozenset()  # its GPU's: a ``fits:`` term selects GPUs

    @property
    def framebuffer_ratio(self) -> float | None:
        return _ratio(self.framebuffer_used, self.framebuffer_total)

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "name": self.gpu_name or "",
            "mode": "vgpu-host",
            "vgpu": str(self.vgpu_id),
            "vm": " ".join(x for x in (self.vm, self.vm_id) if x),
            "pod": self.holders.pods,
            "ns": self.holders.namespaces,
            "type": self.type_name or "",
            "class": self.type_class or "",
            "license": self.license_state or "",
            "policy": self.policy or "",
            "fits": FITS_SEPARATOR.join(sorted(self.gpu_fits)),
            "badge": " ".join(
                k
                for k, on in (
                    ("unlicensed", self.unlicensed),
                    ("expiring", self.expiring),
                    ("starved", self.starved),
                    ("idle", self.idle),
                )
                if on
            ),
        }


class _VgpuContext:
    """What the vGPU rows of one GPU share: each scheduler's verdicts by vGPU, the metering
    stage's idle times, the GPU's fits (worked out once per GPU, not once per row)."""

    __slots__ = ("fits", "idle", "shares")

    def __init__(self, gpu: Gpu) -> None:
        self.shares = {id(s): {x.vgpu_id: x for x in s.shares} for s in gpu.vgpu_schedulers}
        metering = gpu.metering
        self.idle = {m.vgpu_id: m.idle_seconds for m in metering.vgpus} if metering else {}
        self.fits = fitting_names(gpu)

    def share(self, scheduler: VgpuScheduler | None, vgpu_id: int) -> VgpuShare | None:
        return None if scheduler is None else self.shares[id(scheduler)].get(vgpu_id)


def _vgpu_alarms(
    snapshot: Snapshot, gpu: Gpu, v: VgpuInstance, ctx: _VgpuContext
) -> tuple[VgpuScheduler | None, VgpuShare | None, bool, bool, bool]:
    """A vGPU's scheduler and share verdict, and whether it is unlicensed, expiring and
    starved: what its row shows and what its GPU's badges count (the same answers for both)."""
    sched = _scheduler_for(gpu, v)
    share = ctx.share(sched, v.vgpu_id)
    lic = v.license
    return (
        sched,
        share,
        b.unlicensed(lic.state, lic.licensed),
        # The collector's lease verdict (docs/licensing.md): not renewed when due.
        lic.renewal_overdue is True,
        share is not None and share.state == "starved",
    )


def vgpu_key(host: str, gpu: Gpu, v: VgpuInstance) -> str:
    return f"{host}/{gpu.uuid}/vgpu/{v.vgpu_id}"


def _vgpu_row(
    host: str, snapshot: Snapshot, gpu: Gpu, v: VgpuInstance, ctx: _VgpuContext
) -> VgpuRow:
    sched, share, unlicensed, expiring, is_starved = _vgpu_alarms(snapshot, gpu, v, ctx)
    lic = v.license
    expiry = lic.expiry_timestamp_seconds or None
    holders = _holders(snapshot, "vgpu", gpu.uuid, v.vgpu_id)
    ready, blockers = migration_readiness(snapshot.driver.driver_version, gpu, v)
    return VgpuRow(
        key=vgpu_key(host, gpu, v),
        host=host,
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        gpu_name=gpu.name,
        vgpu_id=v.vgpu_id,
        vm=vm_label(v, holders),
        type_name=v.type_name,
        type_class=v.type_class,
        gpu_instance_id=v.gpu_instance_id,
        framebuffer_used=v.framebuffer_used_bytes,
        framebuffer_total=v.framebuffer_total_bytes,
        sm=v.utilization.sm,
        memory=v.utilization.memory,
        encoder=v.utilization.encoder,
        decoder=v.utilization.decoder,
        license_state=lic.state,
        licensed=lic.licensed,
        expiry_status=lic.expiry_status,
        expiry=expiry,
        expires_in=None if expiry is None else expiry - snapshot.timestamp,
        frame_rate_limit=v.frame_rate_limit,
        policy=None if sched is None else sched.policy,
        received=None if share is None else share.received,
        due=None if share is None else share.due,
        share_state=None if share is None else share.state,
        starved=is_starved,
        unlicensed=unlicensed,
        expiring=expiring,
        vm_id=v.vm_id,
        holders=holders,
        idle_seconds=ctx.idle.get(v.vgpu_id),
        idle=b.idle(ctx.idle.get(v.vgpu_id), b.IDLE_VGPU_AFTER_SECONDS),
        migration_ready=ready,
        migration_blockers=blockers,
        migration_bytes=v.migration_state_bytes,
        gpu_fits=ctx.fits,
    )


def vgpu_rows(host: str, snapshot: Snapshot, gpu: Gpu) -> list[VgpuRow]:
    ctx = _VgpuContext(gpu)
    return [_vgpu_row(host, snapshot, gpu, v, ctx) for v in gpu.vgpu_instances]


# --------------------------------------------------------------------------- MIG


@dataclass(frozen=True)
class MigRow:
    key: str
    host: str
    gpu_index: int
    gpu_uuid: str
    gpu_name: str | None
    gpu_instance_id: int
    profile: str | None
    placement: str | None
    memory_used: int | None
    memory_total: int | None
    sm_active: float | None
    sm_occupancy: float | None
    tensor_active: float | None
    dram_active: float | None
    compute_instances: int
    sm_count: int | None  # SMs over all its compute instances
    processes: int | None
    holders: Holders = NO_HOLDERS
    gpu_fits: frozenset[str] = frozenset()  # its GPU's: a ``fits:`` term selects GPUs

    @property
    def memory_ratio(self) -> float | None:
        return _ratio(self.memory_used, self.memory_total)

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "name": self.gpu_name or "",
            "mode": "mig",
            "profile": self.profile or "",
            "type": self.profile or "",
            "gi": str(self.gpu_instance_id),
            "fits": FITS_SEPARATOR.join(sorted(self.gpu_fits)),
            **self.holders.fields,
        }


def in_use(decided: int | None, nvml: int | None) -> int | None:
    """Memory in use as vgpumon.collect.memory_in_use decided it (NVML's figure, or on a
    MIG-backed vGPU host what the guests hold where that is more). A snapshot from an exporter
    older than that figure carries only NVML's, which is then shown; nothing is worked out here.
    """
    return decided if decided is not None else nvml


def mig_rows(host: str, gpu: Gpu, snapshot: Snapshot | None = None) -> list[MigRow]:
    """MIG GPU instances as rows; ``snapshot`` adds who holds each (its kubelet allocations)."""
    rows = []
    fits = fitting_names(gpu)
    for gi in gpu.mig_instances:
        sms = [ci.sm_count for ci in gi.compute_instances if ci.sm_count is not None]
        procs = None
        if gpu.processes is not None:
            procs = sum(1 for p in gpu.processes if p.gpu_instance_id == gi.id)
        placement = None
        if gi.placement_start is not None:
            placement = f"{gi.placement_start}+{gi.placement_size if gi.placement_size else '?'}"
        gpm = gi.gpm
        rows.append(
            MigRow(
                key=f"{host}/{gpu.uuid}/gi/{gi.id}",
                host=host,
                gpu_index=gpu.index,
                gpu_uuid=gpu.uuid,
                gpu_name=gpu.name,
                gpu_instance_id=gi.id,
                profile=gi.profile_name,
                placement=placement,
                memory_used=in_use(gi.memory_in_use_bytes, gi.memory_used_bytes),
                memory_total=gi.memory_total_bytes,
                sm_active=None if gpm is None else gpm.sm_active,
                sm_occupancy=None if gpm is None else gpm.sm_occupancy,
                tensor_active=None if gpm is None else gpm.tensor_active,
                dram_active=None if gpm is None else gpm.dram_active,
                compute_instances=len(gi.compute_instances),
                sm_count=sum(sms) if sms else None,
                processes=procs,
                holders=_holders(snapshot, "mig", gpu.uuid, gi.id),
                gpu_fits=fits,
            )
        )
    return rows


# --------------------------------------------------------------------------- GPU


@dataclass(frozen=True)
class GpuRow:
    key: str
    host: str
    index: int
    uuid: str
    name: str | None
    mode: str  # a key of MODE_LABELS
    up: bool
    down_reason: str | None
    hung: bool
    utilization: float | None
    memory_used: int | None
    memory_total: int | None
    power: float | None
    power_limit: float | None
    temperature: float | None
    sm_clock: float | None
    held_by: tuple[str, ...]  # active clock event reasons that hold clocks down
    gpm_sm: float | None
    gpm_dram: float | None
    gpm_tensor: float | None
    vgpus: int
    migs: int
    xid: tuple[tuple[int, int], ...]  # (Xid, count) pairs; rows stay hashable for caching
    badges: tuple[Badge, ...]
    holders: Holders = NO_HOLDERS  # pods given the whole GPU
    unlicensed: int = 0  # its vGPUs running without a license
    # Names of the vGPU types and MIG profiles of which one more fits now (``fits:`` filters).
    fits: frozenset[str] = frozenset()
    cc: str | None = None  # confidential computing: cc_label()

    @property
    def mode_label(self) -> str:
        return MODE_LABELS[self.mode]

    @property
    def memory_ratio(self) -> float | None:
        return _ratio(self.memory_used, self.memory_total)

    @property
    def instances(self) -> int:
        """Children it expands into: MIG GPU instances or vGPU instances."""
        return self.migs + self.vgpus

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.index),
            "name": self.name or "",
            "uuid": self.uuid,
            "mode": self.mode,
            "badge": " ".join(x.kind for x in self.badges),
            "fits": FITS_SEPARATOR.join(sorted(self.fits)),
            **self.holders.fields,
        }


def cc_label(gpu: Gpu) -> str | None:
    """Confidential computing in a word: "ready" / "not ready" (CC on; the GPUs accept work or
    wait for attestation), "devtools" (on, not a protected setup), "off"; None where the driver
    does not say."""
    cc = gpu.conf_compute
    if cc.feature_enabled is None:
        return None
    if not cc.feature_enabled:
        return "off"
    if cc.devtools_mode:
        return "devtools"
    if cc.ready is None:
        return "on"
    return "ready" if cc.ready else "not ready"


def _gpu_badges(gpu: Gpu, hung: bool, vgpus: _VgpuAlarms, snapshot: Snapshot) -> tuple[Badge, ...]:
    out = []
    if not gpu.up:
        out.append(b.badge("lost", "lost" if gpu.down_reason in (None, "gpu_is_lost") else "down"))
    if hung:
        out.append(b.badge("hung"))
    recovery = gpu.recovery
    if gpu.up and recovery.action_needed and recovery.action is not None:
        out.append(b.badge("recovery", b.RECOVERY_LABELS.get(recovery.action, "recover!")))
    if gpu.up and recovery.unrepairable_memory:
        out.append(b.badge("memory", "mem-fault"))
    if gpu.up and recovery.repair_pending:
        out.append(b.badge("repair"))
    if snapshot.health.wedged:
        out.append(b.badge("stale"))
    if gpu.xid_errors:
        newest = max(gpu.xid_errors)
        out.append(b.badge("xid", f"Xid{newest}"))
    guest_unlicensed = any(
        f.licensed is False or (f.state or "").startswith("unlicensed") for f in gpu.guest_licenses
    )
    if vgpus.unlicensed or guest_unlicensed:
        out.append(b.badge("unlicensed"))
    guest_expiring = any(f.renewal_overdue for f in gpu.guest_licenses)
    if vgpus.expiring or guest_expiring:
        out.append(b.badge("expiring"))
    if vgpus.starved:
        out.append(b.badge("starved"))
    if idle_holders(gpu):
        out.append(b.badge("idle"))
    return tuple(sorted(out))


@dataclass(frozen=True)
class _VgpuAlarms:
    """How many of a GPU's vGPUs are unlicensed, expiring, starved: what its row counts."""

    unlicensed: int = 0
    expiring: int = 0
    starved: int = 0


def _alarms_of_rows(vgpus: list[VgpuRow]) -> _VgpuAlarms:
    return _VgpuAlarms(
        sum(v.unlicensed for v in vgpus),
        sum(v.expiring for v in vgpus),
        sum(v.starved for v in vgpus),
    )


def _alarms(snapshot: Snapshot, gpu: Gpu) -> _VgpuAlarms:
    """The GPU's vGPUs' alarms without building their rows (a GPU row is drawn whether or not
    its vGPUs are)."""
    if not gpu.vgpu_instances:
        return _VgpuAlarms()
    ctx = _VgpuContext(gpu)
    unlicensed = expiring = hungry = 0
    for v in gpu.vgpu_instances:
        *_, is_unlicensed, is_expiring, is_starved = _vgpu_alarms(snapshot, gpu, v, ctx)
        unlicensed += is_unlicensed
        expiring += is_expiring
        hungry += is_starved
    return _VgpuAlarms(unlicensed, expiring, hungry)


def idle_holders(gpu: Gpu) -> int:
    """vGPUs and processes on ``gpu`` idle long enough for the idle badge (from metering)."""
    m = gpu.metering
    if m is None:
        return 0
    vgpus = sum(b.idle(v.idle_seconds, b.IDLE_VGPU_AFTER_SECONDS) for v in m.vgpus)
    procs = sum(b.idle(p.idle_seconds, b.IDLE_PROCESS_AFTER_SECONDS) for p in m.processes)
    return vgpus + procs


def gpu_row(
    host: str,
    snapshot: Snapshot,
    gpu: Gpu,
    vgpus: list[VgpuRow] | None = None,
) -> GpuRow:
    """The GPU's row; ``vgpus`` are its vGPU rows when the caller has built them already (their
    alarms are counted without building them otherwise)."""
    alarms = _alarms(snapshot, gpu) if vgpus is None else _alarms_of_rows(vgpus)
    hung = gpu.uuid in snapshot.health.hung_gpus
    gpm = gpu.gpm
    return GpuRow(
        key=f"{host}/{gpu.uuid}",
        host=host,
        index=gpu.index,
        uuid=gpu.uuid,
        name=gpu.name,
        mode=gpu_mode(gpu),
        up=gpu.up,
        down_reason=gpu.down_reason,
        hung=hung,
        utilization=gpu.utilization.gpu,
        memory_used=in_use(gpu.memory_in_use_bytes, gpu.memory.used_bytes),
        memory_total=gpu.memory.total_bytes,
        power=gpu.power_watts,
        power_limit=gpu.power_limit_watts,
        temperature=gpu.temperatures.gpu_celsius,
        sm_clock=gpu.clocks.sm_hertz,
        held_by=tuple(
            _SHORT_REASONS.get(r, r) for r in gpu.clock_events.active if r not in _NOT_HELD
        ),
        gpm_sm=None if gpm is None else gpm.sm_active,
        gpm_dram=None if gpm is None else gpm.dram_active,
        gpm_tensor=None if gpm is None else gpm.tensor_active,
        vgpus=len(gpu.vgpu_instances),
        migs=len(gpu.mig_instances),
        xid=tuple(sorted(gpu.xid_errors.items())),
        badges=_gpu_badges(gpu, hung, alarms, snapshot),
        holders=_holders(snapshot, "gpu", gpu.uuid, None),
        unlicensed=alarms.unlicensed,
        fits=fitting_names(gpu),
        cc=cc_label(gpu),
    )


def gpu_rows(host: str, snapshot: Snapshot) -> list[GpuRow]:
    return [gpu_row(host, snapshot, g) for g in snapshot.gpus]


class HostRows:
    """A host's rows for one snapshot, for a front end that draws it many times: the GPU rows at
    once (a GPU row counts its vGPUs' alarms without building their rows), each vGPU's row the
    first time it is asked for (a host of 768 vGPUs shows a screenful of them), then kept."""

    def __init__(self, host: str, snapshot: Snapshot) -> None:
        self.host, self.snapshot = host, snapshot
        self.gpus = tuple(gpu_row(host, snapshot, g) for g in snapshot.gpus)
        self._by_uuid = {g.uuid: g for g in snapshot.gpus}
        self._contexts: dict[str, _VgpuContext] = {}
        self._vgpus: dict[tuple[str, int], VgpuRow] = {}

    def gpu(self, uuid: str) -> Gpu:
        return self._by_uuid[uuid]

    def vgpu(self, uuid: str, index: int) -> VgpuRow:
        """The row of the ``index``-th vGPU of the GPU ``uuid`` (built once)."""
        row = self._vgpus.get((uuid, index))
        if row is None:
            gpu = self._by_uuid[uuid]
            ctx = self._contexts.get(uuid)
            if ctx is None:
                ctx = self._contexts[uuid] = _VgpuContext(gpu)
            row = _vgpu_row(self.host, self.snapshot, gpu, gpu.vgpu_instances[index], ctx)
            self._vgpus[(uuid, index)] = row
        return row

    def vgpus(self, uuid: str) -> list[VgpuRow]:
        """Every vGPU row of the GPU ``uuid``, in the snapshot's order."""
        count = len(self._by_uuid[uuid].vgpu_instances)
        return [self.vgpu(uuid, i) for i in range(count)]


# --------------------------------------------------------------------------- processes


@dataclass(frozen=True)
class ProcessRow:
    key: str
    host: str
    gpu_index: int
    pid: int
    name: str | None
    kind: str  # compute | graphics | mps | vgpu (a guest process seen from the host)
    where: str | None  # "GI/CI" on MIG, "vGPU n" for a guest process, else None
    memory: int | None
    sm: float | None
    memory_util: float | None
    # From the host's /proc, for processes of this host only (None elsewhere).
    user: str | None = None
    command: str | None = None
    cpu: float | None = None
    host_memory: int | None = None
    # How long it has held memory with no SM use (metering; None: not metered).
    idle_seconds: float | None = None
    idle: bool = False

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "pid": str(self.pid),
            "process": " ".join(x for x in (self.name, self.command) if x),
            "kind": self.kind,
            "user": self.user or "",
            "badge": "idle" if self.idle else "",
        }


class HostProcess(Protocol):
    """What the host knows of a process (``vgpumon.sources.procinfo.ProcInfo``)."""

    @property
    def user(self) -> str | None: ...
    @property
    def command(self) -> str | None: ...
    @property
    def cpu(self) -> float | None: ...
    @property
    def rss_bytes(self) -> int | None: ...


def process_rows(
    host: str, gpu: Gpu, local: Mapping[int, HostProcess] | None = None
) -> list[ProcessRow]:
    """The GPU's processes; ``local`` adds user, command line, CPU and memory from this host."""
    rows = [_with_local(r, local) for r in _process_rows(host, gpu)]
    return rows


def _with_local(row: ProcessRow, local: Mapping[int, HostProcess] | None) -> ProcessRow:
    # A process inside a vGPU or a VM of a hypervisor's list is not a process of this host.
    info = None if local is None or row.kind in ("vgpu", "vm") else local.get(row.pid)
    if info is None:
        return row
    return dataclasses.replace(
        row, user=info.user, command=info.command, cpu=info.cpu, host_memory=info.rss_bytes
    )


def _process_rows(host: str, gpu: Gpu) -> list[ProcessRow]:
    rows = []
    idle = {m.pid: m.idle_seconds for m in gpu.metering.processes} if gpu.metering else {}
    for p in gpu.processes or ():
        where = None
        if p.gpu_instance_id is not None:
            ci = "?" if p.compute_instance_id is None else p.compute_instance_id
            where = f"GI{p.gpu_instance_id}/CI{ci}"
        rows.append(
            ProcessRow(
                key=f"{host}/{gpu.uuid}/pid/{p.pid}/{p.kind}",
                host=host,
                gpu_index=gpu.index,
                pid=p.pid,
                name=p.name,
                kind=p.kind,
                where=where,
                memory=p.used_memory_bytes,
                sm=p.sm_utilization,
                memory_util=p.memory_utilization,
                idle_seconds=idle.get(p.pid),
                idle=b.idle(idle.get(p.pid), b.IDLE_PROCESS_AFTER_SECONDS),
            )
        )
    for vp in gpu.vgpu_processes:
        rows.append(
            ProcessRow(
                key=f"{host}/{gpu.uuid}/vgpu/{vp.vgpu_id}/pid/{vp.pid}",
                host=host,
                gpu_index=gpu.index,
                pid=vp.pid,
                name=vp.name,
                kind="vgpu",
                where=f"vGPU{vp.vgpu_id}",
                memory=None,
                sm=vp.sm_utilization,
                memory_util=vp.memory_utilization,
            )
        )
    return rows


# --------------------------------------------------------------------------- scheduler


@dataclass(frozen=True)
class SchedulerRow:
    key: str
    host: str
    gpu_index: int
    gpu_instance_id: int | None
    policy: str | None
    arr: bool | None
    timeslice: float | None
    average_factor: int | None
    frequency: float | None
    vgpus: int
    log_entries: int
    log_missed: int
    starved: int  # its vGPUs the collector's verdict calls starved
    # Why some of its vGPUs have no verdict (a state of SHARE_STATES other than starved/ok, the
    # commonest); None when every vGPU has one.
    undecided: str | None = None

    @property
    def fields(self) -> dict[str, str]:
        return {"host": self.host, "gpu": str(self.gpu_index), "policy": self.policy or ""}


def _undecided(scheduler: VgpuScheduler) -> str | None:
    counts: dict[str, int] = {}
    for v in scheduler.shares:
        if v.state not in ("starved", "ok"):
            counts[v.state] = counts.get(v.state, 0) + 1
    return max(sorted(counts), key=lambda k: counts[k]) if counts else None


@dataclass(frozen=True)
class EncoderShareRow:
    """One vGPU on one video encoder engine: what it received against its due, and the
    collector's verdict (the graphics engine's rule, per engine; docs/verdicts.md)."""

    key: str
    host: str
    gpu_index: int
    vgpu_id: int
    vm: str | None
    engine: str
    received: float | None
    waited: float | None
    due: float | None
    share_state: str | None

    @property
    def starved(self) -> bool:
        return self.share_state == "starved"

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "vgpu": str(self.vgpu_id),
            "vm": self.vm or "",
            "engine": self.engine,
            "badge": "starved" if self.starved else "",
        }


def encoder_share_rows(host: str, gpu: Gpu) -> list[EncoderShareRow]:
    """Every vGPU with a verdict on each encoder engine of ``gpu`` where the engine was used
    (an engine nobody ran on or waited for in the window says nothing)."""
    vms = {v.vgpu_id: _vm_label(v) for v in gpu.vgpu_instances}
    used = {
        sch.engine
        for sch in gpu.vgpu_encoder_schedulers
        for v in sch.shares
        if (v.received or 0.0) > 0 or (v.waited or 0.0) > 0
    }
    return [
        EncoderShareRow(
            key=f"{host}/{gpu.uuid}/{sch.engine}/{v.vgpu_id}",
            host=host,
            gpu_index=gpu.index,
            vgpu_id=v.vgpu_id,
            vm=vms.get(v.vgpu_id),
            engine=sch.engine,
            received=v.received,
            waited=v.waited,
            due=v.due,
            share_state=v.state,
        )
        for sch in gpu.vgpu_encoder_schedulers
        if sch.engine in used
        for v in sch.shares
    ]


def _vm_label(v: VgpuInstance) -> str | None:
    """The VM's name; without one, NVML's VM id, shortened when it is a long UUID."""
    if v.vm is not None:
        return v.vm.name
    if v.vm_id is not None and len(v.vm_id) > 12:
        return v.vm_id[:8] + "…"
    return v.vm_id


def scheduler_rows(host: str, snapshot: Snapshot, gpu: Gpu) -> list[SchedulerRow]:
    rows = []
    for s in gpu.vgpu_schedulers:
        members = sum(1 for v in gpu.vgpu_instances if v.gpu_instance_id == s.gpu_instance_id)
        gi = "all" if s.gpu_instance_id is None else str(s.gpu_instance_id)
        rows.append(
            SchedulerRow(
                key=f"{host}/{gpu.uuid}/sched/{gi}",
                host=host,
                gpu_index=gpu.index,
                gpu_instance_id=s.gpu_instance_id,
                policy=s.policy,
                arr=s.arr_enabled,
                timeslice=s.timeslice_seconds,
                average_factor=s.average_factor,
                frequency=s.frequency_hertz,
                vgpus=members,
                log_entries=s.log_entries_total,
                log_missed=s.log_entries_missed_total,
                starved=sum(1 for v in s.shares if v.state == "starved"),
                undecided=_undecided(s),
            )
        )
    return rows


# --------------------------------------------------------------------------- licenses


@dataclass(frozen=True)
class LicenseRow:
    key: str
    host: str
    gpu_index: int
    subject: str  # the vGPU id on a host, the feature name inside a guest
    vm: str | None
    type_name: str | None
    licensed: bool | None
    state: str | None
    expiry_status: str | None
    expiry: float | None
    expires_in: float | None
    product: str | None

    @property
    def urgency(self) -> tuple[int, float]:
        """Sort key, most urgent first: unlicensed, then soonest expiry, then the rest."""
        state = self.state or ""
        if state == "unlicensed_restricted" or state == "unlicensed":
            return (0, 0.0)
        if state.startswith("unlicensed"):
            return (1, 0.0)
        if self.expires_in is not None:
            return (2, self.expires_in)
        if self.state is None or state in ("unknown", "uninitialized"):
            return (3, 0.0)
        return (4, 0.0)

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "vm": self.vm or "",
            "type": self.type_name or "",
            "license": self.state or "",
            "vgpu": self.subject,
        }


def license_rows(host: str, snapshot: Snapshot, gpu: Gpu) -> list[LicenseRow]:
    rows = []
    for v in gpu.vgpu_instances:
        lic = v.license
        expiry = lic.expiry_timestamp_seconds or None
        rows.append(
            LicenseRow(
                key=f"{host}/{gpu.uuid}/vgpu/{v.vgpu_id}",
                host=host,
                gpu_index=gpu.index,
                subject=str(v.vgpu_id),
                vm=vm_label(v, _holders(snapshot, "vgpu", gpu.uuid, v.vgpu_id)),
                type_name=v.type_name,
                licensed=lic.licensed,
                state=lic.state,
                expiry_status=lic.expiry_status,
                expiry=expiry,
                expires_in=None if expiry is None else expiry - snapshot.timestamp,
                product=None,
            )
        )
    for f in gpu.guest_licenses:
        expiry = f.expiry_timestamp_seconds or None
        rows.append(
            LicenseRow(
                key=f"{host}/{gpu.uuid}/feature/{f.feature}",
                host=host,
                gpu_index=gpu.index,
                subject=f.feature,
                vm=None,
                type_name=None,
                licensed=f.licensed,
                state=f.state,
                expiry_status=f.expiry_status,
                expiry=expiry,
                expires_in=None if expiry is None else expiry - snapshot.timestamp,
                product=f.product_name,
            )
        )
    return rows


def all_license_rows(host: str, snapshot: Snapshot) -> list[LicenseRow]:
    rows = [r for g in snapshot.gpus for r in license_rows(host, snapshot, g)]
    return sorted(rows, key=lambda r: (r.urgency, r.host, r.gpu_index))


# --------------------------------------------------------------------------- fleet


@dataclass(frozen=True)
class HostRow:
    key: str
    host: str
    state: str  # HostState value: up | connecting | unreachable | closed
    error: str | None
    stale: bool
    gpus: int
    modes: tuple[tuple[str, int], ...]  # (mode, GPU count), sorted
    utilization: float | None  # mean over GPUs that report it
    memory_used: int | None
    memory_total: int | None
    power: float | None
    power_limit: float | None
    vgpus: int
    license_problems: int  # vGPUs unlicensed or expiring
    xid: int  # GPUs with Xid errors
    lost: int  # GPUs down or hung
    badges: tuple[Badge, ...]
    cc: str | None = None  # the GPUs' confidential-computing state, "mixed" when they differ

    @property
    def memory_ratio(self) -> float | None:
        return _ratio(self.memory_used, self.memory_total)

    @property
    def modes_label(self) -> str:
        return " ".join(f"{n}×{MODE_LABELS[m]}" for m, n in self.modes) or "—"

    @property
    def fields(self) -> dict[str, str]:
        return {
            "host": self.host,
            "state": self.state,
            "mode": " ".join(m for m, _ in self.modes),
            "badge": " ".join(x.kind for x in self.badges),
        }


def host_trouble(row: HostRow) -> int:
    """How much a host needs looking at, 0 first: unreachable (or closed), then its worst badge
    (lost GPU, hung, Xid, stale, unlicensed, expiring, starved, idle: :data:`badges.KINDS`), then
    still connecting, then nothing wrong."""
    if row.state in ("unreachable", "closed"):
        return 0
    if row.badges:
        return 1 + min(x.rank for x in row.badges)
    return len(b.KINDS) + (1 if row.state == "connecting" else 2)


def host_order(row: HostRow) -> tuple[int, str]:
    """The fleet's default order: hosts with problems first, worst first, then by name."""
    return host_trouble(row), row.host


def host_row_from_rollup(
    host: str,
    state: str,
    rollup: HostRollup,
    *,
    error: str | None = None,
    stale: bool = False,
) -> HostRow:
    """The host's row from the fleet rules' figures (a metrics store's large fleet): the same
    columns and badges :func:`host_row` gives from the host's snapshot (a test holds the two
    to each other on a real Prometheus)."""
    modes: dict[str, int] = {}
    for mode, count in rollup.modes:
        key = "mig" if mode == "mig" else _VIRT_MODES.get(mode, "unknown")
        modes[key] = modes.get(key, 0) + count
    badges = []
    if rollup.gpus_lost:
        badges.append(b.badge("lost"))
    if rollup.wedged:
        badges.append(b.badge("stale"))
    if rollup.gpus_with_xid and rollup.newest_xid is not None:
        badges.append(b.badge("xid", f"Xid{rollup.newest_xid}"))
    asked = b.recovery(rollup.recovery_actions)
    if asked is not None:
        badges.append(asked)
    if rollup.memory_faults:
        badges.append(b.badge("memory", "mem-fault"))
    for kind, count in (
        ("repair", rollup.repairs_pending),
        ("unlicensed", rollup.licenses_unlicensed),
        ("expiring", rollup.licenses_expiring),
        ("starved", rollup.vgpus_starved),
        ("idle", rollup.idle_holders),
    ):
        if count:
            badges.append(b.badge(kind))
    return HostRow(
        key=host,
        host=host,
        state=state,
        error=error,
        stale=stale,
        gpus=rollup.gpus,
        modes=tuple(sorted(modes.items())),
        utilization=rollup.utilization,
        memory_used=rollup.memory_used_bytes,
        memory_total=rollup.memory_total_bytes,
        power=rollup.power_watts,
        power_limit=rollup.power_limit_watts,
        vgpus=rollup.vgpus,
        license_problems=rollup.vgpu_license_problems,
        xid=rollup.gpus_with_xid,
        lost=rollup.gpus_lost,
        badges=tuple(sorted(badges)),
        cc=None if not rollup.cc else rollup.cc[0] if len(rollup.cc) == 1 else "mixed",
    )


def _sum(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def host_row(
    host: str,
    state: str,
    snapshot: Snapshot | None,
    *,
    error: str | None = None,
    stale: bool = False,
) -> HostRow:
    vgpus_of = (
        {} if snapshot is None else {g.uuid: vgpu_rows(host, snapshot, g) for g in snapshot.gpus}
    )
    gpus = (
        []
        if snapshot is None
        else [gpu_row(host, snapshot, g, vgpus_of[g.uuid]) for g in snapshot.gpus]
    )
    modes: dict[str, int] = {}
    for g in gpus:
        modes[g.mode] = modes.get(g.mode, 0) + 1
    utils = [g.utilization for g in gpus if g.utilization is not None]
    vgpus = [v for rows in vgpus_of.values() for v in rows]
    all_badges = {x.kind: x for g in gpus for x in g.badges}
    # The host's Xid badge names the highest Xid of any of its GPUs (not the last GPU's).
    gpus_read = () if snapshot is None else snapshot.gpus
    newest = max((max(g.xid_errors) for g in gpus_read if g.xid_errors), default=None)
    if newest is not None and "xid" in all_badges:
        all_badges["xid"] = b.badge("xid", f"Xid{newest}")
    # The recovery badge says what the GPUs ask for, not what the last of them asks for.
    asked = b.recovery(
        g.recovery.action
        for g in gpus_read
        if g.up and g.recovery.action_needed and g.recovery.action is not None
    )
    if asked is not None:
        all_badges["recovery"] = asked
    # The sum of the GPU rows' memory in use, as the fleet rule (vgpumon:host_gpu_memory_used_bytes
    # :sum) sums vgpumon_gpu_memory_in_use_bytes: a MIG-backed vGPU host's guests' memory counts.
    mem_used = _sum([g.memory_used for g in gpus])
    mem_total = _sum([g.memory_total for g in gpus])
    ccs = {g.cc for g in gpus if g.cc not in (None, "off")}
    return HostRow(
        key=host,
        host=host,
        state=state,
        error=error,
        stale=stale,
        gpus=len(gpus),
        modes=tuple(sorted(modes.items())),
        utilization=sum(utils) / len(utils) if utils else None,
        memory_used=None if mem_used is None else int(mem_used),
        memory_total=None if mem_total is None else int(mem_total),
        power=_sum([g.power for g in gpus]),
        power_limit=_sum([g.power_limit for g in gpus]),
        vgpus=len(vgpus),
        license_problems=sum(1 for v in vgpus if v.unlicensed or v.expiring),
        xid=sum(1 for g in gpus if g.xid),
        lost=sum(1 for g in gpus if not g.up or g.hung),
        badges=tuple(sorted(all_badges.values())),
        cc=None if not ccs else ccs.pop() if len(ccs) == 1 else "mixed",
    )
