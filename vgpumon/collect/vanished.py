"""Vanished or shut down: what became of the VM of each vGPU that went away (docs/verdicts.md).

A vGPU goes away every time its VM shuts down, is destroyed or migrates: that is an event, not a
problem. It is a problem when the vGPU is gone while its VM still runs (a vGPU manager error, a
failed migration, a guest crash that took the vGPU). NVML alone cannot tell the two apart, the
hypervisor can: this tracker keeps the VM of every vGPU it saw (libvirt's domain, merged by the
libvirt enricher), and when a vGPU is no longer listed it waits :data:`CONFIRM_SECONDS` (so that
libvirt's re-read after the domain's lifecycle event has landed), then asks libvirt's newest view:

* the domain is gone or not running: ``vm_stopped`` (shut down, destroyed, migrated away);
* it runs and holds another vGPU now (a restart gave it a new one): ``vm_holds_another``;
* it runs without a vGPU: ``vanished``, listed until the VM stops or gets a vGPU again.

A vGPU whose VM libvirt never knew is counted as ``vm_unknown`` and never called vanished. GPUs
that are down are left alone: their vGPUs are not listed, which says nothing of the VMs. The
result (:class:`vgpumon.model.VgpuDepartures`, per GPU) is exported as
``vgpumon_gpu_vgpus_vanished`` and
``vgpumon_gpu_vgpu_departures_total{reason}`` per GPU; the alert sums the first per host.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vgpumon.collect.enrich.domains import Domain, Inventory, merge
from vgpumon.model import (
    VGPU_DEPARTURES,
    Gpu,
    Snapshot,
    VanishedVgpu,
    VgpuDepartures,
    VgpuInstance,
)

CONFIRM_SECONDS = 30.0
# libvirt states in which the VM is up (a paused VM still holds its devices).
RUNNING = frozenset({"running", "blocked", "paused", "pmsuspended"})

Key = tuple[str, int, str]  # GPU UUID, vGPU id, vGPU UUID (ids are reused, UUIDs not)


@dataclass(frozen=True)
class _Seen:
    gpu_uuid: str
    gpu_index: int
    vgpu_id: int
    vm_uuid: str | None  # libvirt's domain UUID, lower case
    vm_name: str | None
    vm_id: str | None  # NVML's
    vm_id_type: str | None
    mdev_uuid: str | None


def _key(gpu_uuid: str, v: VgpuInstance) -> Key:
    return gpu_uuid, v.vgpu_id, v.uuid or v.mdev_uuid or ""


def _domain(seen: _Seen, inventory: Inventory) -> Domain | None:
    if seen.vm_uuid and seen.vm_uuid in inventory.by_uuid:
        return inventory.by_uuid[seen.vm_uuid]
    if seen.mdev_uuid and seen.mdev_uuid.lower() in inventory.by_mdev:
        return inventory.by_mdev[seen.mdev_uuid.lower()]
    if seen.vm_id and seen.vm_id_type == "uuid":
        return inventory.by_uuid.get(seen.vm_id.strip().lower())
    return None


def with_vms(
    snapshot: Snapshot, inventory: Inventory | None, tracker: DepartureTracker
) -> Snapshot:
    """What the libvirt enricher does each cycle: the VMs merged in, then the departures."""
    merged = snapshot if inventory is None else merge(snapshot, inventory)
    return tracker.update(merged, inventory)


class DepartureTracker:
    """Follows the vGPUs of successive snapshots; :meth:`update` adds its verdicts."""

    def __init__(self, confirm_seconds: float = CONFIRM_SECONDS) -> None:
        self.confirm = confirm_seconds
        self._seen: dict[Key, _Seen] = {}
        self._pending: dict[Key, tuple[_Seen, float]] = {}  # gone, not yet judged: since when
        self._vanished: dict[Key, tuple[_Seen, float]] = {}
        self.counts: dict[str, dict[str, int]] = {}  # GPU UUID -> reason -> vGPUs

    def update(self, snapshot: Snapshot, inventory: Inventory | None) -> Snapshot:
        """``snapshot`` with its departures; ``inventory``: libvirt's newest view (None: none
        yet, so nothing is judged)."""
        now = snapshot.timestamp
        present: dict[Key, _Seen] = {}
        listed: set[str] = set()  # GPUs whose vGPUs this snapshot lists
        for g in snapshot.gpus:
            if not g.up:
                continue
            listed.add(g.uuid)
            for v in g.vgpu_instances:
                present[_key(g.uuid, v)] = _Seen(
                    gpu_uuid=g.uuid,
                    gpu_index=g.index,
                    vgpu_id=v.vgpu_id,
                    vm_uuid=(v.vm.uuid or "").lower() or None if v.vm is not None else None,
                    vm_name=v.vm.name if v.vm is not None else None,
                    vm_id=v.vm_id,
                    vm_id_type=v.vm_id_type,
                    mdev_uuid=v.mdev_uuid,
                )
        for key, seen in self._seen.items():
            if key not in present and seen.gpu_uuid in listed and key not in self._pending:
                self._pending[key] = (seen, now)
        for key in [k for k in self._pending if k in present]:
            del self._pending[key]  # listed again: it was a missed reading, not a departure
        # What libvirt knew of a vGPU is kept from the newest reading that had it.
        self._seen = {
            k: present.get(k, s)
            for k, s in self._seen.items()
            if k in present or s.gpu_uuid not in listed
        }
        self._seen.update(present)
        if inventory is not None:
            self._judge(now, inventory, present)
        return dataclasses.replace(
            snapshot, gpus=tuple(self._gpu(g) if g.up else g for g in snapshot.gpus)
        )

    def _gpu(self, g: Gpu) -> Gpu:
        if g.virtualization_mode != "host_vgpu":
            return g
        counts = self.counts.setdefault(g.uuid, dict.fromkeys(VGPU_DEPARTURES, 0))
        vanished = sorted(
            ((s, since) for s, since in self._vanished.values() if s.gpu_uuid == g.uuid),
            key=lambda x: (x[1], x[0].vgpu_id),
        )
        return dataclasses.replace(
            g,
            vgpu_departures=VgpuDepartures(
                vanished=tuple(
                    VanishedVgpu(s.vgpu_id, s.vm_name, s.vm_uuid, since) for s, since in vanished
                ),
                counts=dict(counts),
            ),
        )

    def _judge(self, now: float, inventory: Inventory, present: dict[Key, _Seen]) -> None:
        holding = {s.vm_uuid for s in present.values() if s.vm_uuid}
        for key, (seen, since) in list(self._pending.items()):
            if now - since < self.confirm:
                continue
            del self._pending[key]
            reason = self._reason(seen, inventory, holding)
            counts = self.counts.setdefault(seen.gpu_uuid, dict.fromkeys(VGPU_DEPARTURES, 0))
            counts[reason] += 1
            if reason == "vanished":
                self._vanished[key] = (seen, since)
        for key, (seen, _) in list(self._vanished.items()):
            if self._reason(seen, inventory, holding) != "vanished":
                del self._vanished[key]  # the VM stopped, or has a vGPU again

    @staticmethod
    def _reason(seen: _Seen, inventory: Inventory, holding: set[str]) -> str:
        if seen.vm_uuid is None and seen.vm_name is None:
            return "vm_unknown"
        domain = _domain(seen, inventory)
        if domain is None or domain.state not in RUNNING:
            return "vm_stopped"
        if domain.uuid in holding:
            return "vm_holds_another"
        return "vanished"
