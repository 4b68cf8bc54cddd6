"""MIG layout: GPU instances, their compute instances (MIG devices) and per-instance memory.

Enumeration follows the unprivileged path first (docs/nvml-notes.md §8.1): MIG device handles by
index (with holes: NOT_FOUND at an index is normal), and per handle its UUID, name, GPU/compute
instance ids, attributes and memory. The GI/CI tree APIs add profile ids and placements but need
root, so they are only tried when the layout changes, and their absence (NO_PERMISSION) is cached by
the session like any unsupported call.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, nvml_id, nvml_int
from vgpumon.collect.memory import read_memory_info
from vgpumon.model import MigComputeInstance, MigGpuInstance, MigProfileCapacity
from vgpumon.nvml.errors import INVALID_ARGUMENT, NOT_FOUND, NOT_SUPPORTED

STATE_KEY = "mig"
MIB = 1024 * 1024
# Profile indexes a GPU lacks (3) or its driver does not know (2), met while enumerating them all.
ENUMERATION_MISSES = (INVALID_ARGUMENT, NOT_SUPPORTED)
GI_PROFILE_COUNT = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT in pynvml 13.615
CI_PROFILE_COUNT = 9  # NVML_COMPUTE_INSTANCE_PROFILE_COUNT
CI_ENGINE_PROFILE_SHARED = 0
PROFILE_INFO = "nvmlDeviceGetGpuInstanceProfileInfo"
CAPACITY_SECONDS = 30.0


@dataclass(frozen=True)
class MigDevice:
    """One MIG device handle of this cycle, for the readers that run after this one."""

    handle: Any
    index: int
    uuid: str | None
    gpu_instance_id: int
    compute_instance_id: int | None


@dataclass(frozen=True)
class _Static:
    name: str | None
    sm_count: int | None
    memory_size_bytes: int | None


@dataclass
class _Placement:
    profile_id: int | None = None
    profile_name: str | None = None
    start: int | None = None
    size: int | None = None


@dataclass
class _Tree:
    """What the privileged GI/CI APIs said for one layout."""

    gpu_instances: dict[int, _Placement] = field(default_factory=dict)
    compute_instances: dict[tuple[int, int], _Placement] = field(default_factory=dict)
    # Every GPU instance profile the GPU offers, by profile id (capacity is asked per profile).
    profiles: dict[int, MigProfileCapacity] = field(default_factory=dict)


@dataclass
class MigState:
    devices: list[MigDevice] = field(default_factory=list)
    static: dict[str, _Static] = field(default_factory=dict)  # by MIG UUID
    layout: tuple[tuple[int, int | None, str | None], ...] | None = None
    tree: _Tree = field(default_factory=_Tree)
    capacity: tuple[MigProfileCapacity, ...] = ()
    capacity_at: float | None = None


def mig_devices(ctx: GpuContext) -> list[MigDevice]:
    """The MIG devices the MIG reader found this cycle (empty when MIG is off or not read)."""
    state = ctx.state.get(STATE_KEY)
    return list(state.devices) if isinstance(state, MigState) else []


def profile_name_from_device_name(name: str | None) -> str | None:
    """'NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb' -> '3g.40gb' (the GPU instance's profile)."""
    if not name or "MIG " not in name:
        return None
    profile = name.rsplit("MIG ", 1)[1].strip()
    parts = profile.split(".")
    if len(parts) == 3 and parts[0].endswith("c"):
        profile = ".".join(parts[1:])
    return profile or None


def _strip_mig(name: Any) -> str | None:
    if not isinstance(name, str) or not name:
        return None
    return name[4:] if name.startswith("MIG ") else name


def _static(ctx: GpuContext, state: MigState, uuid: str | None, handle: Any) -> _Static:
    if uuid is not None and uuid in state.static:
        return state.static[uuid]
    attrs = ctx.call("nvmlDeviceGetAttributes", handle, key="mig")
    memory_mb = nvml_int(getattr(attrs, "memorySizeMB", None)) if attrs is not None else None
    info = _Static(
        name=ctx.call("nvmlDeviceGetName", handle, key="mig"),
        sm_count=nvml_int(getattr(attrs, "multiprocessorCount", None))
        if attrs is not None
        else None,
        memory_size_bytes=memory_mb * MIB if memory_mb is not None else None,
    )
    if uuid is not None:
        state.static[uuid] = info
    return info


def _enumerate(ctx: GpuContext) -> list[MigDevice]:
    h = ctx.handle
    count = nvml_int(ctx.call("nvmlDeviceGetMaxMigDeviceCount", h)) or 0
    devices: list[MigDevice] = []
    for index in range(count):
        mh = ctx.call("nvmlDeviceGetMigDeviceHandleByIndex", h, index, no_data=(NOT_FOUND,))
        if mh is None:
            continue  # a hole in the index space
        gi = nvml_id(ctx.call("nvmlDeviceGetGpuInstanceId", mh, key="mig"))
        if gi is None:
            continue
        devices.append(
            MigDevice(
                handle=mh,
                index=index,
                uuid=ctx.call("nvmlDeviceGetUUID", mh, key="mig"),
                gpu_instance_id=gi,
                compute_instance_id=nvml_id(
                    ctx.call("nvmlDeviceGetComputeInstanceId", mh, key="mig")
                ),
            )
        )
    return devices


def _handles(
    ctx: GpuContext, function: str, owner: Any, profile_id: int, capacity: int, array_type: Any
) -> list[Any] | None:
    """The caller-allocated-array pattern of GetGpuInstances / GetComputeInstances.

    See docs/nvml-notes.md §1.6.
    """
    handles = (array_type * max(1, capacity))()
    count = ctypes.c_uint(0)
    if ctx.call(function, owner, profile_id, handles, ctypes.byref(count), key="tree") is None:
        return None
    return [handles[i] for i in range(min(count.value, len(handles)))]


def _read_tree(ctx: GpuContext) -> _Tree:
    tree = _Tree()
    gi_type = ctx.module_attr("c_nvmlGpuInstance_t")
    ci_type = ctx.module_attr("c_nvmlComputeInstance_t")
    if gi_type is None or ci_type is None:
        return tree
    h = ctx.handle
    gi_count = int(ctx.module_attr("NVML_GPU_INSTANCE_PROFILE_COUNT", GI_PROFILE_COUNT))
    ci_count = int(ctx.module_attr("NVML_COMPUTE_INSTANCE_PROFILE_COUNT", CI_PROFILE_COUNT))
    for index in range(gi_count):
        # 3: not on this GPU; 2: an index this driver does not know. Both are normal answers
        # while enumerating, not errors to count.
        got = ctx.attempt(
            PROFILE_INFO,
            h,
            index,
            key=("profile", index),
            no_data=ENUMERATION_MISSES,
        )
        profile = got.value
        if profile is None:
            if got.status == "absent":
                # No privilege, or no such function: every index would answer the same.
                return tree
            continue
        profile_id = nvml_int(getattr(profile, "id", None))
        if profile_id is None:
            continue
        memory_mb = nvml_int(getattr(profile, "memorySizeMB", None))
        tree.profiles[profile_id] = MigProfileCapacity(
            profile_id=profile_id,
            name=_strip_mig(getattr(profile, "name", None)),
            slices=nvml_int(getattr(profile, "sliceCount", None)),
            memory_bytes=memory_mb * MIB if memory_mb is not None else None,
            max_instances=nvml_int(getattr(profile, "instanceCount", None)),
        )
        gis = _handles(
            ctx,
            "nvmlDeviceGetGpuInstances",
            h,
            profile_id,
            nvml_int(getattr(profile, "instanceCount", None)) or 8,
            gi_type,
        )
        if gis is None:
            if ctx.session.is_absent(ctx.uuid, "nvmlDeviceGetGpuInstances", "tree"):
                return tree  # no privilege: the rest of the tree is out of reach too
            continue
        for gi in gis:
            info = ctx.call("nvmlGpuInstanceGetInfo", gi, key="tree")
            gi_id = nvml_id(getattr(info, "id", None)) if info is not None else None
            if gi_id is None:
                continue
            placement = getattr(info, "placement", None)
            tree.gpu_instances[gi_id] = _Placement(
                profile_id=nvml_int(getattr(info, "profileId", None)) or profile_id,
                profile_name=_strip_mig(getattr(profile, "name", None)),
                start=nvml_int(getattr(placement, "start", None)),
                size=nvml_int(getattr(placement, "size", None)),
            )
            _read_compute_instances(ctx, tree, gi, gi_id, profile_id, ci_count, ci_type)
    return tree


def _read_compute_instances(
    ctx: GpuContext, tree: _Tree, gi: Any, gi_id: int, gi_profile: int, ci_count: int, ci_type: Any
) -> None:
    for index in range(ci_count):
        profile = ctx.call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo",
            gi,
            index,
            CI_ENGINE_PROFILE_SHARED,
            key=("profile", gi_profile, index),
            no_data=ENUMERATION_MISSES,
        )
        profile_id = nvml_int(getattr(profile, "id", None)) if profile is not None else None
        if profile_id is None:
            continue
        cis = _handles(
            ctx,
            "nvmlGpuInstanceGetComputeInstances",
            gi,
            profile_id,
            nvml_int(getattr(profile, "instanceCount", None)) or 8,
            ci_type,
        )
        for ci in cis or ():
            info = ctx.call("nvmlComputeInstanceGetInfo", ci, key="tree")
            ci_id = nvml_id(getattr(info, "id", None)) if info is not None else None
            if ci_id is None:
                continue
            placement = getattr(info, "placement", None)
            tree.compute_instances[(gi_id, ci_id)] = _Placement(
                profile_id=nvml_int(getattr(info, "profileId", None)) or profile_id,
                profile_name=_strip_mig(getattr(profile, "name", None)),
                start=nvml_int(getattr(placement, "start", None)),
                size=nvml_int(getattr(placement, "size", None)),
            )


