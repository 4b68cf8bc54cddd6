"""From parsed scenario data to a :class:`~vgpumon.sim.scenario_specs.Scenario`.

Each GPU is merged over its model preset, ``count`` expanded, deterministic identities assigned,
and what only makes sense across keys checked (MIG placements, process ownership, fault targets),
citing the file line of the offending key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import Any

import pynvml

from vgpumon.sim import registry
from vgpumon.sim.faults import build_faults
from vgpumon.sim.models import MODELS
from vgpumon.sim.patterns import PatternSpec
from vgpumon.sim.scenario_keys import (
    ARCHITECTURES,
    BRANDS,
    CORE_GPU_KEYS,
    CORE_TOP_KEYS,
    DEFAULT_DRIVER_VERSION,
    GPU_ENTRY,
    MAX_MIG_DEVICES,
    MIB,
    REALISTIC_LATENCY,
    parse_bus_id,
)
from vgpumon.sim.scenario_specs import (
    ComputeInstanceSpec,
    DriverSpec,
    GpuInstanceSpec,
    GpuSpec,
    MigProfile,
    ProcessSpec,
    Scenario,
    XidSpec,
)
from vgpumon.sim.schema import Ctx, join, node_of


def _hex(seed: int, *salt: object, digits: int) -> str:
    data = "|".join(str(s) for s in (seed, *salt)).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()[:digits]


def derived_uuid(prefix: str, seed: int, *salt: object) -> str:
    h = _hex(seed, *salt, digits=32)
    return f"{prefix}-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def derived_serial(seed: int, index: int) -> str:
    digits = str(int(_hex(seed, "serial", index, digits=16), 16))
    return ("1" + digits)[:13]


# Bus numbers of an 8-GPU HGX board, then a simple sequence for larger hosts.
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


# Beyond eight GPUs: the free bus numbers from 0x10 up (0x10 + index collided with the HGX ones).
_MORE_BUSES = tuple(b for b in range(0x10, 0x100) if b not in _HGX_BUSES)


def derived_bus_id(index: int) -> str:
    if index < len(_HGX_BUSES):
        bus = _HGX_BUSES[index]
    else:
        bus = _MORE_BUSES[(index - len(_HGX_BUSES)) % len(_MORE_BUSES)]
    return f"00000000:{bus:02X}:00.0"


def normalized_bus_id(value: str) -> str:
    parsed = parse_bus_id(value)
    if parsed is None:
        raise ValueError(value)
    domain, bus, device, fn = parsed
    return f"{domain:08X}:{bus:02X}:{device:02X}.{fn:X}"


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


_PRESETS: dict[str, dict[str, Any]] = {}


def preset(model: str) -> dict[str, Any]:
    """A model preset as parsed scenario data (parsed once, through the GPU schema)."""
    if model not in _PRESETS:
        ctx = Ctx(f"(model {model})")
        _PRESETS[model] = GPU_ENTRY.parse(node_of(MODELS[model]), "model", ctx)
    return _PRESETS[model]


def _profile(d: dict[str, Any]) -> MigProfile:
    return MigProfile(
        index=d["index"],
        id=d["id"],
        name=d["name"][4:] if d["name"].startswith("MIG ") else d["name"],
        slices=d["slices"],
        instances=d["instances"],
        sm_count=d["sm_count"],
        copy_engines=d.get("copy_engines", 0),
        decoders=d.get("decoders", 0),
        encoders=d.get("encoders", 0),
        jpeg=d.get("jpeg", 0),
        ofa=d.get("ofa", 0),
        memory_bytes=d["memory"],
        placements=tuple((p[0], p[1]) for p in d["placements"]),
    )


def ci_placements(gi_slices: int, ci_slices: int) -> list[int]:
    """Where a compute instance of ``ci_slices`` may start inside a GPU instance."""
    if ci_slices == gi_slices:
        return [0]
    if ci_slices > gi_slices or not (
        ci_slices in (1, 2) or (gi_slices == 7 and ci_slices in (3, 4))
    ):
        return []
    return list(range(0, gi_slices - ci_slices + 1, ci_slices))


def ci_name(gi: MigProfile, slices: int) -> str:
    return gi.name if slices == gi.slices else f"{slices}c.{gi.name}"


def _find_profile(profiles: tuple[MigProfile, ...], ref: str | int) -> MigProfile | None:
    for p in profiles:
        if isinstance(ref, int) and p.id == ref:
            return p
        if isinstance(ref, str):
            name = ref[4:] if ref.startswith("MIG ") else ref
            if p.name == name:
                return p
    return None


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _claim(
    wanted: int | None,
    used: set[int],
    first: int,
    ctx: Ctx,
    path: str,
    what: str,
    reserved: Collection[int | None] = (),
) -> int:
    """An id for a new entry: ``wanted`` unless another entry has it, else (when none is given)
    the lowest from ``first`` that is neither used nor ``reserved`` for a later entry."""
    if wanted is None:
        wanted = first
        while wanted in used or wanted in reserved:
            wanted += 1
    elif wanted in used:
        raise ctx.error_at(path, f"{what} {wanted} is used twice")
    used.add(wanted)
    return wanted


def _build_mig(
    d: dict[str, Any], profiles: tuple[MigProfile, ...], seed: int, index: int, path: str, ctx: Ctx
) -> tuple[GpuInstanceSpec, ...]:
    taken: list[tuple[int, int]] = []
    used_ids: set[int] = set()
    used_mig_indexes: set[int] = set()
    compute_slices = 0
    wanted_indexes = [
        c.get("mig_index")
        for raw_gi in d.get("instances", [])
        for c in raw_gi.get("compute_instances", [])
        if isinstance(c, dict) and "mig_index" in c
    ]
    gis: list[GpuInstanceSpec] = []
    for i, g in enumerate(d.get("instances", [])):
        gpath = f"{path}.mig.instances[{i}]"
        profile = _find_profile(profiles, g["profile"])
        if profile is None:
            names = ", ".join(p.name for p in profiles)
            raise ctx.error_at(
                join(gpath, "profile"), f"unknown profile {g['profile']!r}; this GPU has: {names}"
            )
        same = sum(1 for gi in gis if gi.profile.id == profile.id)
        if same >= profile.instances:
            raise ctx.error_at(
                join(gpath, "profile"), f"at most {profile.instances} instances of {profile.name}"
            )
        if "placement" in g:
            placement = next((p for p in profile.placements if p[0] == g["placement"]), None)
            if placement is None:
                options = ", ".join(str(p[0]) for p in profile.placements)
                raise ctx.error_at(
                    join(gpath, "placement"), f"{profile.name} can start at slice {options}"
                )
            if any(_overlaps(placement, t) for t in taken):
                raise ctx.error_at(join(gpath, "placement"), "overlaps another GPU instance")
        else:
            placement = next(
                (p for p in profile.placements if not any(_overlaps(p, t) for t in taken)), None
            )
            if placement is None:
                raise ctx.error_at(
                    join(gpath, "profile"), f"no free placement left for {profile.name}"
                )
        taken.append(placement)
        compute_slices += profile.slices
        if compute_slices > 7:
            raise ctx.error_at(
                join(gpath, "profile"), "the GPU instances need more than 7 compute slices"
            )
        gi_id = _claim(g.get("id"), used_ids, 1, ctx, join(gpath, "id"), "GPU instance id")
        cis = []
        ci_taken: list[tuple[int, int]] = []
        ci_ids: set[int] = set()
        raw_cis = g.get("compute_instances", [profile.slices])
        for j, c in enumerate(raw_cis):
            cpath = f"{gpath}.compute_instances[{j}]"
            c = {"slices": c} if isinstance(c, int) else c
            slices = c.get("slices", profile.slices)
            starts = ci_placements(profile.slices, slices)
            if not starts:
                raise ctx.error_at(
                    cpath,
                    f"a {slices}-slice compute instance does not fit a {profile.name} instance",
                )
            if "placement" in c:
                # An explicit start is trusted when it fits (recorded layouts come from real
                # drivers); the aligned starts are only what the simulator offers by itself.
                if c["placement"] + slices > profile.slices:
                    raise ctx.error_at(
                        join(cpath, "placement"),
                        f"a {slices}-slice compute instance starting at {c['placement']} "
                        f"does not fit in {profile.slices} slices",
                    )
                start = c["placement"]
                if any(_overlaps((start, slices), t) for t in ci_taken):
                    raise ctx.error_at(
                        join(cpath, "placement"), "overlaps another compute instance"
                    )
            else:
                free = [s for s in starts if not any(_overlaps((s, slices), t) for t in ci_taken)]
                if not free:
                    raise ctx.error_at(
                        cpath, f"no free compute slices left in {profile.name} instance {gi_id}"
                    )
                start = free[0]
            ci_taken.append((start, slices))
            ci_id = _claim(c.get("id"), ci_ids, 0, ctx, join(cpath, "id"), "compute instance id")
            mig_index = _claim(
                c.get("mig_index"),
                used_mig_indexes,
                0,
                ctx,
                join(cpath, "mig_index"),
                "MIG device index",
                reserved=wanted_indexes,
            )
            cis.append(
                ComputeInstanceSpec(
                    id=ci_id,
                    slices=slices,
                    placement=start,
                    mig_index=mig_index,
                    uuid=c.get("uuid") or derived_uuid("MIG", seed, "mig", index, gi_id, ci_id),
                    load=c.get("load"),
                )
            )
        gis.append(
            GpuInstanceSpec(
                id=gi_id,
                profile=profile,
                placement=placement[0],
                path=gpath,
                compute_instances=tuple(cis),
                memory_used=g.get("memory_used"),
                load=g.get("load", {}),
            )
        )
    if len(used_mig_indexes) > MAX_MIG_DEVICES or any(
        i >= MAX_MIG_DEVICES for i in used_mig_indexes
    ):
        raise ctx.error_at(
            f"{path}.mig.instances", f"at most {MAX_MIG_DEVICES} MIG devices, indexed 0–6"
        )
    return tuple(gis)


def _require_core(merged: dict[str, Any], path: str, ctx: Ctx) -> None:
    """The keys a GPU needs from its model or its entry: memory, identity, power and clocks."""
    memory = merged.get("memory", {})
    power = merged.get("power", {})
    clocks = merged.get("clocks", {})
    if "total" not in memory:
        raise ctx.error_at(f"{path}.memory.total", "required (or set a model)")
    for key in ("name", "architecture", "sm_count"):
        if key not in merged:
            raise ctx.error_at(join(path, key), "required (or set a model)")
    if "limit" not in power:
        raise ctx.error_at(f"{path}.power.limit", "required (or set a model)")
    if "max" not in clocks:
        raise ctx.error_at(f"{path}.clocks.max", "required (or set a model)")


def _mig_layout(
    merged: dict[str, Any], index: int, path: str, seed: int, ctx: Ctx
) -> tuple[tuple[MigProfile, ...], bool, tuple[GpuInstanceSpec, ...]]:
    """The GPU's MIG profiles, whether MIG is on, and its GPU instances (none while it is off)."""
    mig = merged.get("mig", {})
    profiles = tuple(_profile(p) for p in merged.get("mig_profiles", []))
    mig_enabled = bool(mig.get("enabled", False))
    if (mig_enabled or mig.get("pending") or mig.get("instances")) and not profiles:
        raise ctx.error_at(
            f"{path}.mig", "this GPU has no MIG profiles (use a MIG-capable model or mig_profiles)"
        )
    if mig.get("instances") and not mig_enabled:
        raise ctx.error_at(f"{path}.mig.instances", "GPU instances need mig.enabled: true")
    gis = _build_mig(mig, profiles, seed, index, path, ctx) if mig_enabled else ()
    if mig_enabled and "load" in merged:
        raise ctx.error_at(
            join(path, "load"), "not allowed with MIG enabled; put load on the GPU instances"
        )
    return profiles, mig_enabled, gis


