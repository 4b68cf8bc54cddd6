"""vGPU host: which vGPUs run on each GPU, who owns them, how busy they are, and what still fits.

Only GPUs in ``host_vgpu`` mode are asked (the device reader runs first and sets the mode). Every
vGPU host call answers NOT_SUPPORTED anywhere else — bare metal, pass-through, inside a guest,
vSGA (docs/nvml-notes.md §5) — so asking there would only fill the error counters. When the mode
itself is unknown, one probe (``nvmlDeviceGetActiveVgpus``) decides, and its NOT_SUPPORTED is
cached.

Per instance, values that cannot change while the VM runs (UUID, VM id, type, mdev UUID, GPU
instance, placement, frame-rate limit, ECC) are read once and kept until the instance disappears;
the rest is read every cycle. An instance whose getters answer NOT_FOUND was destroyed while being
read and is left out of the snapshot.

Utilization comes from NVML's timestamped sample buffer with a per-GPU ``lastSeenTimeStamp`` cursor;
the cycle's value is the mean of the samples newer than the cursor (see :func:`_merge_utilization`
for what happens when a cycle brings none). ``nvmlDeviceGetVgpuInstancesUtilizationInfo`` (R550+)
is asked first and ``nvmlDeviceGetVgpuUtilization`` once the former is known to be absent; the same
for the per-process variants.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpumon.capacity import vgpu_framebuffer
from vgpumon.collect.base import (
    FunctionReader,
    GpuBuilder,
    GpuContext,
    ReadFailed,
    nvml_id,
    ratio,
)
from vgpumon.collect.vgpu_raw import (
    GONE,
    GUEST_DRIVER_ABSENT,
    as_int,
    newer_then_older,
    nvml_text,
    union_uint,
    vgpu_accounting_pids,
    vgpu_fb_usage,
    vm_id,
)
from vgpumon.model import Gpu, VgpuInstance, VgpuProcess, VgpuType, VgpuUtilization
from vgpumon.nvml.errors import NOT_SUPPORTED

log = logging.getLogger(__name__)

STATE_KEY = "vgpu"
INVALID_PLACEMENT = 0xFFFF  # NVML_INVALID_VGPU_PLACEMENT_ID
NO_GUEST_DRIVER = "Not Available"  # what GetVmDriverVersion says when the guest driver is absent

# A vGPU whose last sample is this much older than the GPU's newest sample has stopped being
# sampled (its VM is paused or wedged): its carried-over utilization is dropped, not kept.
UTIL_STALE_SECONDS = 10.0
# Model field <- NVML sample field (the same names in every vGPU utilization struct).
UTIL_FIELDS = (
    ("sm", "smUtil"),
    ("memory", "memUtil"),
    ("encoder", "encUtil"),
    ("decoder", "decUtil"),
)
# Type capacity (creatable placements, per-GI counts) is re-derived when the set of instances
# changes, and at least this often.
TYPES_REFRESH_SECONDS = 30.0


# --------------------------------------------------------------------------- per-GPU state


@dataclass
class _Static:
    """Instance values that are fixed for the life of the VM; ``None`` fields are asked again."""

    uuid: str | None = None
    vm_id: str | None = None
    vm_id_type: str | None = None
    type_id: int | None = None
    mdev_uuid: str | None = None
    gpu_instance_id: int | None = None
    placement_id: int | None = None
    frame_rate_limit: int | None = None
    ecc_enabled: bool | None = None
    migration_supported: bool | None = None
    asked_once: bool = False  # fields that are legitimately absent are not re-asked forever
    # NVML's migration compatibility with this host's GPU (nvmlGetVgpuCompatibility): asked
    # again only when the guest driver changes (loaded, unloaded, upgraded in the VM).
    compat_driver: str | None = None
    compat_asked: bool = False
    live_migration_compatible: bool | None = None
    migration_limits: tuple[str, ...] | None = None


@dataclass
class _TypeInfo:
    """A type's fixed properties (the model's own fields, asked once per GPU)."""

    fixed: VgpuType
    max_per_gpu_instance: int | None = None  # asked only for MIG-backed capacity
    asked_per_gi: bool = False


@dataclass
class _Util:
    sm: float | None = None
    memory: float | None = None
    encoder: float | None = None
    decoder: float | None = None
    last_us: int = 0  # NVML timestamp of the newest sample that went into these values


@dataclass
class VgpuHostState:
    """What the vGPU reader keeps per GPU between cycles (in ``GpuContext.state``)."""

    util_cursor: int = 0  # lastSeenTimeStamp for the instance utilization buffer (µs)
    proc_cursor: int = 0  # lastSeenTimeStamp for the per-process buffer (µs)
    statics: dict[int, _Static] = field(default_factory=dict)
    util: dict[int, _Util] = field(default_factory=dict)
    processes: tuple[VgpuProcess, ...] = ()
    supported_types: list[int] | None = None
    types: dict[int, _TypeInfo] = field(default_factory=dict)
    types_signature: tuple[Any, ...] | None = None
    types_at: float = 0.0
    types_out: tuple[VgpuType, ...] = ()
    migration_asked: bool = False  # the pGPU migration capability is fixed: asked once
    migration_supported: bool | None = None
    pgpu_metadata: Any = None  # this GPU's side of nvmlGetVgpuCompatibility
    # The list came back empty after listing vGPUs, and the last list was kept for this cycle:
    # one more empty list is believed (every VM really ended), a non-empty one clears it.
    empty_held: bool = False

    def prune(self, active: Iterable[int]) -> None:
        """Forget destroyed instances, so churn never grows this state."""
        keep = set(active)
        for table in (self.statics, self.util):
            for vi in [k for k in table if k not in keep]:
                del table[vi]
        self.processes = tuple(p for p in self.processes if p.vgpu_id in keep)


def host_state(ctx: GpuContext) -> VgpuHostState:
    st = ctx.state.get(STATE_KEY)
    if not isinstance(st, VgpuHostState):
        st = VgpuHostState()
        ctx.state[STATE_KEY] = st
    return st


# --------------------------------------------------------------------------- shared helpers


def is_vgpu_host(ctx: GpuContext, out: GpuBuilder) -> bool:
    """Whether vGPU host calls apply to this GPU (see the module docstring)."""
    mode = out.get("virtualization_mode")
    if mode == "host_vgpu":
        return True
    if mode is not None:
        return False
    return ctx.call("nvmlDeviceGetActiveVgpus", ctx.handle) is not None


def active_vgpus(ctx: GpuContext, out: GpuBuilder) -> list[int] | None:
    """Active instance ids: from this cycle's vGPU reader when it ran, else asked directly."""
    instances = out.get("vgpu_instances")
    if instances:
        return [i.vgpu_id for i in instances]
    if "vgpu_instances" in out.fields:
        return []
    listed = ctx.call("nvmlDeviceGetActiveVgpus", ctx.handle)
    return [v for v in (as_int(x) for x in listed) if v] if listed is not None else None


