"""vGPU capacity the newer drivers tell exactly: per-GPU-instance room and per-type reservations.

* **Per GPU instance** (MIG-backed time-sliced vGPUs, Blackwell GB20x, R575+): the vGPU types a
  GPU instance can host now (``nvmlGpuInstanceGetCreatableVgpus``), how many more of each fit in
  it (``nvmlGpuInstanceGetVgpuTypeCreatablePlacements``: the free placements, counted without
  overlap) and whether it mixes sizes (``nvmlGpuInstanceGetVgpuHeterogeneousMode``). Read each
  cycle on a vGPU host with MIG on; the answers change as vGPUs come and go.
* **Per type** (R550+): what one vGPU takes beyond its framebuffer, the driver's framebuffer
  reservation (``nvmlVgpuTypeGetFbReservation``) and GSP heap (``nvmlVgpuTypeGetGspHeapSize``),
  and its BAR1 aperture (``nvmlVgpuTypeGetBAR1Info``, in MB). Static: read once per type. pynvml
  reads the first two into 32 bits (docs/nvml-notes.md §11, quirk 2), so with real pynvml they
  are read through the C symbols.

Both need the ``vgpu`` reader's types and instances of this cycle, and run after it.
"""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Sequence
from typing import Any

from vgpumon.collect.base import (
    FunctionReader,
    GpuBuilder,
    GpuContext,
    absent_reason,
    note_unsupported,
)
from vgpumon.collect.vgpu import gpu_instance_handles, is_vgpu_host
from vgpumon.collect.vgpu_raw import as_int, has_raw
from vgpumon.model import GpuInstanceVgpuCapacity, MigGpuInstance, VgpuType
from vgpumon.nvml.session import CallOutcome

GI_NAME = "vgpu_gpu_instances"
TYPE_NAME = "vgpu_type_reservations"
TYPE_ID_INFO_V1 = 0x1000010  # nvmlVgpuTypeIdInfo_v1, for modules without the constant
PLACEMENT_INFO_V1 = 0x1000020  # nvmlVgpuCreatablePlacementInfo_v1
MB = 1024 * 1024
_RESERVATIONS_KEY = "vgpu_type_reservations"  # type id -> (reservation, gsp heap, bar1)


# --------------------------------------------------------------------------- per GPU instance


def non_overlapping(starts: Sequence[int], size: int) -> int:
    """How many placements of ``size`` slots fit at once among the free ``starts``."""
    fits, free_from = 0, -1
    for start in sorted(starts):
        if start >= free_from:
            fits += 1
            free_from = start + max(1, size)
    return fits


def _creatable_types(ctx: GpuContext, gi_handle: Any) -> tuple[list[int] | None, CallOutcome]:
    cls = ctx.module_attr("c_nvmlVgpuTypeIdInfo_v1_t")
    if cls is None:
        return None, CallOutcome(status="absent", error="function_not_found")
    info = cls()
    info.version = ctx.module_attr("nvmlVgpuTypeIdInfo_v1", TYPE_ID_INFO_V1)
    outcome = ctx.attempt("nvmlGpuInstanceGetCreatableVgpus", gi_handle, info, key="gpu_instance")
    return _type_ids(outcome.value), outcome


def _type_ids(got: Any) -> list[int] | None:
    if got is None:
        return None
    count = as_int(getattr(got, "vgpuCount", None)) or 0
    ids = getattr(got, "vgpuTypeIds", None)
    if not count or not ids:
        return []
    return [t for t in (as_int(ids[i]) for i in range(count)) if t is not None]


def _fits(ctx: GpuContext, gi_handle: Any, type_id: int) -> int | None:
    cls = ctx.module_attr("c_nvmlVgpuCreatablePlacementInfo_v1_t")
    if cls is None:
        return None
    info = cls()
    info.version = ctx.module_attr("nvmlVgpuCreatablePlacementInfo_v1", PLACEMENT_INFO_V1)
    info.vgpuTypeId = type_id
    got = ctx.call(
        "nvmlGpuInstanceGetVgpuTypeCreatablePlacements", gi_handle, info, key="gpu_instance"
    )
    if got is None:
        return None
    count = as_int(getattr(got, "count", None)) or 0
    ids = getattr(got, "placementIds", None)
    if not count or not ids:
        return 0
    starts = [p for p in (as_int(ids[i]) for i in range(count)) if p is not None]
    return non_overlapping(starts, as_int(getattr(got, "placementSize", None)) or 1)