def _build_processes(
    merged: dict[str, Any],
    gis: tuple[GpuInstanceSpec, ...],
    mig_enabled: bool,
    path: str,
    ctx: Ctx,
) -> tuple[ProcessSpec, ...]:
    """The GPU's processes: unique PIDs, each on an existing GPU/compute instance under MIG."""
    processes = []
    seen_pids: set[int] = set()
    for i, p in enumerate(merged.get("processes", [])):
        ppath = f"{path}.processes[{i}]"
        if p["pid"] in seen_pids:
            raise ctx.error_at(join(ppath, "pid"), f"pid {p['pid']} appears twice on this GPU")
        seen_pids.add(p["pid"])
        gi_id, ci_id = p.get("gpu_instance"), p.get("compute_instance")
        if mig_enabled:
            if gi_id is None:
                raise ctx.error_at(ppath, "with MIG enabled a process needs gpu_instance")
            gi = next((g for g in gis if g.id == gi_id), None)
            if gi is None:
                raise ctx.error_at(join(ppath, "gpu_instance"), f"no GPU instance {gi_id}")
            ci_id = 0 if ci_id is None else ci_id
            if not any(c.id == ci_id for c in gi.compute_instances):
                raise ctx.error_at(
                    join(ppath, "compute_instance"),
                    f"no compute instance {ci_id} in GPU instance {gi_id}",
                )
        elif gi_id is not None or ci_id is not None:
            key = "gpu_instance" if gi_id is not None else "compute_instance"
            raise ctx.error_at(join(ppath, key), "only for GPUs with MIG enabled")
        if "stop" in p and p["stop"] <= p.get("start", 0.0):
            raise ctx.error_at(join(ppath, "stop"), "must be later than start")
        processes.append(
            ProcessSpec(
                pid=p["pid"],
                name=p.get("name", f"process-{p['pid']}"),
                kind=p.get("type", "compute"),
                memory=p.get("memory", PatternSpec.constant(0)),
                utilization=p.get("utilization", {}),
                start=p.get("start", 0.0),
                stop=p.get("stop"),
                gpu_instance=gi_id,
                compute_instance=ci_id,
            )
        )
    return tuple(processes)


