"""Turn a snapshot of a real host into a scenario, so a user's bug report becomes a test.

:func:`scenario_from_snapshot` keeps what shapes behaviour (models, memory, MIG layout, loads as
the readings imply them, processes, modes, which GPUs were down) as constants, and masks what
identifies the machine: GPU and MIG UUIDs and serial numbers are replaced by index-derived
placeholders (``GPU-00000000-0000-4000-8000-000000000000`` for GPU 0). The result loads with
:func:`vgpumon.sim.load_scenario` once written with :func:`dump_scenario`.

Sections other modules simulate (vGPU instances, guest licensing) are added by hooks registered
with :func:`register_record_hook`; the simulator's extension modules
(``registry.EXTENSION_MODULES``) are imported before recording, so their hooks also run on a real
host, where no simulator was created.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import yaml

from vgpumon.model import Gpu, MigGpuInstance, Snapshot
from vgpumon.sim import registry
from vgpumon.sim.models import FOUR, MODELS, ONE, SEVEN, THREE, TWO
from vgpumon.sim.scenario_keys import ARCHITECTURES, CI_PROFILE_BY_SLICES

MIB = 2**20
MHZ = 1e6
RecordHook = Callable[[Gpu, dict[str, Any], Snapshot], None]
RECORD_HOOKS: list[RecordHook] = []

# SM counts used when a GPU matches no preset (the scenario needs one; readings never carry it).
_SM_GUESS = {"hopper": 132, "ampere": 108, "ada": 142, "blackwell": 148, "turing": 72, "volta": 80}
_CC_ARCH = {
    "7.0": "volta",
    "7.5": "turing",
    "8.0": "ampere",
    "8.6": "ampere",
    "8.7": "ampere",
    "8.9": "ada",
    "9.0": "hopper",
}
_PLACEMENTS = {1: ONE, 2: TWO, 3: THREE, 4: FOUR, 7: SEVEN}


def register_record_hook(hook: RecordHook) -> None:
    """``hook(gpu, entry, snapshot)`` may add or adjust keys of the scenario entry of ``gpu``.

    ``snapshot`` is the whole recorded snapshot (its timestamp is the scenario's t = 0).
    """
    if hook not in RECORD_HOOKS:
        RECORD_HOOKS.append(hook)


def masked_uuid(index: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{index:012d}"


def masked_mig_uuid(index: int, gi: int, ci: int) -> str:
    return f"MIG-00000000-0000-4000-9000-{index:04d}{gi:04d}{ci:04d}"


def masked_serial(index: int) -> str:
    return f"{index:013d}"


def _ratio(value: float | None) -> float | None:
    if value is None:
        return None
    return round(min(1.0, max(0.0, value)), 4)


def _share(part: float | None, whole: float | None) -> float | None:
    """part / whole as a ratio, when both are known and whole is not zero."""
    if part is None or whole is None or whole <= 0:
        return None
    return _ratio(part / whole)


def _put(d: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != {} and value != []:
        d[key] = value


def _model_of(gpu: Gpu) -> str | None:
    for name, preset in MODELS.items():
        if preset["name"] == gpu.name:
            return name
    return None


def _architecture(gpu: Gpu) -> str:
    if gpu.architecture and gpu.architecture.lower() in ARCHITECTURES:
        return gpu.architecture.lower()
    return _CC_ARCH.get(gpu.compute_capability or "", "hopper")


def _load(graphics: float | None, gpm: Any, util_memory: float | None = None) -> dict[str, Any]:
    load: dict[str, Any] = {}
    duty = graphics if graphics is not None else (gpm.graphics_active if gpm is not None else None)
    _put(load, "duty", _ratio(duty))
    _put(
        load,
        "dram",
        _ratio(util_memory if util_memory is not None else (gpm.dram_active if gpm else None)),
    )
    if gpm is not None:
        sm = gpm.sm_active
        _put(load, "sm_fraction", _share(sm, gpm.graphics_active))
        _put(load, "occupancy", _share(gpm.sm_occupancy, sm))
        _put(load, "tensor", _share(gpm.tensor_active, sm))
        _put(load, "fp64", _share(gpm.fp64_active, sm))
        _put(load, "fp32", _share(gpm.fp32_active, sm))
        _put(load, "fp16", _share(gpm.fp16_active, sm))
        if gpm.pcie_tx_bytes_per_second is not None:
            load["pcie_tx"] = round(max(0.0, gpm.pcie_tx_bytes_per_second))
        if gpm.pcie_rx_bytes_per_second is not None:
            load["pcie_rx"] = round(max(0.0, gpm.pcie_rx_bytes_per_second))
    return load


def _mig(gpu: Gpu, index: int, entry: dict[str, Any], model: str | None) -> None:
    mig: dict[str, Any] = {}
    _put(mig, "enabled", gpu.mig_mode_current)
    _put(mig, "pending", gpu.mig_mode_pending)
    instances = []
    profiles: dict[str, dict[str, Any]] = {}
    for gi in gpu.mig_instances:
        inst: dict[str, Any] = {"profile": gi.profile_name or gi.profile_id, "id": gi.id}
        _put(inst, "placement", gi.placement_start)
        _put(inst, "memory_used", gi.memory_used_bytes)
        if gi.gpm is not None:
            _put(inst, "load", _load(None, gi.gpm))
        cis = []
        for ci in gi.compute_instances:
            c: dict[str, Any] = {"id": ci.id, "uuid": masked_mig_uuid(index, gi.id, ci.id)}
            _put(c, "slices", ci.placement_size)
            _put(c, "placement", ci.placement_start)
            _put(c, "mig_index", ci.mig_index)
            cis.append(c)
        _put(inst, "compute_instances", cis)
        instances.append(inst)
        if model is None and gi.profile_name:
            profiles.setdefault(gi.profile_name, _synthetic_profile(gi))
    _put(mig, "instances", instances)
    if profiles:
        entry["mig_profiles"] = list(profiles.values())
    _put(entry, "mig", mig)


def _synthetic_profile(gi: MigGpuInstance) -> dict[str, Any]:
    """A profile row inferred from one observed GPU instance, for GPUs without a preset."""
    name = gi.profile_name or "1g"
    slices = int(name.split("g", 1)[0]) if name[0].isdigit() else 1
    sm = sum(ci.sm_count or 0 for ci in gi.compute_instances) or 1
    return {
        "index": CI_PROFILE_BY_SLICES.get(slices, 0),
        "id": gi.profile_id if gi.profile_id is not None else 0,
        "name": name,
        "slices": slices,
        "instances": max(1, 7 // slices),
        "sm_count": sm,
        "memory": gi.memory_total_bytes or MIB,
        "placements": [list(p) for p in _PLACEMENTS.get(slices, ONE)],
    }


def _gpu_entry(gpu: Gpu, index: int) -> dict[str, Any]:
    model = _model_of(gpu)
    entry: dict[str, Any] = {}
    if model is not None:
        entry["model"] = model
    else:
        arch = _architecture(gpu)
        entry["name"] = gpu.name or "NVIDIA GPU"
        entry["architecture"] = arch
        entry["sm_count"] = _SM_GUESS.get(arch, 80)
        _put(entry, "compute_capability", gpu.compute_capability)
    entry["uuid"] = masked_uuid(index)
    entry["serial"] = masked_serial(index)
    _put(entry, "pci_bus_id", gpu.pci_bus_id)
    _put(entry, "virtualization_mode", gpu.virtualization_mode)
    _put(entry, "persistence_mode", gpu.persistence_mode)
    if gpu.compute_mode in ("default", "exclusive_thread", "prohibited", "exclusive_process"):
        entry["compute_mode"] = gpu.compute_mode

    memory: dict[str, Any] = {}
    _put(memory, "total", gpu.memory.total_bytes)
    if model is None and "total" not in memory:
        memory["total"] = 0  # a GPU that was down when recorded: nothing known
    _put(memory, "reserved", gpu.memory.reserved_bytes)
    if gpu.memory.used_bytes is not None and not gpu.mig_mode_current:
        memory["used"] = gpu.memory.used_bytes
    _put(memory, "bar1_total", gpu.bar1_memory.total_bytes)
    _put(memory, "bar1_used", gpu.bar1_memory.used_bytes)
    _put(entry, "memory", memory)

    if not gpu.mig_mode_current:
        load = _load(gpu.utilization.gpu, gpu.gpm, gpu.utilization.memory)
        _put(load, "encoder", _ratio(gpu.utilization.encoder))
        _put(load, "decoder", _ratio(gpu.utilization.decoder))
        if "pcie_tx" not in load and gpu.pcie.tx_bytes_per_second is not None:
            load["pcie_tx"] = round(gpu.pcie.tx_bytes_per_second)
        if "pcie_rx" not in load and gpu.pcie.rx_bytes_per_second is not None:
            load["pcie_rx"] = round(gpu.pcie.rx_bytes_per_second)
        _put(entry, "load", load)

    power: dict[str, Any] = {}
    _put(power, "draw", round(gpu.power_watts, 3) if gpu.power_watts is not None else None)
    _put(power, "limit", gpu.power_limit_watts)
    if model is None and "limit" not in power:
        power["limit"] = 300.0
    _put(entry, "power", power)

    temperature: dict[str, Any] = {}
    _put(temperature, "gpu", gpu.temperatures.gpu_celsius)
    _put(temperature, "memory", gpu.temperatures.memory_celsius)
    _put(entry, "temperature", temperature)

    clocks: dict[str, Any] = {}
    current = {
        k: round(getattr(gpu.clocks, f"{k}_hertz") / MHZ)
        for k in ("graphics", "sm", "memory", "video")
        if getattr(gpu.clocks, f"{k}_hertz") is not None
    }
    maximum = {
        k: round(getattr(gpu.max_clocks, f"{k}_hertz") / MHZ)
        for k in ("graphics", "sm", "memory", "video")
        if getattr(gpu.max_clocks, f"{k}_hertz") is not None
    }
    if len(maximum) == 4:
        clocks["max"] = maximum
    elif model is None:
        clocks["max"] = {
            k: maximum.get(k, current.get(k, 1000)) for k in ("graphics", "sm", "memory", "video")
        }
    _put(clocks, "current", current)
    _put(entry, "clocks", clocks)

    reasons: dict[str, Any] = {}
    if gpu.clock_events.supported:
        reasons["supported"] = list(gpu.clock_events.supported)
    if gpu.clock_events.supported or gpu.clock_events.active:
        reasons["active"] = list(gpu.clock_events.active)
    _put(entry, "clock_event_reasons", reasons)
    _put(entry, "performance_state", gpu.performance_state)

    if gpu.fan_speed is not None:
        entry["fans"] = {"count": 1, "speed": round(gpu.fan_speed, 4)}
    elif model is None:
        entry["fans"] = {"count": 0}

    ecc: dict[str, Any] = {}
    if gpu.ecc.mode_current is None and gpu.ecc.mode_pending is None:
        if model is None:
            ecc["supported"] = False
    else:
        _put(ecc, "enabled", gpu.ecc.mode_current)
        _put(ecc, "pending", gpu.ecc.mode_pending)
        for key in (
            "corrected_volatile",
            "uncorrected_volatile",
            "corrected_aggregate",
            "uncorrected_aggregate",
        ):
            _put(ecc, key, getattr(gpu.ecc, key))
    _put(entry, "ecc", ecc)

    rows: dict[str, Any] = {}
    _put(rows, "correctable", gpu.remapped_rows.correctable)
    _put(rows, "uncorrectable", gpu.remapped_rows.uncorrectable)
    _put(rows, "pending", gpu.remapped_rows.pending)
    _put(rows, "failed", gpu.remapped_rows.failed)
    _put(entry, "remapped_rows", rows)

    pcie: dict[str, Any] = {}
    _put(pcie, "generation", gpu.pcie.link_generation)
    _put(pcie, "width", gpu.pcie.link_width)
    _put(pcie, "replay_counter", gpu.pcie.replay_errors)
    if model is not None or ("generation" in pcie and "width" in pcie):
        _put(entry, "pcie", pcie)
    if gpu.gpm is not None:
        entry["gpm"] = True

    if gpu.mig_mode_current or gpu.mig_mode_pending or gpu.mig_instances:
        _mig(gpu, index, entry, model)

    processes: dict[int, dict[str, Any]] = {}
    for p in gpu.processes or ():
        if gpu.mig_mode_current and p.gpu_instance_id is None:
            continue  # a MIG process the snapshot could not place in an instance
        if p.pid in processes:
            kinds = {processes[p.pid]["type"], p.kind}
            if kinds == {"compute", "graphics"}:
                processes[p.pid]["type"] = "compute+graphics"
            continue
        proc: dict[str, Any] = {"pid": p.pid, "type": p.kind}
        _put(proc, "name", p.name)
        _put(proc, "memory", p.used_memory_bytes)
        util: dict[str, Any] = {}
        _put(util, "sm", _ratio(p.sm_utilization))
        _put(util, "memory", _ratio(p.memory_utilization))
        _put(util, "encoder", _ratio(p.encoder_utilization))
        _put(util, "decoder", _ratio(p.decoder_utilization))
        _put(proc, "utilization", util)
        if gpu.mig_mode_current:
            _put(proc, "gpu_instance", p.gpu_instance_id)
            _put(proc, "compute_instance", p.compute_instance_id)
        processes[p.pid] = proc
    _put(entry, "processes", list(processes.values()))

    xids: list[dict[str, Any]] = []
    for xid, count in sorted(gpu.xid_errors.items()):
        xids.extend({"at": float(1 + n), "xid": int(xid)} for n in range(min(count, 10)))
    _put(entry, "xid_events", xids)
    return entry


def scenario_from_snapshot(snapshot: Snapshot, name: str = "recorded") -> dict[str, Any]:
    """A scenario dict (loadable once dumped) that reproduces ``snapshot`` as constants."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(snapshot.timestamp))
    driver: dict[str, Any] = {}
    _put(driver, "version", snapshot.driver.driver_version)
    _put(driver, "nvml_version", snapshot.driver.nvml_version)
    _put(driver, "cuda_driver_version", snapshot.driver.cuda_driver_version)
    registry.load_modules()  # the extensions register their record hooks on import
    gpus = [_gpu_entry(gpu, i) for i, gpu in enumerate(snapshot.gpus)]
    for gpu, entry in zip(snapshot.gpus, gpus, strict=True):
        for hook in RECORD_HOOKS:
            hook(gpu, entry, snapshot)
    version = snapshot.driver.driver_version or "unknown"
    doc: dict[str, Any] = {
        "name": name,
        "description": f"Recorded {when}: {len(gpus)} GPU(s), driver {version}",
        "seed": 0,
    }
    _put(doc, "driver", driver)
    doc["gpus"] = gpus
    down = [i for i, gpu in enumerate(snapshot.gpus) if not gpu.up]
    if down:
        doc["faults"] = [{"kind": "gpu_lost", "gpus": down}]
    return doc


def dump_scenario(d: dict[str, Any]) -> str:
    header = "# Recorded by `vgpumon record`; UUIDs and serial numbers are masked.\n"
    return header + yaml.safe_dump(
        d, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100
    )