def read_gpu_instances(ctx: GpuContext, out: GpuBuilder) -> None:
    gis: tuple[MigGpuInstance, ...] = out.get("mig_instances") or ()
    if not gis or not is_vgpu_host(ctx, out):
        return
    names = {t.type_id: t.name for t in out.get("vgpu_types") or ()}
    handles = gpu_instance_handles(ctx, [gi.id for gi in gis])
    updated = []
    outcomes: list[CallOutcome] = []
    for gi in gis:
        handle = handles.get(gi.id)
        if handle is None:
            updated.append(gi)
            continue
        hetero = ctx.attempt("nvmlGpuInstanceGetVgpuHeterogeneousMode", handle, key="gpu_instance")
        types, listed = _creatable_types(ctx, handle)
        outcomes += [hetero, listed]
        capacity: list[GpuInstanceVgpuCapacity] = []
        for type_id in types or ():
            capacity.append(
                GpuInstanceVgpuCapacity(type_id, names.get(type_id), _fits(ctx, handle, type_id))
            )
        updated.append(
            dataclasses.replace(
                gi,
                vgpu_heterogeneous_mode=bool(hetero.value) if hetero.ok else None,
                vgpu_capacity=tuple(capacity),
            )
        )
    out.set(mig_instances=tuple(updated))
    note_unsupported(out, GI_NAME, absent_reason(*outcomes))
    _exact_type_counts(out, updated)


def _exact_type_counts(out: GpuBuilder, gis: Sequence[MigGpuInstance]) -> None:
    """A MIG-backed type's room on the GPU is the sum of its room in each GPU instance, where
    the driver counted it per instance: placement-aware, so it replaces the vgpu reader's
    estimate (free vGPUs per instance of the profile) in ``vgpumon_vgpu_type_creatable_instances``,
    the capacity screen and the node labels alike."""
    counted: dict[int, int] = {}
    known: set[int] = set()
    for gi in gis:
        for c in gi.vgpu_capacity:
            if c.creatable_instances is not None:
                counted[c.type_id] = counted.get(c.type_id, 0) + c.creatable_instances
                known.add(c.type_id)
    answered = any(gi.vgpu_heterogeneous_mode is not None or gi.vgpu_capacity for gi in gis)
    types: tuple[VgpuType, ...] = out.get("vgpu_types") or ()
    if not types or not answered:
        return
    exact = []
    for t in types:
        if t.gpu_instance_profile_id is not None and t.creatable:
            t = dataclasses.replace(t, creatable_instances=counted.get(t.type_id, 0))
        exact.append(t)
    out.set(vgpu_types=tuple(exact))


# --------------------------------------------------------------------------- per type


def _bytes(ctx: GpuContext, function: str, type_id: int) -> CallOutcome:
    """A 64-bit byte count per type: the C symbol with real pynvml, the module's name elsewhere."""
    if has_raw(ctx.session):
        value = ctypes.c_ulonglong(0)
        got = ctx.session.attempt_raw(
            ctx.uuid, function, ctypes.c_uint(type_id), ctypes.byref(value), key=type_id
        )
        return CallOutcome(int(value.value)) if got.ok else got
    got = ctx.attempt(function, type_id, key=type_id)
    return CallOutcome(as_int(got.value)) if got.ok else got


Reservations = tuple[int | None, int | None, int | None]


def _reservations(ctx: GpuContext, type_id: int) -> tuple[Reservations, str | None]:
    reservation = _bytes(ctx, "nvmlVgpuTypeGetFbReservation", type_id)
    heap = _bytes(ctx, "nvmlVgpuTypeGetGspHeapSize", type_id)
    bar1 = ctx.attempt("nvmlVgpuTypeGetBAR1Info", type_id, key=type_id)
    bar1_mb = as_int(getattr(bar1.value, "bar1Size", None)) if bar1.ok else None
    values = (reservation.value, heap.value, bar1_mb * MB if bar1_mb is not None else None)
    return values, absent_reason(reservation, heap, bar1)


def read_type_reservations(ctx: GpuContext, out: GpuBuilder) -> None:
    types: tuple[VgpuType, ...] = out.get("vgpu_types") or ()
    if not types:
        return
    known: dict[int, Reservations] = ctx.state.setdefault(_RESERVATIONS_KEY, {})
    updated = []
    reason = None
    for t in types:
        got = known.get(t.type_id)
        if got is None:
            got, reason = _reservations(ctx, t.type_id)
            if any(v is not None for v in got):
                known[t.type_id] = got  # static; a type that answered nothing is asked again
        reservation, heap, bar1 = got
        updated.append(
            dataclasses.replace(
                t, framebuffer_reservation_bytes=reservation, gsp_heap_bytes=heap, bar1_bytes=bar1
            )
        )
    out.set(vgpu_types=tuple(updated))
    if not known:
        note_unsupported(out, TYPE_NAME, reason)


READERS = [
    FunctionReader(GI_NAME, read_gpu_instances),
    FunctionReader(TYPE_NAME, read_type_reservations),
]