def _build_xid_events(
    merged: dict[str, Any], gis: tuple[GpuInstanceSpec, ...], path: str, ctx: Ctx
) -> tuple[XidSpec, ...]:
    """The scripted Xid events in time order; a GPU instance they name must exist."""
    xids = []
    for i, x in enumerate(merged.get("xid_events", [])):
        if "gpu_instance" in x and not any(g.id == x["gpu_instance"] for g in gis):
            raise ctx.error_at(
                f"{path}.xid_events[{i}].gpu_instance", f"no GPU instance {x['gpu_instance']}"
            )
        xids.append(XidSpec(x["at"], x["xid"], x.get("gpu_instance"), x.get("compute_instance")))
    return tuple(sorted(xids, key=lambda x: x.at))


def _unsupported_functions(merged: dict[str, Any], path: str, ctx: Ctx) -> frozenset[str]:
    """The pynvml functions this GPU answers NOT_SUPPORTED to; each must be a real one."""
    unsupported = merged.get("unsupported", [])
    for i, name in enumerate(unsupported):
        if not registry.is_pynvml_function(name):
            raise ctx.error_at(f"{path}.unsupported[{i}]", f"{name!r} is not a pynvml function")
    return frozenset(unsupported)


def _identity_fields(merged: dict[str, Any], index: int, seed: int) -> dict[str, Any]:
    """Name, derived or given identities (UUID, serial, PCI), architecture and modes."""
    cc = merged.get("compute_capability", "0.0").split(".")
    return dict(
        name=merged["name"],
        uuid=merged.get("uuid") or derived_uuid("GPU", seed, "gpu", index),
        serial=merged.get("serial") or derived_serial(seed, index),
        pci_bus_id=normalized_bus_id(merged["pci_bus_id"])
        if "pci_bus_id" in merged
        else derived_bus_id(index),
        pci_device_id=merged.get("pci_device_id", 0x10DE),
        pci_subsystem_id=merged.get("pci_subsystem_id", 0),
        minor_number=merged.get("minor_number", index),
        architecture=merged["architecture"],
        brand=merged.get("brand", BRANDS["nvidia"]),
        compute_capability=(int(cc[0]), int(cc[1])),
        sm_count=merged["sm_count"],
        vbios_version=merged.get("vbios_version", "96.00.00.00.01"),
        board_part_number=merged.get("board_part_number", "000-00000-0000-000"),
        virtualization_mode=merged.get("virtualization_mode", 0),
        persistence_mode=merged.get("persistence_mode", True),
        compute_mode=merged.get("compute_mode", 0),
    )