def gpu_instance_handles(ctx: GpuContext, ids: Iterable[int]) -> dict[int, Any]:
    """GPU-instance handles by id for this cycle (asked fresh: GIs can be destroyed)."""
    handles: dict[int, Any] = {}
    for gi in sorted(set(ids)):
        h = ctx.call("nvmlDeviceGetGpuInstanceById", ctx.handle, gi, no_data=GONE)
        if h is not None:
            handles[gi] = h
    return handles


def mig_gpu_instance_ids(out: GpuBuilder) -> list[int]:
    return [gi.id for gi in (out.get("mig_instances") or ())]


# --------------------------------------------------------------------------- the reader


# Bit 0 of the vGPU / pGPU virtualization capabilities: NVML_VGPU_VIRTUALIZATION_CAP_MIGRATION and
# NVML_VGPU_PGPU_VIRTUALIZATION_CAP_MIGRATION in nvml.h (pynvml has no names for them).
MIGRATION_CAP = 0x1
LIVE_COMPATIBILITY = 0x8  # NVML_VGPU_VM_COMPATIBILITY_LIVE
# NVML_VGPU_COMPATIBILITY_LIMIT_* bits -> the model's names (what stands in the way of a move).
COMPATIBILITY_LIMITS = (
    (0x1, "host_driver"),
    (0x2, "guest_driver"),
    (0x4, "gpu"),
    (0x80000000, "other"),
)


