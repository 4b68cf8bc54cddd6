"""`vgpumon record` on vGPU hosts and guests: the recorded scenario replays the same vGPU inventory.

Each built-in vGPU scenario is sampled on a manual clock, masked, recorded, loaded back (it must
validate), replayed the same way, and the two snapshots compared.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.registry import enabled_readers
from vgpumon.commands.record import mask
from vgpumon.model import Gpu, Snapshot
from vgpumon.sim import load_scenario, parse_scenario
from vgpumon.sim.record import dump_scenario, scenario_from_snapshot
from vgpumon.sim.scenario_specs import Scenario
from vgpumon.testing import sim_host

STEP = 2.0  # seconds between the two cycles of a snapshot
SCENARIOS = ["kvm-vgpu-timesliced", "h100-mig-backed-vgpu", "vgpu-guest", "vgpu-license-expiry"]


async def _snapshot(scenario: str | Scenario) -> Snapshot:
    """Two cycles 2 s apart on a manual clock (the second has utilization samples)."""
    host = sim_host(scenario, readers=enabled_readers(SamplerConfig()))
    try:
        await host.cycle()
        host.advance(STEP)
        return await host.cycle()
    finally:
        host.close()


def _inventory(gpu: Gpu, now: float) -> dict[str, Any]:
    """What a replay must reproduce (expiry dates as seconds from the snapshot, to the second)."""
    sched = [(s.policy, s.arr_enabled, s.timeslice_seconds) for s in gpu.vgpu_schedulers]
    return {
        "mode": (gpu.virtualization_mode, gpu.host_vgpu_mode, gpu.vgpu_heterogeneous_mode),
        "count": len(gpu.vgpu_instances),
        "types": sorted(v.type_name or "" for v in gpu.vgpu_instances),
        "supported": sorted((t.name or "", t.framebuffer_bytes) for t in gpu.vgpu_types),
        "fb_total": sum(v.framebuffer_total_bytes or 0 for v in gpu.vgpu_instances),
        "fb_used": sum(v.framebuffer_used_bytes or 0 for v in gpu.vgpu_instances),
        "vm_id_types": sorted(v.vm_id_type or "" for v in gpu.vgpu_instances),
        "licenses": sorted(
            (
                v.vgpu_id,
                v.license.state,
                v.license.licensed,
                v.license.expiry_status,
                None
                if v.license.expiry_timestamp_seconds is None
                else round(v.license.expiry_timestamp_seconds - now),
            )
            for v in gpu.vgpu_instances
        ),
        "instances": sorted(
            (
                v.vgpu_id,
                v.gpu_instance_id,
                v.placement_id,
                v.guest_driver_version,
                v.frame_rate_limit,
                v.ecc_enabled,
                v.accounting_enabled,
                v.accounting_pids,
                v.encoder_sessions,
                v.fbc_sessions,
            )
            for v in gpu.vgpu_instances
        ),
        "processes": sorted((p.vgpu_id, p.pid, p.name) for p in gpu.vgpu_processes),
        "scheduler": sched,
        "guest": (
            gpu.guest_license_supported,
            [
                (
                    f.feature,
                    f.state,
                    f.enabled,
                    f.product_name,
                    f.expiry_status,
                    None
                    if f.expiry_timestamp_seconds is None
                    else round(f.expiry_timestamp_seconds - now),
                )
                for f in gpu.guest_licenses
            ],
        ),
        "memory_used": gpu.memory.used_bytes,
    }


def _utilization(gpu: Gpu) -> dict[int, tuple[float | None, ...]]:
    return {
        v.vgpu_id: (
            v.utilization.sm,
            v.utilization.memory,
            v.utilization.encoder,
            v.utilization.decoder,
        )
        for v in gpu.vgpu_instances
    }


@pytest.mark.parametrize("name", SCENARIOS)
async def test_recorded_vgpu_scenario_replays_the_inventory(name: str) -> None:
    original = await _snapshot(name)
    assert any(g.vgpu_instances or g.guest_licenses for g in original.gpus)
    text = dump_scenario(scenario_from_snapshot(mask(original), name=f"recorded-{name}"))
    doc = yaml.safe_load(text)
    vgpu_gpus = [g for g in doc["gpus"] if "vgpu" in g]
    guest_gpus = [g for g in doc["gpus"] if "guest" in g]
    assert vgpu_gpus or guest_gpus

    replayed = await _snapshot(parse_scenario(text, f"recorded-{name}.yaml"))
    assert len(replayed.gpus) == len(original.gpus)
    # The recording is the replay's t = 0, and the replay is sampled STEP seconds into it: an
    # expiry recorded as "in N s" reads N s after the replay's start.
    replay_start = replayed.timestamp - STEP
    for before, after in zip(original.gpus, replayed.gpus, strict=True):
        assert _inventory(after, replay_start) == _inventory(before, original.timestamp)
        util_before, util_after = _utilization(before), _utilization(after)
        assert util_after.keys() == util_before.keys()
        for vgpu_id, values in util_before.items():
            for a, b in zip(values, util_after[vgpu_id], strict=True):
                assert (a is None) == (b is None), (vgpu_id, values, util_after[vgpu_id])
                if a is not None and b is not None:
                    assert abs(a - b) <= 0.01, (vgpu_id, values, util_after[vgpu_id])


@pytest.mark.parametrize("name", SCENARIOS)
async def test_recorded_vgpu_scenario_keeps_identities_masked(name: str) -> None:
    original = await _snapshot(name)
    text = dump_scenario(scenario_from_snapshot(original))  # not masked first: the hook masks
    spec = load_scenario(name)
    for g in original.gpus:
        for v in g.vgpu_instances:
            for value in (v.uuid, v.mdev_uuid, v.vm_id):
                if value is not None and len(value) > 4:
                    assert value not in text
        assert g.uuid not in text
    for gpu_spec in spec.gpus:
        for inst in (gpu_spec.extra.get("vgpu") or {}).get("instances", []):
            if "vm_id" in inst:
                assert inst["vm_id"] not in text
    # The same placeholders as `mask`, so recording a masked snapshot changes nothing.
    assert text == dump_scenario(scenario_from_snapshot(mask(original)))


async def test_license_expiry_is_kept_relative_to_the_recording() -> None:
    original = await _snapshot("vgpu-license-expiry")
    doc = scenario_from_snapshot(mask(original))
    licenses = {i["id"]: i.get("license") for i in doc["gpus"][0]["vgpu"]["instances"]}
    assert licenses[32] == {"state": "licensed", "expires": f"{24 * 3600 - 2}s"}
    assert licenses[33] == "licensed"
    assert 35 not in licenses or licenses[35] is None  # guest driver not loaded: no license data
    inst35 = next(i for i in doc["gpus"][0]["vgpu"]["instances"] if i["id"] == 35)
    assert inst35["guest_driver"] is None


async def test_time_sliced_memory_is_not_counted_twice() -> None:
    original = await _snapshot("kvm-vgpu-timesliced")
    doc = scenario_from_snapshot(mask(original))
    held = sum(v.framebuffer_total_bytes or 0 for v in original.gpus[0].vgpu_instances)
    assert doc["gpus"][0]["memory"]["used"] == (original.gpus[0].memory.used_bytes or 0) - held
