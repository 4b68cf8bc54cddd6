"""``vgpumon record`` on vGPU hosts and guests: the ``vgpu`` and ``guest`` scenario sections.

A record hook (:func:`vgpumon.sim.record.register_record_hook`) that writes what the snapshot saw of
a GPU's vGPUs as the keys of :mod:`vgpumon.sim.vgpu` and :mod:`vgpumon.sim.licensing`, as constants
like the rest of a recorded scenario:

* host: vGPU mode (SR-IOV), heterogeneous mode, the supported types, the scheduler, and every
  active vGPU with its type, VM, guest driver, GPU instance, placement, framebuffer use, frame-rate
  limit, ECC, accounting, encoder and FBC statistics, guest processes, license, and its utilization
  as a constant load;
* guest: whether licensing applies, and the licensable features with state, product and expiry.

Choices the snapshot leaves open (docs/vgpu.md, "Simulator", has the list of what is lost):

* **Load.** A vGPU's ``load.sm`` is the utilization it *got*, not the demand behind it; a set of
  shares always fits the GPU, so every policy gives each vGPU exactly that again on replay.
* **Licenses.** The state at the recording; an expiry date becomes ``expires`` relative to the
  snapshot's time (the scenario's t = 0), so a license that was about to run out still does.
* **Memory.** The physical GPU's ``memory.used`` includes the whole framebuffer of every
  time-sliced vGPU, which the simulator adds back itself; it is subtracted here.
* **Identities.** vGPU UUIDs, mdev UUIDs and VM ids are written as placeholders numbered like
  :func:`vgpumon.commands.record.mask` numbers them (the same text for a masked snapshot), so a
  snapshot that was not masked cannot leak them either. The VM id type picks the hypervisor:
  ``kvm`` for UUIDs, ``other`` for domain ids.
"""

from __future__ import annotations

from typing import Any

from vgpumon.model import LICENSE_EXPIRY_STATUSES, Gpu, Snapshot, VgpuInstance, VgpuLicense
from vgpumon.sim.licensing import FEATURE_CODES, LICENSE_STATES
from vgpumon.sim.models import MODELS
from vgpumon.sim.record import register_record_hook
from vgpumon.sim.vgpu import CHURN_ID_BASE, POLICIES

VGPU_UUID_KIND, MDEV_UUID_KIND, VM_UUID_KIND = 3, 4, 5  # as commands.record.mask numbers them


def _placeholder(kind: int, n: int) -> str:
    return f"00000000-0000-0000-0000-{kind:04x}{n:08x}"


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != {} and value != []:
        d[key] = value


def _ratio(value: float | None) -> float | None:
    return None if value is None else round(min(1.0, max(0.0, value)), 4)


def _ms(seconds: float | None) -> str | None:
    """A duration as milliseconds text ("2ms"), to the microsecond."""
    if seconds is None or seconds < 0:
        return None
    return f"{round(seconds * 1e6) / 1e3:g}ms"


def _in(value: int | None, lo: int, hi: int) -> int | None:
    """``value`` when the schema accepts it (anything else is left to the simulator's default)."""
    return value if value is not None and lo <= value <= hi else None


def _expires(timestamp: float | None, now: float) -> str | None:
    """An expiry date as scenario time: seconds after the recording (at least 1 s)."""
    if timestamp is None:
        return None
    return f"{max(1, round(timestamp - now))}s"


def _timeline(
    state: str | None, status: str | None, expiry: float | None, now: float
) -> dict[str, Any] | str | None:
    """A license timeline reproducing one reading (None: nothing was read)."""
    if state is None or state not in LICENSE_STATES:
        return None
    out: dict[str, Any] = {"state": state}
    expires = _expires(expiry, now) if status == "valid" else None
    if expires is not None:
        out["expires"] = expires
    elif state == "licensed" and status in LICENSE_EXPIRY_STATUSES and status != "permanent":
        out["expiry_status"] = status  # without expires the simulator reports this status
    return out if len(out) > 1 else state


