"""Capacity of a fleet for the front ends: how many more of each vGPU type and MIG profile fit on
each host, where one more of a type fits now (best fit first), and what a vGPU's live migration
needs that this host can tell.

Both come from :mod:`vgpumon.capacity` (the same answers the exporter's families, node-features
and the Capacity dashboard give); this module only arranges them as rows. Counts of different
types on one GPU are alternatives (six 8Q or three 16Q, not both): a row sums one type over GPUs,
never types over a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from vgpumon.capacity import Fit, fits, short_type_name
from vgpumon.model import (
    Gpu,
    Snapshot,
    VgpuInstance,
    guest_driver_matches_host,
    vgpu_migration_ready,
)

VGPU, MIG = "vGPU", "MIG"


@dataclass(frozen=True)
class CapacityRow:
    """One vGPU type or MIG profile across the fleet: how many more fit on each host.

    ``per_host`` has a host only when one of its GPUs offers the type (0: offered, but full;
    None: offered, but the driver could not count). Pairs, not a mapping, so that rows stay
    hashable (front ends cache cells per unchanged row).
    """

    key: str
    kind: str  # VGPU | MIG
    name: str  # the short name people type after fits: (L40S-8Q, 1g.10gb)
    size_bytes: int | None  # one instance's framebuffer (vGPU) or memory (MIG), for ordering
    per_host: tuple[tuple[str, int | None], ...]

    def on(self, host: str) -> int | None:
        """How many more fit on ``host`` (None: not offered there, or not counted)."""
        return dict(self.per_host).get(host)

    def offered_on(self, host: str) -> bool:
        return host in dict(self.per_host)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.per_host if n is not None)

    @property
    def hosts_with_room(self) -> int:
        return sum(1 for _, n in self.per_host if n)

    @property
    def fields(self) -> dict[str, str]:
        name = "profile" if self.kind == MIG else "type"
        return {name: self.name, "kind": self.kind, "host": " ".join(h for h, _ in self.per_host)}


@dataclass
class _Acc:
    kind: str
    name: str
    size: int | None = None
    per_host: dict[str, int | None] = field(default_factory=dict)

    def add(self, host: str, count: int | None, size: int | None) -> None:
        if size is not None:
            self.size = size
        if count is None:
            self.per_host.setdefault(host, None)  # counted GPUs of the host still add up
            return
        self.per_host[host] = (self.per_host.get(host) or 0) + count


def _offers(host: str, gpu: Gpu, acc: dict[tuple[str, str], _Acc]) -> None:
    if not gpu.up:
        return
    for t in gpu.vgpu_types:
        if not t.name:
            continue
        name = short_type_name(t.name)
        acc.setdefault((VGPU, name), _Acc(VGPU, name)).add(
            host, t.creatable_instances, t.framebuffer_bytes
        )
    for p in gpu.mig_profiles:
        if not p.name:
            continue
        acc.setdefault((MIG, p.name), _Acc(MIG, p.name)).add(
            host, p.creatable_instances, p.memory_bytes
        )


def capacity_rows(snapshots: Iterable[tuple[str, Snapshot | None]]) -> list[CapacityRow]:
    """One row per vGPU type and MIG profile any host offers: vGPU types first, each kind by
    instance size (smallest first), then name."""
    acc: dict[tuple[str, str], _Acc] = {}
    for host, snap in snapshots:
        if snap is None:
            continue
        for gpu in snap.gpus:
            _offers(host, gpu, acc)
    rows = [
        CapacityRow(f"{a.kind}/{a.name}", a.kind, a.name, a.size, tuple(a.per_host.items()))
        for a in acc.values()
    ]
    return sorted(rows, key=lambda r: (r.kind != VGPU, r.size_bytes or 0, r.name.lower()))


@dataclass(frozen=True)
class GiVgpuRow:
    """One GPU instance of a MIG vGPU host: the MIG-backed vGPUs in it and the room left
    (``vgpumon_mig_vgpu_*``; time-sliced MIG-backed vGPUs on GB20x)."""

    key: str
    host: str
    gpu_index: int
    gpu_instance_id: int
    profile: str | None
    running: int
    mixed: bool | None  # the instance hosts vGPUs of different sizes at once
    fits: tuple[tuple[str, int | None], ...]  # (short type name, how many more fit)

    @property
    def fits_label(self) -> str:
        parts = [f"{name}×{'?' if n is None else n}" for name, n in self.fits]
        return " ".join(parts) or "—"

    @property
    def room(self) -> int:
        return sum(n for _, n in self.fits if n)

    @property
    def fields(self) -> dict[str, str]:
        return {"host": self.host, "profile": self.profile or "", "type": self.fits_label}


def gi_vgpu_rows(snapshots: Iterable[tuple[str, Snapshot | None]]) -> list[GiVgpuRow]:
    """GPU instances that can host vGPUs, per host and GPU, in id order."""
    out = []
    for host, snap in snapshots:
        if snap is None:
            continue
        for gpu in snap.gpus:
            if not gpu.up or gpu.virtualization_mode != "host_vgpu":
                continue
            for gi in gpu.mig_instances:
                if gi.vgpu_heterogeneous_mode is None and not gi.vgpu_capacity:
                    continue  # the driver says nothing of vGPUs in GPU instances
                running = sum(1 for v in gpu.vgpu_instances if v.gpu_instance_id == gi.id)
                fits = tuple(
                    (short_type_name(c.type_name or str(c.type_id)), c.creatable_instances)
                    for c in gi.vgpu_capacity
                )
                out.append(
                    GiVgpuRow(
                        f"{host}/{gpu.uuid}/{gi.id}",
                        host,
                        gpu.index,
                        gi.id,
                        gi.profile_name,
                        running,
                        gi.vgpu_heterogeneous_mode,
                        fits,
                    )
                )
    return out


@dataclass(frozen=True)
class FitRow:
    """One GPU where one more of the wanted type or profile fits now (``rank`` 1 is the best)."""

    key: str
    rank: int
    host: str
    gpu_index: int
    gpu_uuid: str
    kind: str  # VGPU | MIG
    name: str  # the type's or profile's short name
    creatable: int
    # Left after placing one: framebuffer bytes (vGPU) or compute slices (MIG); None: unknown.
    remaining_after: int | None

    @property
    def fields(self) -> dict[str, str]:
        name = "profile" if self.kind == MIG else "type"
        return {
            "host": self.host,
            "gpu": str(self.gpu_index),
            "uuid": self.gpu_uuid,
            "kind": self.kind,
            name: self.name,
        }


def _fit_row(rank: int, fit: Fit) -> FitRow:
    kind = MIG if fit.kind == "mig" else VGPU
    name = short_type_name(fit.name) if kind == VGPU else fit.name
    return FitRow(
        f"{fit.host}/{fit.gpu_uuid}/{kind}/{name}",
        rank,
        fit.host,
        fit.gpu_index,
        fit.gpu_uuid,
        kind,
        name,
        fit.creatable_instances,
        fit.remaining_after,
    )


def fit_rows(snapshots: Iterable[tuple[str, Snapshot | None]], wanted: str) -> list[FitRow]:
    """The GPUs where one more ``wanted`` (a vGPU type or MIG profile name) fits, best first."""
    have = [(host, snap) for host, snap in snapshots if snap is not None]
    return [_fit_row(rank, fit) for rank, fit in enumerate(fits(have, wanted), start=1)]


def fitting_names(gpu: Gpu) -> frozenset[str]:
    """Every name (full and short, lower case) of the vGPU types and MIG profiles of which one
    more fits on ``gpu`` now: what a ``fits:`` filter term is checked against."""
    if not gpu.up:
        return frozenset()
    names: set[str] = set()
    for t in gpu.vgpu_types:
        if t.name and (t.creatable_instances or 0) > 0:
            names |= {t.name.lower(), short_type_name(t.name).lower()}
    for p in gpu.mig_profiles:
        if p.name and (p.creatable_instances or 0) > 0:
            names.add(p.name.lower())
    return frozenset(names)


# --------------------------------------------------------------------------- migration readiness

# What NVML's compatibility check names as limiting a live move (model.MIGRATION_LIMITS).
_LIMITS = {"host_driver": "host driver", "guest_driver": "guest driver", "gpu": "GPU"}


def migration_blockers(host_driver: str | None, gpu: Gpu, vgpu: VgpuInstance) -> tuple[str, ...]:
    """What says no to a live migration of ``vgpu`` from this host, in the order
    :func:`vgpumon.model.vgpu_migration_ready` asks: the GPU, the vGPU, the guest driver's branch,
    NVML's compatibility check (with the limits it names). Empty when nothing says no."""
    out = []
    if gpu.vgpu_migration_supported is False:
        out.append("GPU unsupported")
    if vgpu.migration_supported is False:
        out.append("vGPU unsupported")
    if guest_driver_matches_host(host_driver, vgpu) is False:
        out.append("guest driver branch")
    if vgpu.live_migration_compatible is False:
        limits = [_LIMITS.get(x, x) for x in vgpu.migration_limits or ()]
        out.append("limited: " + ", ".join(limits) if limits else "incompatible")
    return tuple(out)


def migration_readiness(
    host_driver: str | None, gpu: Gpu, vgpu: VgpuInstance
) -> tuple[bool | None, tuple[str, ...]]:
    """(ready, what says no): ready as the exporter's ``vgpumon_vgpu_migration_ready`` says it
    (None: nothing says no but something is unknown)."""
    return vgpu_migration_ready(host_driver, gpu, vgpu), migration_blockers(host_driver, gpu, vgpu)