def migration_bit(caps: Any) -> bool | None:
    value = as_int(caps)
    return None if value is None else bool(value & MIGRATION_CAP)


def read_vgpu(ctx: GpuContext, out: GpuBuilder) -> None:
    if not is_vgpu_host(ctx, out):
        return
    h = ctx.handle
    st = host_state(ctx)
    mig = bool(out.get("mig_mode_current"))
    if not mig:
        # NOT_SUPPORTED with MIG on; per-GI heterogeneous mode is a GB20x+ feature.
        hetero = ctx.call("nvmlDeviceGetVgpuHeterogeneousMode", h)
        out.set(vgpu_heterogeneous_mode=bool(hetero) if hetero is not None else None)
    if not st.migration_asked:
        pgpu = ctx.call("nvmlDeviceGetVgpuMetadata", h)
        st.migration_supported = migration_bit(getattr(pgpu, "pgpuVirtualizationCaps", None))
        st.pgpu_metadata = pgpu
        st.migration_asked = pgpu is not None  # a failed call is asked again next cycle
    out.set(vgpu_migration_supported=st.migration_supported)

    got = ctx.attempt("nvmlDeviceGetActiveVgpus", h)
    listed = got.value
    if listed is None:
        if got.status != "error":
            return
        if ctx.previous is not None and ctx.previous.up:
            # A list that failed this cycle is not an empty host: reporting 0 instances would
            # end every VM's series (and page someone) over one failed call. The last list
            # read stands until the call answers again; the failure is in the error counters.
            _keep_previous(ctx.previous, out)
        # Either way the cycle did not read the vGPUs: the collector did not succeed, and
        # whoever judges their licenses (check, alerts) is told so rather than "none".
        raise ReadFailed(f"nvmlDeviceGetActiveVgpus: {got.error}")
    ids = [v for v in (as_int(x) for x in listed) if v]
    if ctx.previous is not None and _empty_after_vgpus(ctx, st, ids, mig):
        _keep_previous(ctx.previous, out)
        return
    gi_of: dict[int, int] = {}
    if mig:
        gi_ids = set(mig_gpu_instance_ids(out)) | {
            s.gpu_instance_id for s in st.statics.values() if s.gpu_instance_id is not None
        }
        for gi, gi_handle in gpu_instance_handles(ctx, gi_ids).items():
            for vi in _gi_active(ctx, gi_handle):
                gi_of[vi] = gi
                if vi not in ids:
                    ids.append(vi)

    instances: list[VgpuInstance] = []
    for vi in ids:
        inst = _read_instance(ctx, st, vi, gi_of.get(vi))
        if inst is not None:
            instances.append(inst)
    alive = [i.vgpu_id for i in instances]
    st.prune(alive)

    utils = _read_utilization(ctx, st, alive)
    instances = [dataclasses.replace(i, utilization=utils[i.vgpu_id]) for i in instances]
    types = _read_types(ctx, out, st, instances)
    out.set(
        vgpu_instances=tuple(instances),
        vgpu_processes=_read_processes(ctx, st, set(alive)),
        vgpu_types=types,
    )
    if not mig:  # with MIG on, time-sliced types cannot be created: capacity is MIG's
        free, stranded = vgpu_framebuffer(types, instances)
        out.set(vgpu_framebuffer_free_bytes=free, vgpu_framebuffer_stranded_bytes=stranded)


def _empty_after_vgpus(ctx: GpuContext, st: VgpuHostState, ids: list[int], mig: bool) -> bool:
    """Whether to keep the last vGPU list for this cycle: the list came back empty (without
    MIG's per-instance lists) on a GPU that listed vGPUs a cycle ago, for the first time.

    Every vGPU ending between two cycles happens (a host's VMs shut down together), but so does
    one empty answer in the middle of a busy host; taken at its word it ends every VM's series
    and restarts every metering and scheduler counter. So one empty list is held for a cycle,
    and said; a second is believed, and said too. Either way a log line tells what happened.
    """
    prev = ctx.previous
    if ids or mig or prev is None or not prev.up or not prev.vgpu_instances:
        st.empty_held = False
        return False
    count = len(prev.vgpu_instances)
    if st.empty_held:
        st.empty_held = False
        log.warning(
            "GPU %s: NVML lists no vGPU instance for the second cycle: all %d ended",
            ctx.index,
            count,
        )
        return False
    st.empty_held = True
    log.warning(
        "GPU %s: NVML listed no vGPU instance after %d; keeping the last list for one cycle",
        ctx.index,
        count,
    )
    return True