def _host_license(lic: VgpuLicense, now: float) -> dict[str, Any] | str | None:
    state = lic.state
    if state is None and lic.licensed is not None:  # pre-R510: only the licensed flag
        state = "licensed" if lic.licensed else "unlicensed"
    return _timeline(state, lic.expiry_status, lic.expiry_timestamp_seconds, now)


# --------------------------------------------------------------------------- types


def _mig_profile_ids(entry: dict[str, Any]) -> set[int]:
    rows = entry.get("mig_profiles")
    if rows is None:
        rows = MODELS.get(entry.get("model", ""), {}).get("mig_profiles", [])
    return {int(p["id"]) for p in rows}


def _types(gpu: Gpu, entry: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """type id -> scenario type row, from the supported list and the active instances' types."""
    profiles = _mig_profile_ids(entry)
    rows: dict[int, dict[str, Any]] = {}
    for t in gpu.vgpu_types:
        if _in(t.type_id, 1, 0xFFFFFFFE) is None:
            continue
        fb = t.framebuffer_bytes or next(
            (
                i.framebuffer_total_bytes
                for i in gpu.vgpu_instances
                if i.type_id == t.type_id and i.framebuffer_total_bytes
            ),
            None,
        )
        if not fb:
            continue  # a type without a size cannot be simulated
        row: dict[str, Any] = {"id": t.type_id, "name": t.name or f"vGPU type {t.type_id}"}
        _put(row, "class", t.type_class)
        row["framebuffer"] = fb
        _put(row, "max_instances", _in(t.max_instances, 1, 64))
        _put(row, "max_per_vm", _in(t.max_instances_per_vm, 1, 16))
        if t.gpu_instance_profile_id is not None:
            if t.gpu_instance_profile_id not in profiles:
                continue  # a MIG profile this GPU's scenario does not know
            row["gpu_instance_profile"] = t.gpu_instance_profile_id
        rows[t.type_id] = row
    for i in gpu.vgpu_instances:  # types of running vGPUs the supported list did not give
        if i.type_id is None or i.type_id in rows or _in(i.type_id, 1, 0xFFFFFFFE) is None:
            continue
        if not i.framebuffer_total_bytes or i.gpu_instance_id is not None:
            continue  # MIG-backed without its profile id: not simulable
        row = {"id": i.type_id, "name": i.type_name or f"vGPU type {i.type_id}"}
        _put(row, "class", i.type_class)
        row["framebuffer"] = i.framebuffer_total_bytes
        rows[i.type_id] = row
    # A type's frame-rate limit is not in the snapshot; its running vGPUs show it when they agree.
    for type_id, row in rows.items():
        limits = {i.frame_rate_limit or 0 for i in gpu.vgpu_instances if i.type_id == type_id}
        if len(limits) == 1:
            row["frame_rate_limit"] = _in(limits.pop(), 0, 1000) or 0
    return rows


# --------------------------------------------------------------------------- instances


def _instance(
    v: VgpuInstance,
    n: int,
    types: dict[int, dict[str, Any]],
    processes: list[dict[str, Any]],
    now: float,
) -> dict[str, Any] | None:
    if v.type_id not in types:
        return None
    mig_backed = "gpu_instance_profile" in types[v.type_id]
    if mig_backed != (v.gpu_instance_id is not None):
        return None  # a MIG-backed vGPU outside a GPU instance (or the reverse): not simulable
    d: dict[str, Any] = {}
    _put(d, "id", _in(v.vgpu_id, 1, CHURN_ID_BASE - 1))  # else the simulator numbers it
    d["type"] = v.type_id
    if v.vm_id is not None:
        d["vm_id"] = str(n) if v.vm_id_type == "domain_id" else _placeholder(VM_UUID_KIND, n)
    if v.uuid is not None:
        d["uuid"] = _placeholder(VGPU_UUID_KIND, n)
    if v.mdev_uuid is not None:
        d["mdev_uuid"] = _placeholder(MDEV_UUID_KIND, n)
    d["guest_driver"] = v.guest_driver_version  # None: not loaded (NVML says "Not Available")
    _put(d, "migration", v.migration_supported)
    load: dict[str, Any] = {}
    for key in ("sm", "memory", "encoder", "decoder"):
        _put(load, key, _ratio(getattr(v.utilization, key)))
    _put(d, "load", load)
    _put(d, "framebuffer_used", v.framebuffer_used_bytes)
    _put(d, "gpu_instance", v.gpu_instance_id)
    _put(d, "placement", v.placement_id)
    if v.ecc_enabled is not None:
        d["ecc"] = "enabled" if v.ecc_enabled else "disabled"
    else:
        d["ecc"] = "unsupported"
    _put(d, "accounting", v.accounting_enabled)
    if v.accounting_pids:
        d["accounting_pids"] = [p for p in v.accounting_pids if 1 <= p <= 2**31]
    encoder: dict[str, Any] = {}
    _put(encoder, "capacity", _ratio(v.encoder_capacity))
    _put(encoder, "sessions", _in(v.encoder_sessions, 0, 64))
    if v.encoder_sessions:
        _put(encoder, "fps", _in(round(v.encoder_average_fps or 0), 0, 1000))
        _put(encoder, "latency", _ms(v.encoder_average_latency_seconds))
    _put(d, "encoder", encoder)
    fbc: dict[str, Any] = {}
    _put(fbc, "sessions", _in(v.fbc_sessions, 0, 64))
    if v.fbc_sessions:
        _put(fbc, "fps", _in(round(v.fbc_average_fps or 0), 0, 1000))
        _put(fbc, "latency", _ms(v.fbc_average_latency_seconds))
    _put(d, "fbc", fbc)
    d["frame_rate_limit"] = _in(v.frame_rate_limit, 0, 1000) or 0  # absent: the limiter is off
    _put(d, "processes", processes)
    _put(d, "license", _host_license(v.license, now))
    return d


def _processes(gpu: Gpu) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for p in gpu.vgpu_processes:
        if not 1 <= p.pid <= 2**31:
            continue
        row: dict[str, Any] = {"pid": p.pid}
        _put(row, "name", p.name)
        for key in ("sm", "memory", "encoder", "decoder"):
            _put(row, key, _ratio(getattr(p, f"{key}_utilization")))
        out.setdefault(p.vgpu_id, []).append(row)
    return out


def _scheduler(gpu: Gpu) -> dict[str, Any]:
    s = next((s for s in gpu.vgpu_schedulers if s.gpu_instance_id is None), None)
    if s is None:
        return {}
    out: dict[str, Any] = {}
    if s.policy in POLICIES:
        out["policy"] = s.policy
    if s.arr_enabled is not None:
        out["arr"] = "enable" if s.arr_enabled else "disable"
    elif s.average_factor:
        out["arr"] = "enable"  # the _v2 call has no ARR field; its factor is set only under ARR
    if s.timeslice_seconds is not None and 1e-6 <= s.timeslice_seconds <= 4.0:
        out["timeslice"] = _ms(s.timeslice_seconds)
    _put(out, "average_factor", _in(s.average_factor, 0, 1000))
    for key in ("min_timeslice", "max_timeslice"):
        value = getattr(s, f"{key}_seconds")
        if value is not None and 1e-6 <= value <= 4.0:
            out[key] = _ms(value)
    _put(out, "supported", [p for p in s.supported_policies if p in POLICIES])
    return out


def _placement_slots(gpu: Gpu, types: dict[int, dict[str, Any]]) -> int | None:
    """Heterogeneous mode: the slots the GPU is divided into, as the smallest type's instances.

    NVML does not report the slot count; a type of ``k`` slots fits ``slots / k`` times.
    """
    sliced = [t for t in types.values() if "gpu_instance_profile" not in t]
    if not sliced:
        return None
    smallest = min(t["framebuffer"] for t in sliced)
    counts = [
        t["max_instances"] * max(1, t["framebuffer"] // smallest)
        for t in sliced
        if "max_instances" in t
    ]
    return _in(max(counts), 1, 256) if counts else None


def _host(gpu: Gpu, entry: dict[str, Any], snapshot: Snapshot) -> None:
    types = _types(gpu, entry)
    if not types:
        return  # nothing the simulator could build a vGPU host from
    before = next((k for k, g in enumerate(snapshot.gpus) if g is gpu), len(snapshot.gpus))
    first = 1 + sum(len(g.vgpu_instances) for g in snapshot.gpus[:before])
    processes = _processes(gpu)
    instances = []
    for k, v in enumerate(gpu.vgpu_instances):
        inst = _instance(v, first + k, types, processes.get(v.vgpu_id, []), snapshot.timestamp)
        if inst is not None:
            instances.append(inst)
    vgpu: dict[str, Any] = {}
    if gpu.host_vgpu_mode in ("sriov", "non_sriov"):
        vgpu["sriov"] = gpu.host_vgpu_mode == "sriov"
    if gpu.vgpu_migration_supported is not None:
        vgpu["migration"] = gpu.vgpu_migration_supported
    if gpu.vgpu_heterogeneous_mode is not None:
        vgpu["heterogeneous"] = gpu.vgpu_heterogeneous_mode
        if gpu.vgpu_heterogeneous_mode:
            _put(vgpu, "placement_slots", _placement_slots(gpu, types))
    id_types = {v.vm_id_type for v in gpu.vgpu_instances if v.vm_id_type is not None}
    if id_types == {"uuid"}:
        vgpu["hypervisor"] = "kvm"
    elif id_types == {"domain_id"}:
        vgpu["hypervisor"] = "other"
    vgpu["types"] = list(types.values())
    _put(vgpu, "scheduler", _scheduler(gpu))
    _put(vgpu, "instances", instances)
    entry["vgpu"] = vgpu

    # The simulator adds each running time-sliced vGPU's whole framebuffer to the GPU's memory.
    memory = entry.get("memory", {})
    if "used" in memory:
        held = sum(
            types[v.type_id]["framebuffer"]
            for v in gpu.vgpu_instances
            if v.type_id in types and "gpu_instance_profile" not in types[v.type_id]
        )
        memory["used"] = max(0, memory["used"] - held)


def _guest(gpu: Gpu, entry: dict[str, Any], now: float) -> None:
    supported = gpu.guest_license_supported
    if supported is None:
        return
    features = []
    for f in gpu.guest_licenses:
        if f.feature not in FEATURE_CODES:
            continue
        row: dict[str, Any] = {"feature": f.feature}
        _put(row, "product", f.product_name)
        _put(row, "enabled", f.enabled)
        state = f.state
        if state is None and f.licensed is not None:
            state = "licensed" if f.licensed else "unlicensed"
        _put(row, "license", _timeline(state, f.expiry_status, f.expiry_timestamp_seconds, now))
        features.append(row)
    default = gpu.virtualization_mode == "vgpu"  # what the simulator answers without the key
    if supported == default and not features:
        return
    guest: dict[str, Any] = {"licensing": supported}
    _put(guest, "features", features)
    entry["guest"] = guest


def record_vgpu(gpu: Gpu, entry: dict[str, Any], snapshot: Snapshot) -> None:
    if gpu.virtualization_mode == "host_vgpu" and entry.get("virtualization_mode") == "host_vgpu":
        _host(gpu, entry, snapshot)
    else:
        _guest(gpu, entry, snapshot.timestamp)


register_record_hook(record_vgpu)