def _read_capacity(ctx: GpuContext, tree: _Tree) -> tuple[MigProfileCapacity, ...]:
    """Each profile with NVML's remaining capacity for it in the current layout."""
    out = []
    for profile_id, profile in sorted(tree.profiles.items()):
        left = ctx.call("nvmlDeviceGetGpuInstanceRemainingCapacity", ctx.handle, profile_id)
        out.append(
            dataclasses.replace(profile, creatable_instances=nvml_int(left))
            if left is not None
            else profile
        )
    return tuple(out)


def _free_slices(
    profiles: tuple[MigProfileCapacity, ...], instances: list[MigGpuInstance]
) -> int | None:
    """Compute slices no GPU instance holds: the whole-GPU profile's slices less the GIs'."""
    slices = {p.profile_id: p.slices for p in profiles}
    whole = max((s for s in slices.values() if s is not None), default=None)
    if whole is None:
        return None
    used = 0
    for gi in instances:
        taken = slices.get(gi.profile_id) if gi.profile_id is not None else None
        if taken is None:
            return None  # a GI of unknown size: the count would be a guess
        used += taken
    return max(0, whole - used)


def read_mig(ctx: GpuContext, out: GpuBuilder) -> None:
    state = ctx.state.get(STATE_KEY)
    if not isinstance(state, MigState):
        state = ctx.state[STATE_KEY] = MigState()
    if not out.get("mig_mode_current"):
        state.devices = []
        return
    devices = _enumerate(ctx)
    state.devices = devices
    layout = tuple(sorted((d.gpu_instance_id, d.compute_instance_id, d.uuid) for d in devices))
    if layout != state.layout:
        state.layout = layout
        state.tree = _read_tree(ctx)
        live = {d.uuid for d in devices}
        state.static = {u: s for u, s in state.static.items() if u in live}
        state.capacity_at = None
    # Remaining capacity changes with the layout, and with GPU instances that have no compute
    # instance yet (invisible to the layout above): asked again at least every CAPACITY_SECONDS.
    if state.capacity_at is None or ctx.now - state.capacity_at >= CAPACITY_SECONDS:
        state.capacity = _read_capacity(ctx, state.tree)
        state.capacity_at = ctx.now

    by_gi: dict[int, list[tuple[MigDevice, _Static]]] = {}
    for device in devices:
        by_gi.setdefault(device.gpu_instance_id, []).append(
            (device, _static(ctx, state, device.uuid, device.handle))
        )
    gi_ids = sorted(set(by_gi) | set(state.tree.gpu_instances))
    instances: list[MigGpuInstance] = []
    for gi_id in gi_ids:
        members = sorted(by_gi.get(gi_id, []), key=lambda m: m[0].compute_instance_id or 0)
        placement = state.tree.gpu_instances.get(gi_id, _Placement())
        # Compute instances of one GI share its memory: any member's handle reports the GI's.
        memory = read_memory_info(ctx, members[0][0].handle, scope="mig") if members else None
        total = memory.total_bytes if memory is not None else None
        if total is None and members:
            total = members[0][1].memory_size_bytes
        profile_name = placement.profile_name
        if profile_name is None and members:
            profile_name = profile_name_from_device_name(members[0][1].name)
        cis: list[MigComputeInstance] = []
        for device, static in members:
            ci_id = device.compute_instance_id
            ci_place = (
                state.tree.compute_instances.get((gi_id, ci_id), _Placement())
                if ci_id is not None
                else _Placement()
            )
            cis.append(
                MigComputeInstance(
                    id=ci_id if ci_id is not None else 0,
                    mig_uuid=device.uuid,
                    mig_index=device.index,
                    name=static.name,
                    profile_id=ci_place.profile_id,
                    placement_start=ci_place.start,
                    placement_size=ci_place.size,
                    sm_count=static.sm_count,
                )
            )
        # Compute instances the tree knows but the handle enumeration did not give (rare: a CI
        # being created or destroyed between the two); GIs without any CI are kept too (gi_ids).
        for (tree_gi, ci_id), ci_place in sorted(state.tree.compute_instances.items()):
            if tree_gi == gi_id and all(c.id != ci_id for c in cis):
                cis.append(
                    MigComputeInstance(
                        id=ci_id,
                        profile_id=ci_place.profile_id,
                        placement_start=ci_place.start,
                        placement_size=ci_place.size,
                    )
                )
        instances.append(
            MigGpuInstance(
                id=gi_id,
                profile_id=placement.profile_id,
                profile_name=profile_name,
                placement_start=placement.start,
                placement_size=placement.size,
                memory_total_bytes=total,
                memory_used_bytes=memory.used_bytes if memory is not None else None,
                compute_instances=tuple(sorted(cis, key=lambda c: c.id)),
            )
        )
    out.set(
        mig_instances=tuple(instances),
        mig_profiles=state.capacity,
        mig_free_slices=_free_slices(state.capacity, instances),
    )


READERS = [FunctionReader("mig", read_mig)]