def _keep_previous(prev: Gpu, out: GpuBuilder) -> None:
    out.set(
        vgpu_instances=prev.vgpu_instances,
        vgpu_processes=prev.vgpu_processes,
        vgpu_types=prev.vgpu_types,
        vgpu_framebuffer_free_bytes=prev.vgpu_framebuffer_free_bytes,
        vgpu_framebuffer_stranded_bytes=prev.vgpu_framebuffer_stranded_bytes,
    )


def _gi_active(ctx: GpuContext, gi_handle: Any) -> list[int]:
    """vGPUs of one GPU instance (R575+ ``nvmlGpuInstanceGetActiveVgpus``)."""
    cls = ctx.module_attr("c_nvmlActiveVgpuInstanceInfo_v1_t")
    if cls is None:
        return []
    info = cls()
    info.version = ctx.module_attr("nvmlActiveVgpuInstanceInfo_v1", 0x01000010)
    res = ctx.call("nvmlGpuInstanceGetActiveVgpus", gi_handle, info, key="gpu_instance")
    if res is None:
        return []
    count = as_int(getattr(res, "vgpuCount", 0)) or 0
    arr = getattr(res, "vgpuInstances", None)
    if not count or not arr:
        return []
    return [v for v in (as_int(arr[i]) for i in range(count)) if v]


def _read_static(ctx: GpuContext, s: _Static, vi: int, gi_hint: int | None) -> None:
    """Fill the instance's fixed values: everything once, the identity again while unknown."""
    call = ctx.session.call
    gpu = ctx.uuid
    if s.type_id is None:
        s.type_id = as_int(call(gpu, "nvmlVgpuInstanceGetType", vi, no_data=GONE))
    if s.uuid is None:
        s.uuid = nvml_text(call(gpu, "nvmlVgpuInstanceGetUUID", vi, no_data=GONE))
    if s.vm_id is None:
        s.vm_id, s.vm_id_type = vm_id(call(gpu, "nvmlVgpuInstanceGetVmID", vi, no_data=GONE))
    if gi_hint is not None:
        s.gpu_instance_id = gi_hint
    if s.asked_once:
        return
    # NOT_SUPPORTED on non-KVM hypervisors: a property of the host, cached once per GPU.
    s.mdev_uuid = nvml_text(call(gpu, "nvmlVgpuInstanceGetMdevUUID", vi, no_data=GONE))
    if gi_hint is None:
        gi = as_int(call(gpu, "nvmlVgpuInstanceGetGpuInstanceId", vi, no_data=GONE))
        s.gpu_instance_id = nvml_id(gi)
    placement = as_int(call(gpu, "nvmlVgpuInstanceGetPlacementId", vi, no_data=GONE))
    s.placement_id = placement if placement not in (None, INVALID_PLACEMENT) else None
    # NOT_SUPPORTED here is a per-instance answer (limiter off, no ECC for this vGPU): a normal
    # "no value", neither cached for the whole GPU nor counted as an error.
    frl = as_int(call(gpu, "nvmlVgpuInstanceGetFrameRateLimit", vi, no_data=(NOT_SUPPORTED, *GONE)))
    s.frame_rate_limit = frl if frl else None
    ecc = as_int(call(gpu, "nvmlVgpuInstanceGetEccMode", vi, no_data=(NOT_SUPPORTED, *GONE)))
    s.ecc_enabled = bool(ecc) if ecc is not None else None
    meta = call(gpu, "nvmlVgpuInstanceGetMetadata", vi, no_data=GONE)
    s.migration_supported = migration_bit(getattr(meta, "vgpuVirtualizationCaps", None))
    s.asked_once = True


