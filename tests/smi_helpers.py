"""Field-by-field comparison of the NVML path and the agentless (nvidia-smi XML) path.

Shared by the parser test (tests/smi) and the SSH tests (tests/sources, tests/commands). nvidia-smi
prints values rounded to its units (integer MiB, MHz, percent, degrees; watts to 0.01), so the
NVML value is rounded the same way before comparing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable
from typing import Any

from vgpumon import sim
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.registry import every_cycle
from vgpumon.collect.sampler import Sampler
from vgpumon.model import Gpu, Snapshot, VgpuInstance
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim.clock import ManualClock
from vgpumon.sim.smi_xml import device_report, vgpu_report
from vgpumon.smi import parse_reports

MIB = 1024 * 1024


def mib(x: Any) -> Any:
    return None if x is None else x // MIB


def mhz(x: Any) -> Any:
    return None if x is None else math.floor(x / 1e6)


def pct(x: Any) -> Any:
    return None if x is None else math.floor(round(x * 100, 6))


def whole(x: Any) -> Any:
    return None if x is None else math.floor(x)


def centi(x: Any) -> Any:
    return None if x is None else round(x, 2)


def same(x: Any) -> Any:
    return x


# Every physical-GPU field nvidia-smi -q -x reports, with the rounding of its printed form.
GPU_FIELDS: dict[str, Callable[[Gpu], Any]] = {
    "index": lambda g: g.index,
    "uuid": lambda g: g.uuid,
    "name": lambda g: g.name,
    "pci_bus_id": lambda g: g.pci_bus_id,
    "serial": lambda g: g.serial,
    "brand": lambda g: g.brand,
    "architecture": lambda g: g.architecture,
    "virtualization_mode": lambda g: g.virtualization_mode,
    "host_vgpu_mode": lambda g: g.host_vgpu_mode,
    "vgpu_heterogeneous_mode": lambda g: g.vgpu_heterogeneous_mode,
    "mig_mode_current": lambda g: g.mig_mode_current,
    "mig_mode_pending": lambda g: g.mig_mode_pending,
    "persistence_mode": lambda g: g.persistence_mode,
    "compute_mode": lambda g: g.compute_mode,
    "utilization.gpu": lambda g: pct(g.utilization.gpu),
    "utilization.memory": lambda g: pct(g.utilization.memory),
    "utilization.encoder": lambda g: pct(g.utilization.encoder),
    "utilization.decoder": lambda g: pct(g.utilization.decoder),
    "memory.total_bytes": lambda g: mib(g.memory.total_bytes),
    "memory.used_bytes": lambda g: mib(g.memory.used_bytes),
    "memory.free_bytes": lambda g: mib(g.memory.free_bytes),
    "memory.reserved_bytes": lambda g: mib(g.memory.reserved_bytes),
    "bar1_memory.total_bytes": lambda g: mib(g.bar1_memory.total_bytes),
    "bar1_memory.used_bytes": lambda g: mib(g.bar1_memory.used_bytes),
    "bar1_memory.free_bytes": lambda g: mib(g.bar1_memory.free_bytes),
    "power_watts": lambda g: centi(g.power_watts),
    "power_limit_watts": lambda g: centi(g.power_limit_watts),
    "temperatures.gpu_celsius": lambda g: whole(g.temperatures.gpu_celsius),
    "temperatures.memory_celsius": lambda g: whole(g.temperatures.memory_celsius),
    "clocks.graphics_hertz": lambda g: mhz(g.clocks.graphics_hertz),
    "clocks.sm_hertz": lambda g: mhz(g.clocks.sm_hertz),
    "clocks.memory_hertz": lambda g: mhz(g.clocks.memory_hertz),
    "clocks.video_hertz": lambda g: mhz(g.clocks.video_hertz),
    "max_clocks.graphics_hertz": lambda g: mhz(g.max_clocks.graphics_hertz),
    "max_clocks.sm_hertz": lambda g: mhz(g.max_clocks.sm_hertz),
    "max_clocks.memory_hertz": lambda g: mhz(g.max_clocks.memory_hertz),
    "max_clocks.video_hertz": lambda g: mhz(g.max_clocks.video_hertz),
    "clock_events.supported": lambda g: sorted(g.clock_events.supported),
    "clock_events.active": lambda g: sorted(g.clock_events.active),
    "performance_state": lambda g: g.performance_state,
    "fan_speed": lambda g: pct(g.fan_speed),
    "ecc.mode_current": lambda g: g.ecc.mode_current,
    "ecc.mode_pending": lambda g: g.ecc.mode_pending,
    "ecc.corrected_volatile": lambda g: g.ecc.corrected_volatile,
    "ecc.uncorrected_volatile": lambda g: g.ecc.uncorrected_volatile,
    "ecc.corrected_aggregate": lambda g: g.ecc.corrected_aggregate,
    "ecc.uncorrected_aggregate": lambda g: g.ecc.uncorrected_aggregate,
    "remapped_rows": lambda g: dataclasses.astuple(g.remapped_rows),
    "pcie.link_generation": lambda g: g.pcie.link_generation,
    "pcie.link_width": lambda g: g.pcie.link_width,
    "pcie.replay_errors": lambda g: g.pcie.replay_errors,
    "processes": lambda g: (
        None
        if g.processes is None
        else sorted(
            (p.pid, p.name, mib(p.used_memory_bytes), p.gpu_instance_id, p.compute_instance_id)
            for p in g.processes
        )
    ),
    # nvidia-smi prints the enabled licensable feature of a vGPU guest.
    "guest_licenses": lambda g: [
        (f.feature, f.licensed, f.product_name, f.state, f.expiry_timestamp_seconds)
        for f in g.guest_licenses
        if f.enabled
    ],
    "mig_instances": lambda g: [
        (
            gi.id,
            mib(gi.memory_total_bytes),
            mib(gi.memory_used_bytes),
            [(ci.id, ci.sm_count) for ci in gi.compute_instances],
        )
        for gi in sorted(g.mig_instances, key=lambda gi: gi.id)
    ],
}

# Every vGPU instance field nvidia-smi vgpu -q -x reports.
VGPU_FIELDS: dict[str, Callable[[VgpuInstance], Any]] = {
    "vgpu_id": lambda v: v.vgpu_id,
    "uuid": lambda v: v.uuid,
    "vm_id": lambda v: v.vm_id,
    "vm_id_type": lambda v: v.vm_id_type,
    "type_id": lambda v: v.type_id,
    "type_name": lambda v: v.type_name,
    "mdev_uuid": lambda v: v.mdev_uuid,
    "guest_driver_version": lambda v: v.guest_driver_version,
    "gpu_instance_id": lambda v: v.gpu_instance_id,
    "placement_id": lambda v: v.placement_id,
    "framebuffer_total_bytes": lambda v: mib(v.framebuffer_total_bytes),
    "framebuffer_used_bytes": lambda v: mib(v.framebuffer_used_bytes),
    "frame_rate_limit": lambda v: v.frame_rate_limit,
    "ecc_enabled": lambda v: v.ecc_enabled,
    "accounting_enabled": lambda v: v.accounting_enabled,
    "encoder_sessions": lambda v: v.encoder_sessions,
    "encoder_average_fps": lambda v: v.encoder_average_fps,
    "encoder_average_latency_seconds": lambda v: v.encoder_average_latency_seconds,
    "fbc_sessions": lambda v: v.fbc_sessions,
    "fbc_average_fps": lambda v: v.fbc_average_fps,
    "fbc_average_latency_seconds": lambda v: v.fbc_average_latency_seconds,
    "utilization.sm": lambda v: pct(v.utilization.sm),
    "utilization.memory": lambda v: pct(v.utilization.memory),
    "utilization.encoder": lambda v: pct(v.utilization.encoder),
    "utilization.decoder": lambda v: pct(v.utilization.decoder),
    "license.licensed": lambda v: v.license.licensed,
    "license.state": lambda v: v.license.state,
    "license.expiry_timestamp_seconds": lambda v: v.license.expiry_timestamp_seconds,
}

DRIVER_FIELDS: dict[str, Callable[[Snapshot], Any]] = {
    "driver_version": lambda s: s.driver.driver_version,
    "cuda_driver_version": lambda s: s.driver.cuda_driver_version,
}


def fields_of(snapshot: Snapshot) -> dict[str, Any]:
    out = {name: get(snapshot) for name, get in DRIVER_FIELDS.items()}
    for g in snapshot.gpus:
        for name, get in GPU_FIELDS.items():
            out[f"gpu{g.index}.{name}"] = get(g)
        for v in g.vgpu_instances:
            for name, vget in VGPU_FIELDS.items():
                out[f"gpu{g.index}.vgpu{v.vgpu_id}.{name}"] = vget(v)
        out[f"gpu{g.index}.vgpu_ids"] = sorted(v.vgpu_id for v in g.vgpu_instances)
    return out


def scenario_reports(name: str) -> tuple[Snapshot, str, str]:
    """(NVML-path snapshot, ``nvidia-smi -q -x``, ``nvidia-smi vgpu -q -x``) of one frozen instant
    of a built-in scenario, faults removed."""
    scenario = dataclasses.replace(sim.load_scenario(name), faults=())
    clock = ManualClock()
    nvml = sim.create(scenario, clock)
    session = NvmlSession(nvml, f"sim:{name}")
    session.init()
    sampler = Sampler(
        session, SamplerConfig(deadline_seconds=5.0, cadences=every_cycle()), clock=clock.now
    )
    try:
        via_nvml = asyncio.run(sampler.cycle())
        return via_nvml, device_report(nvml), vgpu_report(nvml)
    finally:
        sampler.close()


def both_paths(name: str) -> tuple[Snapshot, Snapshot]:
    via_nvml, device, vgpu = scenario_reports(name)
    return via_nvml, parse_reports(device, vgpu, timestamp=via_nvml.timestamp)


def differences(via_nvml: Snapshot, via_smi: Snapshot) -> dict[str, tuple[Any, Any]]:
    expected = fields_of(via_nvml)
    got = fields_of(via_smi)
    keys = expected.keys() | got.keys()
    return {k: (expected.get(k), got.get(k)) for k in sorted(keys) if expected.get(k) != got.get(k)}