def _memory_power_fields(merged: dict[str, Any]) -> dict[str, Any]:
    """Memory and BAR1 sizes, the load pattern, power draw and limits (defaults from the limit)."""
    memory = merged.get("memory", {})
    power = merged.get("power", {})
    limit = float(power["limit"])
    return dict(
        memory_total=memory["total"],
        memory_reserved=memory.get("reserved", 0),
        memory_used=memory.get("used"),
        bar1_total=memory.get("bar1_total", 256 * MIB),
        bar1_used=memory.get("bar1_used", PatternSpec.constant(3 * MIB)),
        load=merged.get("load", {}),
        power_draw=power.get("draw"),
        power_idle=float(power.get("idle", limit * 0.1)),
        power_max_draw=float(power.get("max_draw", limit * 0.95)),
        power_limit=limit,
        power_default_limit=float(power.get("default_limit", limit)),
        power_min_limit=float(power.get("min_limit", limit)),
        power_max_limit=float(power.get("max_limit", limit)),
        power_enforced_limit=float(power.get("enforced_limit", limit)),
    )


def _thermal_clock_fields(merged: dict[str, Any]) -> dict[str, Any]:
    """Temperatures and thresholds, clocks (idle defaults to max), clock reasons, P-state, fans."""
    temperature = merged.get("temperature", {})
    clocks = merged.get("clocks", {})
    reasons = merged.get("clock_event_reasons", {})
    fans = merged.get("fans", {})
    clocks_max = {
        k: float(clocks["max"].get(k, 0.0)) for k in ("graphics", "sm", "memory", "video")
    }
    clocks_idle = {
        k: float(clocks.get("idle", clocks["max"]).get(k, clocks_max[k])) for k in clocks_max
    }
    return dict(
        temp_gpu=temperature.get("gpu"),
        temp_memory=temperature.get("memory"),
        temp_idle=float(temperature.get("idle", 30.0)),
        temp_load=float(temperature.get("load", 70.0)),
        temp_thresholds={
            "shutdown": float(temperature.get("shutdown", 92.0)),
            "slowdown": float(temperature.get("slowdown", 89.0)),
            "gpu_max": float(temperature.get("gpu_max", 87.0)),
            "memory_max": float(temperature.get("memory_max", 95.0)),
        },
        clocks_max=clocks_max,
        clocks_idle=clocks_idle,
        clocks_current=clocks.get("current", {}),
        clock_reasons_supported=reasons.get("supported", 0x1FF),
        clock_reasons_active=reasons.get("active"),
        performance_state=merged.get("performance_state", PatternSpec.constant(0)),
        fan_count=fans.get("count", 0),
        fan_speed=fans.get("speed", PatternSpec.constant(0.3)),
    )