def _read_instance(
    ctx: GpuContext, st: VgpuHostState, vi: int, gi_hint: int | None
) -> VgpuInstance | None:
    s = st.statics.get(vi)
    if s is None:
        s = st.statics[vi] = _Static()
    _read_static(ctx, s, vi, gi_hint)
    if s.type_id is None and s.uuid is None:
        # Neither its type nor its UUID: the instance was destroyed after the list was taken
        # (NOT_FOUND), or cannot be read this cycle. It is retried next cycle if still listed.
        return None
    call = ctx.session.call
    gpu = ctx.uuid
    driver = nvml_text(
        call(gpu, "nvmlVgpuInstanceGetVmDriverVersion", vi, no_data=(*GONE, GUEST_DRIVER_ABSENT))
    )
    accounting = as_int(
        call(gpu, "nvmlVgpuInstanceGetAccountingMode", vi, no_data=(*GONE, GUEST_DRIVER_ABSENT))
    )
    capacity = as_int(call(gpu, "nvmlVgpuInstanceGetEncoderCapacity", vi, no_data=GONE))
    enc_count, enc_fps, enc_latency = _encoder_stats(ctx, vi)
    fbc_count, fbc_fps, fbc_latency = _fbc_stats(ctx, vi)
    type_info = _type_info(ctx, st, s.type_id).fixed if s.type_id is not None else None
    pids = vgpu_accounting_pids(ctx.session, gpu, vi) if accounting else None
    _read_compatibility(ctx, st, s, vi, driver)
    return VgpuInstance(
        vgpu_id=vi,
        uuid=s.uuid,
        vm_id=s.vm_id,
        vm_id_type=s.vm_id_type,
        type_id=s.type_id,
        type_name=type_info.name if type_info else None,
        type_class=type_info.type_class if type_info else None,
        mdev_uuid=s.mdev_uuid,
        guest_driver_version=driver if driver != NO_GUEST_DRIVER else None,
        gpu_instance_id=s.gpu_instance_id,
        placement_id=s.placement_id,
        framebuffer_total_bytes=type_info.framebuffer_bytes if type_info else None,
        framebuffer_used_bytes=vgpu_fb_usage(ctx.session, gpu, vi),
        frame_rate_limit=s.frame_rate_limit,
        ecc_enabled=s.ecc_enabled,
        migration_supported=s.migration_supported,
        live_migration_compatible=s.live_migration_compatible,
        migration_limits=s.migration_limits,
        accounting_enabled=bool(accounting) if accounting is not None else None,
        encoder_capacity=ratio(capacity),
        encoder_sessions=enc_count,
        encoder_average_fps=enc_fps,
        encoder_average_latency_seconds=enc_latency,
        fbc_sessions=fbc_count,
        fbc_average_fps=fbc_fps,
        fbc_average_latency_seconds=fbc_latency,
        accounting_pids=tuple(pids) if pids is not None else None,
    )


def _read_compatibility(
    ctx: GpuContext, st: VgpuHostState, s: _Static, vi: int, driver: str | None
) -> None:
    """NVML's answer to "can this VM move to a GPU like this one, and how" (live, cold, ...).

    Asked with the instance's metadata against this GPU's, so it says what this host's side of
    a migration allows; asked again when the guest driver changes, since the answer depends on it.
    """
    if st.pgpu_metadata is None or (s.compat_asked and s.compat_driver == driver):
        return
    call = ctx.session.call
    meta = call(ctx.uuid, "nvmlVgpuInstanceGetMetadata", vi, no_data=GONE)
    if meta is None:
        return
    res = call(ctx.uuid, "nvmlGetVgpuCompatibility", meta, st.pgpu_metadata)
    s.compat_asked, s.compat_driver = True, driver
    if res is None:
        s.live_migration_compatible, s.migration_limits = None, None
        return
    compat = as_int(getattr(res, "vgpuVmCompatibility", None))
    limit = as_int(getattr(res, "compatibilityLimitCode", None))
    s.live_migration_compatible = bool(compat & LIVE_COMPATIBILITY) if compat is not None else None
    s.migration_limits = (
        tuple(name for bit, name in COMPATIBILITY_LIMITS if limit & bit)
        if limit is not None
        else None
    )


def _seconds_from_us(value: Any) -> float | None:
    v = as_int(value)
    return v / 1e6 if v is not None else None


