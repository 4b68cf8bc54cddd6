"""The parsed scenario: :class:`Scenario` and the specs of its driver, GPUs, MIG instances,
processes and Xid events."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vgpumon.sim.faults import FaultSpec
from vgpumon.sim.patterns import PatternSpec
from vgpumon.sim.scenario_keys import DEFAULT_DRIVER_VERSION, MIB


@dataclass(frozen=True)
class DriverSpec:
    version: str = DEFAULT_DRIVER_VERSION
    nvml_version: str = "13.580.159.04"
    cuda_driver_version: int = 13000
    branch: str = "r582_49"
    gpm_max_metric_id: int = 210


@dataclass(frozen=True)
class MigProfile:
    index: int
    id: int
    name: str  # without "MIG "
    slices: int
    instances: int
    sm_count: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg: int
    ofa: int
    memory_bytes: int
    placements: tuple[tuple[int, int], ...]

    @property
    def memory_mb(self) -> int:
        return self.memory_bytes // MIB


@dataclass(frozen=True)
class ComputeInstanceSpec:
    id: int
    slices: int
    placement: int
    mig_index: int
    uuid: str
    load: dict[str, PatternSpec] | None = None


@dataclass(frozen=True)
class GpuInstanceSpec:
    id: int
    profile: MigProfile
    placement: int
    path: str
    compute_instances: tuple[ComputeInstanceSpec, ...]
    memory_used: PatternSpec | None = None
    load: dict[str, PatternSpec] = field(default_factory=dict)


@dataclass(frozen=True)
class ProcessSpec:
    pid: int
    name: str
    kind: str
    memory: PatternSpec
    utilization: dict[str, PatternSpec]
    start: float = 0.0
    stop: float | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None

    def running(self, t: float) -> bool:
        return self.start <= t and (self.stop is None or t < self.stop)


@dataclass(frozen=True)
class XidSpec:
    at: float
    xid: int
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True)
class GpuSpec:
    """One simulated GPU, after its model preset and defaults were applied."""

    index: int
    path: str
    model: str | None
    name: str
    uuid: str
    serial: str
    pci_bus_id: str
    pci_device_id: int
    pci_subsystem_id: int
    minor_number: int
    architecture: int
    brand: int
    compute_capability: tuple[int, int]
    sm_count: int
    vbios_version: str
    board_part_number: str
    virtualization_mode: int
    persistence_mode: bool
    compute_mode: int
    memory_total: int
    memory_reserved: int
    memory_used: PatternSpec | None
    bar1_total: int
    bar1_used: PatternSpec
    load: dict[str, PatternSpec]
    power_draw: PatternSpec | None
    power_idle: float
    power_max_draw: float
    power_limit: float
    power_default_limit: float
    power_min_limit: float
    power_max_limit: float
    power_enforced_limit: float
    temp_gpu: PatternSpec | None
    temp_memory: PatternSpec | None
    temp_idle: float
    temp_load: float
    temp_thresholds: dict[str, float]
    clocks_max: dict[str, float]
    clocks_idle: dict[str, float]
    clocks_current: dict[str, PatternSpec]
    clock_reasons_supported: int
    clock_reasons_active: int | None
    performance_state: PatternSpec
    fan_count: int
    fan_speed: PatternSpec
    ecc_supported: bool
    ecc_enabled: bool
    ecc_pending: bool
    ecc_counts: dict[str, int]
    remapped_rows: tuple[int, int, int, int]
    row_histogram: tuple[int, int, int, int, int]
    pcie: dict[str, int]
    nvlink_links: int
    # the "nvlink" mapping as parsed ({} when absent: per-link fields not supported)
    nvlink: dict[str, Any]
    gpm_supported: bool
    supported_event_types: int
    mig_profiles: tuple[MigProfile, ...]
    mig_enabled: bool
    mig_pending: bool
    gpu_instances: tuple[GpuInstanceSpec, ...]
    processes: tuple[ProcessSpec, ...]
    xid_events: tuple[XidSpec, ...]
    unsupported: frozenset[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    seed: int
    privileged: bool
    driver: DriverSpec
    gpus: tuple[GpuSpec, ...]
    faults: tuple[FaultSpec, ...]
    latency: dict[str, float]
    source: str  # "builtin:NAME" or a file path
    text: str  # the YAML as written
    extra: dict[str, Any] = field(default_factory=dict)