def _health_link_fields(merged: dict[str, Any]) -> dict[str, Any]:
    """ECC state and counts, remapped rows, PCIe link, NVLink, GPM and event support."""
    ecc = merged.get("ecc", {})
    rows = merged.get("remapped_rows", {})
    pcie = merged.get("pcie", {})
    hist = rows.get("histogram", {})
    ecc_enabled = bool(ecc.get("enabled", True))
    return dict(
        ecc_supported=bool(ecc.get("supported", True)),
        ecc_enabled=ecc_enabled,
        ecc_pending=bool(ecc.get("pending", ecc_enabled)),
        ecc_counts={
            k: int(ecc.get(k, 0))
            for k in (
                "corrected_volatile",
                "uncorrected_volatile",
                "corrected_aggregate",
                "uncorrected_aggregate",
            )
        },
        remapped_rows=(
            int(rows.get("correctable", 0)),
            int(rows.get("uncorrectable", 0)),
            int(bool(rows.get("pending", False))),
            int(bool(rows.get("failed", False))),
        ),
        row_histogram=(
            hist.get("max", 3072),
            hist.get("high", 0),
            hist.get("partial", 0),
            hist.get("low", 0),
            hist.get("none", 0),
        ),
        pcie={
            "generation": pcie.get("generation", 4),
            "width": pcie.get("width", 16),
            "max_generation": pcie.get("max_generation", pcie.get("generation", 4)),
            "max_width": pcie.get("max_width", pcie.get("width", 16)),
            "replay_counter": pcie.get("replay_counter", 0),
        },
        nvlink_links=merged.get("nvlink_links", 0),
        nvlink=dict(merged.get("nvlink", {})),
        gpm_supported=bool(merged.get("gpm", merged["architecture"] >= ARCHITECTURES["hopper"])),
        supported_event_types=merged.get("supported_event_types", pynvml.nvmlEventTypeAll),
    )