def _encoder_stats(ctx: GpuContext, vi: int) -> tuple[int | None, float | None, float | None]:
    stats = ctx.session.call(ctx.uuid, "nvmlVgpuInstanceGetEncoderStats", vi, no_data=GONE)
    if isinstance(stats, (tuple, list)) and len(stats) == 3:
        count, fps, latency_us = stats
        n = as_int(count)
        return n, float(fps) if n else None, _seconds_from_us(latency_us) if n else None
    sessions = ctx.session.call(ctx.uuid, "nvmlVgpuInstanceGetEncoderSessions", vi, no_data=GONE)
    if isinstance(sessions, list):
        return len(sessions), None, None
    return None, None, None


def _fbc_stats(ctx: GpuContext, vi: int) -> tuple[int | None, float | None, float | None]:
    stats = ctx.session.call(ctx.uuid, "nvmlVgpuInstanceGetFBCStats", vi, no_data=GONE)
    if stats is not None:
        n = as_int(getattr(stats, "sessionsCount", None))
        fps = as_int(getattr(stats, "averageFPS", None))
        latency = getattr(stats, "averageLatency", None)
        return (
            n,
            float(fps) if n and fps is not None else None,
            _seconds_from_us(latency) if n else None,
        )
    sessions = ctx.session.call(ctx.uuid, "nvmlVgpuInstanceGetFBCSessions", vi, no_data=GONE)
    if isinstance(sessions, list):
        return len(sessions), None, None
    return None, None, None


# --------------------------------------------------------------------------- types and capacity


def _type_info(ctx: GpuContext, st: VgpuHostState, type_id: int) -> _TypeInfo:
    """A type's fixed properties, asked once per GPU (unknown ids answer INVALID_ARGUMENT)."""
    info = st.types.get(type_id)
    if info is not None:
        return info
    call = ctx.session.call
    gpu = ctx.uuid
    name = nvml_text(call(gpu, "nvmlVgpuTypeGetName", type_id))
    type_class = nvml_text(call(gpu, "nvmlVgpuTypeGetClass", type_id))
    framebuffer = as_int(call(gpu, "nvmlVgpuTypeGetFramebufferSize", type_id))
    max_instances = as_int(call(gpu, "nvmlVgpuTypeGetMaxInstances", ctx.handle, type_id))
    max_per_vm = as_int(call(gpu, "nvmlVgpuTypeGetMaxInstancesPerVm", type_id))
    profile = as_int(call(gpu, "nvmlVgpuTypeGetGpuInstanceProfileId", type_id))
    info = st.types[type_id] = _TypeInfo(
        VgpuType(
            type_id=type_id,
            name=name,
            type_class=type_class,
            framebuffer_bytes=framebuffer,
            max_instances=max_instances,
            max_instances_per_vm=max_per_vm,
            gpu_instance_profile_id=nvml_id(profile),
        )
    )
    return info


def _read_types(
    ctx: GpuContext, out: GpuBuilder, st: VgpuHostState, instances: Sequence[VgpuInstance]
) -> tuple[VgpuType, ...]:
    """Supported types with how many more of each fit now (capacity planning)."""
    h = ctx.handle
    if st.supported_types is None:
        listed = ctx.call("nvmlDeviceGetSupportedVgpus", h)
        if listed is None:
            return ()
        st.supported_types = [t for t in (as_int(x) for x in listed) if t is not None]
    listed = ctx.call("nvmlDeviceGetCreatableVgpus", h)
    creatable = {t for t in (as_int(x) for x in listed or ()) if t is not None}
    active_by_type: dict[int, int] = defaultdict(int)
    for inst in instances:
        if inst.type_id is not None:
            active_by_type[inst.type_id] += 1
    sliced = sum(1 for inst in instances if inst.gpu_instance_id is None)
    mig_gis = tuple((gi.id, gi.profile_id) for gi in (out.get("mig_instances") or ()))
    signature = (
        tuple(sorted((i.vgpu_id, i.type_id, i.gpu_instance_id) for i in instances)),
        tuple(sorted(creatable)),
        mig_gis,
        out.get("vgpu_heterogeneous_mode"),
    )
    if st.types_signature == signature and ctx.now - st.types_at < TYPES_REFRESH_SECONDS:
        return st.types_out
    hetero = bool(out.get("vgpu_heterogeneous_mode"))
    types: list[VgpuType] = []
    for type_id in st.supported_types:
        info = _type_info(ctx, st, type_id)
        fixed = info.fixed
        is_creatable = type_id in creatable
        active = active_by_type.get(type_id, 0)
        if not is_creatable:
            fits: int | None = 0
        elif fixed.gpu_instance_profile_id is not None:
            fits = _fits_mig_backed(ctx, info, type_id, mig_gis, instances)
        elif hetero:
            fits = _fits_placements(ctx, type_id)
            if fits is not None and fixed.max_instances is not None:
                # Free placements past the type's own limit are not more instances.
                fits = min(fits, max(0, fixed.max_instances - active))
        elif fixed.max_instances is not None:
            # Homogeneous (one vGPU size per GPU): the GPU is max_instances equal slots, and every
            # active time-sliced vGPU, of this type or another type of the same size, holds one.
            fits = max(0, fixed.max_instances - sliced)
        else:
            fits = None
        types.append(
            dataclasses.replace(
                fixed, creatable=is_creatable, active_instances=active, creatable_instances=fits
            )
        )
    st.types_signature = signature
    st.types_at = ctx.now
    st.types_out = tuple(types)
    return st.types_out


