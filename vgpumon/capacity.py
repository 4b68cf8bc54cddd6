"""Capacity answers derived from snapshots: stranded framebuffer, and where one more TYPE fits.

Pure functions of the model (this module imports nothing else from vgpumon), so the vGPU reader,
the node-features writer, the checks and the presentation layer all derive the same answer.

Definitions (docs/capacity.md):

* A vGPU host's *framebuffer capacity* is what the driver hands out when the GPU is filled with
  one time-sliced type: the largest ``framebuffer x max_instances`` among its supported types.
  Taking it from the types, not from the GPU's memory total, keeps the driver's own reservations
  out of the answer: an empty GPU strands nothing.
* *Free* framebuffer is that capacity less the framebuffer of the running time-sliced vGPUs (each
  holds its type's whole framebuffer, used or not).
* *Stranded* framebuffer is the free framebuffer that no supported type can use in the current
  mix: free less the most that any one type can still take (``creatable_instances x
  framebuffer``). Homogeneous mode strands what the running size cannot fill; heterogeneous mode
  strands slots between placements that no type's aligned placement covers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from vgpumon.model import Gpu, Snapshot, VgpuInstance, VgpuType


def _sliced(types: Iterable[VgpuType]) -> list[VgpuType]:
    """Time-sliced types (MIG-backed ones live in GPU instances, accounted by MIG)."""
    return [t for t in types if t.gpu_instance_profile_id is None]


def vgpu_framebuffer(
    types: Sequence[VgpuType], instances: Sequence[VgpuInstance]
) -> tuple[int | None, int | None]:
    """(free, stranded) framebuffer bytes of a vGPU host; None where the types cannot tell."""
    sliced = _sliced(types)
    sizes = [
        t.framebuffer_bytes * t.max_instances
        for t in sliced
        if t.framebuffer_bytes is not None and t.max_instances is not None
    ]
    if not sizes:
        return None, None
    by_id = {t.type_id: t for t in sliced}
    allocated = 0
    for inst in instances:
        if inst.gpu_instance_id is not None:
            continue
        t = by_id.get(inst.type_id) if inst.type_id is not None else None
        fb = t.framebuffer_bytes if t is not None else inst.framebuffer_total_bytes
        if fb is None:
            return None, None
        allocated += fb
    free = max(0, max(sizes) - allocated)
    usable = 0
    for t in sliced:
        if t.creatable_instances is None or t.framebuffer_bytes is None:
            return free, None  # one type the driver could not size: stranded is unknown
        usable = max(usable, t.creatable_instances * t.framebuffer_bytes)
    return free, max(0, free - usable)


# --------------------------------------------------------------------------- where TYPE fits


def short_type_name(name: str) -> str:
    """``"NVIDIA L40S-8Q"`` -> ``"L40S-8Q"`` (the name people type)."""
    return name.removeprefix("NVIDIA ").removeprefix("GRID ")


def _matches(name: str | None, wanted: str) -> bool:
    if not name:
        return False
    w = wanted.strip().lower()
    return w in (name.lower(), short_type_name(name).lower())


@dataclass(frozen=True)
class Fit:
    """One GPU where one more instance of a vGPU type or MIG profile can be created now."""

    host: str
    gpu_index: int
    gpu_uuid: str
    kind: str  # "vgpu" | "mig"
    name: str  # the type's or profile's name as the driver gave it
    creatable_instances: int
    # Left over after placing one: framebuffer bytes for vGPU, compute slices for MIG. Smaller
    # is a tighter fit, so best-fit placement takes the first.
    remaining_after: int | None


def _gpu_fits(host: str, g: Gpu, wanted: str) -> Iterable[Fit]:
    if not g.up:
        return
    for t in g.vgpu_types:
        if _matches(t.name, wanted) and (t.creatable_instances or 0) > 0:
            free = g.vgpu_framebuffer_free_bytes
            left = None
            if free is not None and t.framebuffer_bytes is not None:
                left = max(0, free - t.framebuffer_bytes)
            yield Fit(host, g.index, g.uuid, "vgpu", t.name or "", t.creatable_instances or 0, left)
    for p in g.mig_profiles:
        if _matches(p.name, wanted) and (p.creatable_instances or 0) > 0:
            left = None
            if g.mig_free_slices is not None and p.slices is not None:
                left = max(0, g.mig_free_slices - p.slices)
            yield Fit(host, g.index, g.uuid, "mig", p.name or "", p.creatable_instances or 0, left)


def fits(snapshots: Iterable[tuple[str, Snapshot]], wanted: str) -> list[Fit]:
    """Every GPU of the fleet where one more ``wanted`` fits now, best fit first.

    ``wanted`` is a vGPU type name (``"NVIDIA L40S-8Q"`` or ``"l40s-8q"``) or a MIG profile name
    (``"1g.10gb"``), case-insensitive. Best fit: the least left over after placing it (packs
    partly used GPUs before opening empty ones), then the fewest further instances, then host
    and GPU index so the order is stable. Unknown leftovers sort last.
    """
    found = [f for host, snap in snapshots for g in snap.gpus for f in _gpu_fits(host, g, wanted)]
    return sorted(
        found,
        key=lambda f: (
            f.remaining_after is None,
            f.remaining_after or 0,
            f.creatable_instances,
            f.host,
            f.gpu_index,
        ),
    )