def _build_gpu(merged: dict[str, Any], index: int, path: str, seed: int, ctx: Ctx) -> GpuSpec:
    """One GPU entry (merged over its model) checked and turned into a :class:`GpuSpec`."""
    _require_core(merged, path, ctx)
    profiles, mig_enabled, gis = _mig_layout(merged, index, path, seed, ctx)
    processes = _build_processes(merged, gis, mig_enabled, path, ctx)
    xid_events = _build_xid_events(merged, gis, path, ctx)
    unsupported = _unsupported_functions(merged, path, ctx)
    return GpuSpec(
        index=index,
        path=path,
        model=merged.get("model"),
        **_identity_fields(merged, index, seed),
        **_memory_power_fields(merged),
        **_thermal_clock_fields(merged),
        **_health_link_fields(merged),
        mig_profiles=profiles,
        mig_enabled=mig_enabled,
        mig_pending=bool(merged.get("mig", {}).get("pending", mig_enabled)),
        gpu_instances=gis,
        processes=processes,
        xid_events=xid_events,
        unsupported=unsupported,
        extra={k: v for k, v in merged.items() if k not in CORE_GPU_KEYS},
    )


def build_scenario(
    doc: dict[str, Any], ctx: Ctx, default_name: str, source: str, text: str
) -> Scenario:
    seed = doc.get("seed", 0)
    gpus: list[GpuSpec] = []
    for i, entry in enumerate(doc["gpus"]):
        path = f"gpus[{i}]"
        merged = _merge(preset(entry["model"]), entry) if "model" in entry else entry
        for _ in range(entry.get("count", 1)):
            gpus.append(_build_gpu(merged, len(gpus), path, seed, ctx))
    for key, label in (("uuid", "UUID"), ("pci_bus_id", "PCI bus id"), ("serial", "serial")):
        seen: dict[str, int] = {}
        for g in gpus:
            value = getattr(g, key)
            if value in seen:
                raise ctx.error_at(
                    join(g.path, key), f"{label} {value} is used by GPU {seen[value]} too"
                )
            seen[value] = g.index
    raw_driver = doc.get("driver", {})
    version = raw_driver.get("version", DEFAULT_DRIVER_VERSION)
    cuda = raw_driver.get("cuda_driver_version", 13000)
    driver = DriverSpec(
        version=version,
        nvml_version=raw_driver.get("nvml_version", f"{cuda // 1000}.{version}"),
        cuda_driver_version=cuda,
        branch=raw_driver.get(
            "branch",
            "r582_49" if version == DEFAULT_DRIVER_VERSION else f"r{version.split('.')[0]}_00",
        ),
        gpm_max_metric_id=raw_driver.get("gpm_max_metric_id", 210),
    )
    latency = doc.get("latency", "none")
    if latency == "none":
        latency = {}
    elif latency == "realistic":
        latency = dict(REALISTIC_LATENCY)
    scenario = Scenario(
        name=doc.get("name", default_name),
        description=doc.get("description", ""),
        seed=seed,
        privileged=doc.get("privileged", True),
        driver=driver,
        gpus=tuple(gpus),
        faults=tuple(build_faults(doc.get("faults", []), len(gpus), ctx)),
        latency=latency,
        source=source,
        text=text,
        extra={k: v for k, v in doc.items() if k not in CORE_TOP_KEYS},
    )
    for check in registry.SCENARIO_CHECKS:
        check(scenario, ctx)
    return scenario