def _fits_placements(ctx: GpuContext, type_id: int) -> int | None:
    """Heterogeneous mode: the most non-overlapping vGPUs among the creatable placements."""
    res = ctx.call("nvmlDeviceGetVgpuTypeCreatablePlacements", ctx.handle, type_id)
    if res is None:
        return None
    size = as_int(getattr(res, "placementSize", None)) or 1
    count = as_int(getattr(res, "count", None)) or 0
    ids_ptr = getattr(res, "placementIds", None)
    if not count or not ids_ptr:
        return 0
    starts = sorted(v for v in (as_int(ids_ptr[i]) for i in range(count)) if v is not None)
    # Equal-length intervals: taking the earliest start that does not overlap is optimal.
    fits, free_from = 0, -1
    for start in starts:
        if start >= free_from:
            fits += 1
            free_from = start + size
    return fits


def _fits_mig_backed(
    ctx: GpuContext,
    info: _TypeInfo,
    type_id: int,
    mig_gis: tuple[tuple[int, int | None], ...],
    instances: Sequence[VgpuInstance],
) -> int | None:
    """MIG-backed: free room in the existing GPU instances of the type's profile.

    A MIG-backed vGPU lives in a GPU instance created beforehand; each GI of the right profile
    holds up to ``nvmlVgpuTypeGetMaxInstancesPerGpuInstance`` vGPUs of the type (1 before GB20x
    time-sliced MIG, and where the call is absent).
    """
    if not mig_gis:
        return None
    if not info.asked_per_gi:
        per_gi = as_int(ctx.call("nvmlVgpuTypeGetMaxInstancesPerGpuInstance", type_id))
        info.max_per_gpu_instance = per_gi if per_gi else None
        info.asked_per_gi = True
    per_gi = info.max_per_gpu_instance or 1
    used: dict[int, int] = defaultdict(int)
    for inst in instances:
        if inst.gpu_instance_id is not None:
            used[inst.gpu_instance_id] += 1
    fits = 0
    for gi_id, profile in mig_gis:
        if profile == info.fixed.gpu_instance_profile_id:
            fits += max(0, per_gi - used.get(gi_id, 0))
    return fits


# --------------------------------------------------------------------------- utilization


def _samples(ctx: GpuContext, newer: str, older: str, cursor: int) -> list[Any] | None:
    """Samples newer than ``cursor`` from the newer call, or the older one where it is absent.

    None means "no new samples" (NOT_FOUND, or the call failed); ``[]`` means no vGPU.
    """
    got, _ = newer_then_older(
        ctx.session,
        ctx.uuid,
        newer,
        older,
        (ctx.handle, cursor),
        (ctx.handle, cursor),
        no_data=GONE,
    )
    return list(got) if got is not None else None


def _mean(values: list[int]) -> float | None:
    return ratio(sum(values) / len(values)) if values else None


