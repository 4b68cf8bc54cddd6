"""The readers, in the order they run for each GPU.

Order matters only in one way: ``device`` runs first, so later readers can see the GPU's
virtualization and MIG mode in the builder and skip calls that cannot apply.
"""

from __future__ import annotations

import importlib

from vgpumon.collect.base import DEFAULT_CADENCES, Reader, SamplerConfig

# Each module defines READERS: list[Reader]. One module per NVML area. ``mig`` runs before
# ``processes`` and ``gpm``, which use the MIG devices and GPU instances it found.
READER_MODULES = (
    "vgpumon.collect.device",
    "vgpumon.collect.memory",
    "vgpumon.collect.utilization",
    "vgpumon.collect.power",
    "vgpumon.collect.temperature",
    "vgpumon.collect.clocks",
    "vgpumon.collect.health",
    "vgpumon.collect.pcie",
    "vgpumon.collect.mig",
    "vgpumon.collect.processes",
    # after processes: a PID listed as running again is a reused PID, read anew
    "vgpumon.collect.accounting",
    "vgpumon.collect.gpm",
    "vgpumon.collect.xid",
    # vgpu before license and scheduler, which use the instances it found.
    "vgpumon.collect.vgpu",
    "vgpumon.collect.licensing",
    "vgpumon.collect.scheduler",
    # after vgpu, whose instances and types they complete
    "vgpumon.collect.vgpu_migration",
    "vgpumon.collect.vgpu_capacity",
    "vgpumon.collect.recovery",
    "vgpumon.collect.confcompute",
    # The operator's own NVML fields (serve config ``fields``); runs only when some are declared.
    "vgpumon.collect.fields",
)


def default_cadences() -> dict[str, float]:
    """Every cadenced reading's default period, in seconds (``DEFAULT_CADENCES``, which each
    collector module fills when imported: all of them are, here), by name."""
    for name in READER_MODULES:
        importlib.import_module(name)
    return dict(sorted(DEFAULT_CADENCES.items()))


def every_cycle() -> dict[str, float]:
    """``SamplerConfig.cadences`` that read every cadenced reading every cycle."""
    return dict.fromkeys(default_cadences(), 0.0)


def all_readers() -> list[Reader]:
    readers: list[Reader] = []
    for name in READER_MODULES:
        readers.extend(importlib.import_module(name).READERS)
    return readers


def collector_names() -> list[str]:
    return [r.name for r in all_readers()]


def enabled_readers(config: SamplerConfig) -> list[Reader]:
    readers = all_readers()
    if config.collectors is None:
        return [r for r in readers if r.default_enabled]
    return [r for r in readers if r.name in config.collectors]