def _read_utilization(
    ctx: GpuContext, st: VgpuHostState, alive: Sequence[int]
) -> dict[int, VgpuUtilization]:
    samples = _samples(
        ctx,
        "nvmlDeviceGetVgpuInstancesUtilizationInfo",
        "nvmlDeviceGetVgpuUtilization",
        st.util_cursor,
    )
    fresh: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    newest: dict[int, int] = {}
    for s in samples or ():
        ts = as_int(getattr(s, "timeStamp", None))
        vi = as_int(getattr(s, "vgpuInstance", None))
        if ts is None or vi is None or ts <= st.util_cursor:
            continue
        for name, attr in UTIL_FIELDS:
            v = union_uint(getattr(s, attr, None))
            if v is not None:
                fresh[vi][name].append(v)
        newest[vi] = max(newest.get(vi, 0), ts)
    if newest:
        st.util_cursor = max(st.util_cursor, *newest.values())
    return {vi: _merge_utilization(st, vi, fresh.get(vi), newest.get(vi)) for vi in alive}


def _merge_utilization(
    st: VgpuHostState, vi: int, fresh: dict[str, list[int]] | None, newest: int | None
) -> VgpuUtilization:
    """This cycle's mean, or the last one carried over when the cycle brought no sample.

    NVML samples each active vGPU on its own period, which can be longer than a short cycle, so a
    cycle without a new sample keeps the previous mean (``samples == 0`` marks it as carried). It is
    dropped once the GPU's newest sample is :data:`UTIL_STALE_SECONDS` ahead of this vGPU's: other
    vGPUs are being sampled and this one is not. A vGPU that never had a sample has no value.
    """
    if fresh and newest is not None:
        u = _Util(
            sm=_mean(fresh.get("sm", [])),
            memory=_mean(fresh.get("memory", [])),
            encoder=_mean(fresh.get("encoder", [])),
            decoder=_mean(fresh.get("decoder", [])),
            last_us=newest,
        )
        st.util[vi] = u
        count = max((len(v) for v in fresh.values()), default=0)
        return VgpuUtilization(u.sm, u.memory, u.encoder, u.decoder, samples=count)
    prev = st.util.get(vi)
    if prev is None:
        return VgpuUtilization()
    if st.util_cursor - prev.last_us > UTIL_STALE_SECONDS * 1e6:
        del st.util[vi]
        return VgpuUtilization()
    return VgpuUtilization(prev.sm, prev.memory, prev.encoder, prev.decoder, samples=0)


def _read_processes(ctx: GpuContext, st: VgpuHostState, alive: set[int]) -> tuple[VgpuProcess, ...]:
    """Guest processes with GPU use in this cycle's samples (NVML lists only non-idle ones).

    A cycle that brings no new process sample at all keeps the previous list: the cycle was shorter
    than NVML's sampling period, not a sign that the processes stopped.
    """
    samples = _samples(
        ctx,
        "nvmlDeviceGetVgpuProcessesUtilizationInfo",
        "nvmlDeviceGetVgpuProcessUtilization",
        st.proc_cursor,
    )
    if not samples:
        st.processes = tuple(p for p in st.processes if p.vgpu_id in alive)
        return st.processes
    acc: dict[tuple[int, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    names: dict[tuple[int, int], str | None] = {}
    newest = st.proc_cursor
    for s in samples:
        ts = as_int(getattr(s, "timeStamp", None))
        vi = as_int(getattr(s, "vgpuInstance", None))
        pid = as_int(getattr(s, "pid", None))
        if ts is None or vi is None or pid is None or ts <= st.proc_cursor or vi not in alive:
            if ts is not None:
                newest = max(newest, ts)
            continue
        newest = max(newest, ts)
        key = (vi, pid)
        names[key] = nvml_text(getattr(s, "processName", None))
        for name, attr in UTIL_FIELDS:
            v = union_uint(getattr(s, attr, None))
            if v is not None:
                acc[key][name].append(v)
    st.proc_cursor = newest
    st.processes = tuple(
        VgpuProcess(
            vgpu_id=vi,
            pid=pid,
            name=names.get((vi, pid)),
            sm_utilization=_mean(vals.get("sm", [])),
            memory_utilization=_mean(vals.get("memory", [])),
            encoder_utilization=_mean(vals.get("encoder", [])),
            decoder_utilization=_mean(vals.get("decoder", [])),
        )
        for (vi, pid), vals in sorted(acc.items())
    )
    return st.processes


READERS = [FunctionReader("vgpu", read_vgpu)]
