"""The host snapshot: what one sampling cycle saw, as immutable data.

Everything downstream of the sampler (exporter, JSON API, TUI, validate) reads these classes and
nothing else, so the exporter never needs NVML and a remote TUI needs only the JSON form.

Conventions, shared by every reader and consumer:

* Units are base units: bytes, seconds, hertz, watts, joules, degrees Celsius; utilizations are
  ratios in [0, 1] (NVML's percent / 100).
* ``None`` means NVML did not give the value (not supported, no permission, not sampled yet). It is
  never replaced by 0: the exporter drops the series and the TUI shows a dash.
* Enumerations are stored as short lowercase names (``"passthrough"``, ``"equal_share"``) so that
  the JSON form is readable and stable across NVML versions.
* Counters (energy, ECC, Xid, scheduler run time) are cumulative values, as NVML reports them.

``to_json`` / ``from_json`` round-trip a :class:`Snapshot` exactly; ``SCHEMA_VERSION`` changes when
a field is removed or changes meaning (adding an optional field keeps the version).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, Union

SCHEMA_VERSION = 2

VIRTUALIZATION_MODES = ("none", "passthrough", "vgpu", "host_vgpu", "host_vsga")
SCHEDULER_POLICIES = ("unknown", "best_effort", "equal_share", "fixed_share")
# The engines a vGPU scheduler log covers (NVML_VGPU_SCHEDULER_ENGINE_TYPE_*, R590+ for encoders).
SCHEDULER_ENGINES = ("graphics", "nvenc0", "nvenc1")
# Why a collector failed, where the source can tell (an agentless host's optional vGPU report:
# printed nothing, exited non-zero, was not nvidia-smi XML, was too large, did not answer).
COLLECTOR_FAILURES = ("empty", "exit_status", "unparsable", "too_large", "timeout")
# What holds a GPU in its process list: a compute, graphics or MPS process, or a VM, as a
# hypervisor's nvidia-smi lists the VMs on its vGPU host GPUs (ESXi: the VM's name, its world ID
# as the pid, its framebuffer as the memory used).
PROCESS_KINDS = ("compute", "graphics", "mps", "vm")
# The one verdict on a vGPU's scheduler share over its window (vgpumon.collect.starvation,
# docs/verdicts.md): starved or ok, or why there is no verdict.
SHARE_STATES = ("starved", "ok", "short_window", "missed_entries", "unknown_policy")
VGPU_LICENSE_STATES = (
    "unknown",
    "uninitialized",
    "unlicensed_unrestricted",
    "unlicensed_restricted",
    "unlicensed",
    "licensed",
)
# libvirt's domain states (virDomainState), lower case.
VM_STATES = (
    "nostate",
    "running",
    "blocked",
    "paused",
    "shutdown",
    "shutoff",
    "crashed",
    "pmsuspended",
)
DEVICE_KINDS = ("gpu", "mig", "vgpu")
# What became of the VM of a vGPU that went away (vgpumon.collect.vanished, docs/verdicts.md).
VGPU_DEPARTURES = ("vm_stopped", "vm_holds_another", "vanished", "vm_unknown")
# What NVML says stands in the way of moving a vGPU (NVML_VGPU_COMPATIBILITY_LIMIT_*).
MIGRATION_LIMITS = ("host_driver", "guest_driver", "gpu", "other")
LICENSE_EXPIRY_STATUSES = ("not_available", "invalid", "valid", "not_applicable", "permanent")
# What the driver asks for to bring a GPU back (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, R565+), in
# NVML_GPU_RECOVERY_ACTION_* order.
RECOVERY_ACTIONS = (
    "none",
    "gpu_reset",
    "node_reboot",
    "drain_p2p",
    "drain_and_reset",
    "recover_imex_domain",
    "bus_reset",
    "system_reboot",
)
# Confidential computing (nvmlSystemGetConfComputeState / Settings): the environment and the
# multi-GPU protection mode, in NVML_CC_SYSTEM_ENVIRONMENT_* / NVML_CC_SYSTEM_MULTIGPU_* order.
CC_ENVIRONMENTS = ("unavailable", "sim", "prod")
CC_MULTI_GPU_MODES = ("none", "protected_pcie", "nvle")
# How a metering counter was integrated (docs/metering.md gives each one's error bound).
METERING_METHODS = ("accounting", "accounting_average", "process_samples", "vgpu_samples", "gpm")
CLOCK_EVENT_REASONS = (
    "idle",
    "applications_clocks_setting",
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal",
    "hw_thermal",
    "power_brake",
    "display_clock_setting",
)


# --------------------------------------------------------------------------- physical GPU parts


@dataclass(frozen=True, slots=True)
class DriverInfo:
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: str | None = None  # "13.0", decoded from NVML's 13000


@dataclass(frozen=True, slots=True)
class Utilization:
    """NVML's classic utilization ratios for a whole GPU."""

    gpu: float | None = None
    memory: float | None = None
    encoder: float | None = None
    decoder: float | None = None


@dataclass(frozen=True, slots=True)
class Memory:
    total_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None
    reserved_bytes: int | None = None  # only with nvmlDeviceGetMemoryInfo v2


@dataclass(frozen=True, slots=True)
class Temperatures:
    gpu_celsius: float | None = None
    memory_celsius: float | None = None


@dataclass(frozen=True, slots=True)
class Clocks:
    graphics_hertz: float | None = None
    sm_hertz: float | None = None
    memory_hertz: float | None = None
    video_hertz: float | None = None


@dataclass(frozen=True, slots=True)
class ClockEvents:
    """Clock event (throttle) reasons by name, see :data:`CLOCK_EVENT_REASONS`."""

    supported: tuple[str, ...] = ()
    active: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Ecc:
    mode_current: bool | None = None
    mode_pending: bool | None = None
    corrected_volatile: int | None = None
    uncorrected_volatile: int | None = None
    corrected_aggregate: int | None = None
    uncorrected_aggregate: int | None = None


@dataclass(frozen=True, slots=True)
class RemappedRows:
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failed: bool | None = None


@dataclass(frozen=True, slots=True)
class Recovery:
    """What the driver itself says a GPU needs (R565+ recovery action, R580+ repair status,
    R590+ unrepairable memory); None where the driver does not say."""

    action: str | None = None  # RECOVERY_ACTIONS
    channel_repair_pending: bool | None = None
    tpc_repair_pending: bool | None = None
    unrepairable_memory: bool | None = None

    # The verdicts `check`, the node-feature labels and `top` read (the alert rules read the
    # same facts from the families): decided here once.

    @property
    def action_needed(self) -> bool | None:
        """The driver asks for an action; None when it does not say."""
        return None if self.action is None else self.action != "none"

    @property
    def repair_pending(self) -> bool | None:
        flags = (self.channel_repair_pending, self.tpc_repair_pending)
        if True in flags:
            return True
        return None if flags == (None, None) else False

    @property
    def pending_repairs(self) -> tuple[str, ...]:
        return tuple(
            name
            for name, flag in (
                ("channel", self.channel_repair_pending),
                ("tpc", self.tpc_repair_pending),
            )
            if flag
        )


@dataclass(frozen=True, slots=True)
class ConfCompute:
    """Confidential computing as the driver reports it (the system state, read per GPU)."""

    feature_enabled: bool | None = None  # CC mode on for the system
    environment: str | None = None  # CC_ENVIRONMENTS
    devtools_mode: bool | None = None  # CC developer-tools mode (not a protected setup)
    multi_gpu_mode: str | None = None  # CC_MULTI_GPU_MODES
    ready: bool | None = None  # GPUs accept client work (the attestation step set them ready)
    cpu_capability: str | None = None  # none | amd_sev | intel_tdx | amd_sev_snp | amd_snp_vtom
    gpus_capable: bool | None = None
    protected_memory_total_bytes: int | None = None
    protected_memory_used_bytes: int | None = None
    unprotected_memory_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class AccountingRecord:
    """One process in the driver's accounting buffer (accounting mode on).

    The driver integrates each process's utilization over its life itself: ``sum_gpu_util`` over
    ``sample_count`` samples (``_v2``, R610+), else only the rounded lifetime average.
    """

    pid: int
    running: bool | None = None
    gpu_utilization: float | None = None  # lifetime average, ratio
    sum_gpu_util_percent: int | None = None  # _v2: the sum of the per-sample percentages
    sample_count: int | None = None  # _v2
    elapsed_seconds: float | None = None  # lifetime so far (running) or in total (ended)
    start_timestamp_seconds: float | None = None
    max_memory_bytes: int | None = None

    @property
    def busy_seconds(self) -> float | None:
        """GPU-busy seconds over the process's life: the mean per-sample utilization (exact sum
        where ``_v2`` gave one) times its elapsed time."""
        if self.elapsed_seconds is None:
            return None
        if self.sum_gpu_util_percent is not None and self.sample_count:
            mean = self.sum_gpu_util_percent / self.sample_count / 100.0
            return min(1.0, mean) * self.elapsed_seconds
        if self.gpu_utilization is None:
            return None
        return self.gpu_utilization * self.elapsed_seconds


@dataclass(frozen=True, slots=True)
class Gpm:
    """GPM (Hopper+) activity ratios over the interval between two samples."""

    interval_seconds: float | None = None
    graphics_active: float | None = None
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    fp64_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    name: str | None = None
    kind: str = "compute"  # PROCESS_KINDS
    used_memory_bytes: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    sm_utilization: float | None = None
    memory_utilization: float | None = None
    encoder_utilization: float | None = None
    decoder_utilization: float | None = None


@dataclass(frozen=True, slots=True)
class Pcie:
    link_generation: int | None = None
    link_width: int | None = None
    tx_bytes_per_second: float | None = None  # opt-in: the NVML call blocks for its window
    rx_bytes_per_second: float | None = None
    replay_errors: int | None = None


@dataclass(frozen=True, slots=True)
class NvLink:
    """One NVLink link of a GPU (HGX boards); None where the driver gave nothing."""

    link: int
    up: bool | None = None
    tx_bytes: int | None = None  # data sent since the driver was loaded
    rx_bytes: int | None = None
    crc_errors: int | None = None  # data-link-layer CRC errors
    replay_errors: int | None = None
    recovery_errors: int | None = None


@dataclass(frozen=True, slots=True)
class FieldValue:
    """One NVML field value an operator asked for (the serve config's ``fields``), as NVML gave it.

    Raw: no scale, no name. Which metric it becomes is the exporter's business, so the snapshot
    keeps the same meaning whatever the config says, and a remote consumer sees what NVML said.
    A field the GPU did not answer has no entry (absent, not 0).
    """

    field_id: int
    value: float
    scope_id: int | None = None  # None: asked without a scope (NVML reads it as scope 0)


# --------------------------------------------------------------------------- MIG


@dataclass(frozen=True, slots=True)
class MigComputeInstance:
    id: int
    mig_uuid: str | None = None
    mig_index: int | None = None
    name: str | None = None
    profile_id: int | None = None
    placement_start: int | None = None
    placement_size: int | None = None
    sm_count: int | None = None


@dataclass(frozen=True, slots=True)
class MigGpuInstance:
    id: int
    profile_id: int | None = None
    profile_name: str | None = None  # e.g. "1g.10gb"
    placement_start: int | None = None
    placement_size: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    # NVML's figure, or what the MIG-backed vGPUs in it hold where that is more (NVML counts the
    # guests' framebuffer nowhere): decided in vgpumon.collect.memory_in_use.
    memory_in_use_bytes: int | None = None
    gpm: Gpm | None = None
    compute_instances: tuple[MigComputeInstance, ...] = ()
    # MIG-backed time-sliced vGPUs inside this GPU instance (R575+, GB20x): mixed sizes allowed,
    # and how many more of each vGPU type fit in it now (None: the driver cannot tell).
    vgpu_heterogeneous_mode: bool | None = None
    vgpu_capacity: tuple[GpuInstanceVgpuCapacity, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuInstanceVgpuCapacity:
    """One vGPU type a GPU instance can host (nvmlGpuInstanceGetCreatableVgpus) and how many more
    instances of it fit there now (its creatable placements, non-overlapping)."""

    type_id: int
    type_name: str | None = None
    creatable_instances: int | None = None


@dataclass(frozen=True, slots=True)
class MigProfileCapacity:
    """One GPU instance profile of a MIG GPU and how many more instances of it fit now.

    ``creatable_instances`` is NVML's remaining capacity for the profile in the current layout
    (nvmlDeviceGetGpuInstanceRemainingCapacity): placement-aware, so two free slices that are not
    adjacent fit two 1-slice instances but no 2-slice one.
    """

    profile_id: int
    name: str | None = None  # e.g. "1g.10gb", "1g.10gb+me"
    slices: int | None = None  # compute slices an instance takes
    memory_bytes: int | None = None
    max_instances: int | None = None  # on an empty GPU
    creatable_instances: int | None = None


# --------------------------------------------------------------------------- vGPU host


@dataclass(frozen=True, slots=True)
class VgpuUtilization:
    """Per-vGPU engine ratios, averaged over the samples NVML gave since the last cycle."""

    sm: float | None = None
    memory: float | None = None
    encoder: float | None = None
    decoder: float | None = None
    samples: int = 0


@dataclass(frozen=True, slots=True)
class VgpuLicense:
    licensed: bool | None = None
    state: str | None = None  # VGPU_LICENSE_STATES
    expiry_status: str | None = None  # LICENSE_EXPIRY_STATUSES
    expiry_timestamp_seconds: float | None = None  # absent when no expiry applies
    # The lease verdict (vgpumon.collect.leases, docs/licensing.md): not renewed when due.
    # None where there is no lease (not licensed, or no expiry).
    renewal_overdue: bool | None = None


@dataclass(frozen=True, slots=True)
class VgpuProcess:
    vgpu_id: int
    pid: int  # guest PID
    name: str | None = None
    sm_utilization: float | None = None
    memory_utilization: float | None = None
    encoder_utilization: float | None = None
    decoder_utilization: float | None = None


@dataclass(frozen=True, slots=True)
class VirtualMachine:
    """The hypervisor's record of the VM that holds a vGPU (libvirt, KubeVirt, or the VM name an
    agentless host's ``nvidia-smi vgpu`` report prints), not NVML's.

    NVML knows a VM only by an id (a UUID on KVM); the name is what a person on call recognises.
    """

    name: str
    uuid: str | None = None
    state: str | None = None  # VM_STATES
    title: str | None = None  # libvirt's one-line title metadata, when set
    description: str | None = None  # libvirt's free-text description metadata, when set


@dataclass(frozen=True, slots=True)
class VgpuInstance:
    vgpu_id: int
    uuid: str | None = None
    vm_id: str | None = None
    vm_id_type: str | None = None  # domain_id | uuid
    type_id: int | None = None
    type_name: str | None = None
    type_class: str | None = None
    mdev_uuid: str | None = None
    guest_driver_version: str | None = None
    gpu_instance_id: int | None = None  # MIG-backed vGPU only
    placement_id: int | None = None
    framebuffer_total_bytes: int | None = None
    framebuffer_used_bytes: int | None = None
    frame_rate_limit: int | None = None  # absent when the limiter is off
    ecc_enabled: bool | None = None
    accounting_enabled: bool | None = None
    encoder_capacity: float | None = None  # ratio of the encoder the vGPU may use
    encoder_sessions: int | None = None
    encoder_average_fps: float | None = None
    encoder_average_latency_seconds: float | None = None
    fbc_sessions: int | None = None
    fbc_average_fps: float | None = None
    fbc_average_latency_seconds: float | None = None
    utilization: VgpuUtilization = field(default_factory=VgpuUtilization)
    license: VgpuLicense = field(default_factory=VgpuLicense)
    # Guest PIDs in the vGPU's accounting buffer; read only while accounting mode is on.
    accounting_pids: tuple[int, ...] | None = None
    # Filled by the libvirt enricher: the domain holding the vGPU, and for SR-IOV vGPUs the host
    # PCI address of the virtual function it sits on.
    vm: VirtualMachine | None = None
    vf_pci_bus_id: str | None = None
    # The vGPU manager can live-migrate this vGPU (vMotion, KVM migration): the migration bit of
    # the instance's virtualization capabilities (nvmlVgpuInstanceGetMetadata).
    migration_supported: bool | None = None
    # NVML's migration compatibility of this vGPU with this host's GPU (nvmlGetVgpuCompatibility):
    # whether a live move is allowed, and what limits it (MIGRATION_LIMITS; () when nothing).
    live_migration_compatible: bool | None = None
    migration_limits: tuple[str, ...] | None = None
    # Bytes a live migration of this vGPU moves now (nvmlVgpuInstanceGetRuntimeStateSize, R565+).
    migration_state_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class VgpuType:
    """A vGPU type the GPU supports, for capacity planning."""

    type_id: int
    name: str | None = None
    type_class: str | None = None
    framebuffer_bytes: int | None = None
    max_instances: int | None = None
    max_instances_per_vm: int | None = None
    gpu_instance_profile_id: int | None = None
    creatable: bool = False
    active_instances: int = 0
    # How many more instances of this type fit now; None when the driver cannot tell.
    creatable_instances: int | None = None
    # What one instance takes beyond its framebuffer (R550+): the driver's framebuffer
    # reservation and GSP heap, and its BAR1 aperture; for exact "fits" arithmetic.
    framebuffer_reservation_bytes: int | None = None
    gsp_heap_bytes: int | None = None
    bar1_bytes: int | None = None

    @property
    def footprint_bytes(self) -> int | None:
        """Framebuffer one instance takes from the GPU: its own, the reservation, the GSP heap."""
        if self.framebuffer_bytes is None:
            return None
        return (
            self.framebuffer_bytes
            + (self.framebuffer_reservation_bytes or 0)
            + (self.gsp_heap_bytes or 0)
        )


@dataclass(frozen=True, slots=True)
class VgpuSchedulerUsage:
    """Cumulative scheduler-log totals for one vGPU (counters)."""

    vgpu_id: int
    run_seconds_total: float = 0.0
    preemption_seconds_total: float = 0.0


@dataclass(frozen=True, slots=True)
class VgpuShare:
    """One vGPU's share of its scheduler over the window, and the one verdict on it.

    Decided once, in :mod:`vgpumon.collect.starvation` (the rule: docs/verdicts.md); the exporter,
    ``top``, ``check`` and the node features read it, never decide again. Shares are parts of the
    engine's time in the window, 0-1; None where there is no verdict to base them on.
    """

    vgpu_id: int
    state: str  # SHARE_STATES
    due: float | None = None  # what its policy entitles it to
    received: float | None = None  # what it ran
    waited: float | None = None  # what it was preempted with work left
    window_seconds: float | None = None  # the time its counters cover (its own, if it is new)


@dataclass(frozen=True, slots=True)
class VgpuScheduler:
    gpu_instance_id: int | None = None  # set for per-GPU-instance (MIG-backed) scheduling
    engine: str = "graphics"  # SCHEDULER_ENGINES: the engine whose time it shares out
    policy: str | None = None  # SCHEDULER_POLICIES
    arr_enabled: bool | None = None
    timeslice_seconds: float | None = None
    average_factor: int | None = None
    frequency_hertz: float | None = None
    supported_policies: tuple[str, ...] = ()
    min_timeslice_seconds: float | None = None
    max_timeslice_seconds: float | None = None
    usage: tuple[VgpuSchedulerUsage, ...] = ()
    log_entries_total: int = 0  # entries consumed from the ring, de-duplicated
    log_entries_missed_total: int = 0  # entries the ring overwrote before we read them
    # The share verdicts over the sliding window (vgpumon.collect.starvation): the window the
    # newest verdicts cover (None: no counters read yet) and one verdict per vGPU.
    share_window_seconds: float | None = None
    shares: tuple[VgpuShare, ...] = ()


# --------------------------------------------------------------------------- guest licensing


@dataclass(frozen=True, slots=True)
class GuestLicenseFeature:
    feature: str  # vgpu | nvidia_rtx | gaming | compute | vgamedev | unknown
    licensed: bool | None = None
    enabled: bool | None = None
    product_name: str | None = None
    state: str | None = None  # "licensed" | "unlicensed"
    expiry_status: str | None = None
    expiry_timestamp_seconds: float | None = None
    renewal_overdue: bool | None = None  # as VgpuLicense.renewal_overdue


# --------------------------------------------------------------------------- metering


@dataclass(frozen=True, slots=True)
class Usage:
    """What one tenant used since vgpumon first saw it (counters; docs/metering.md).

    ``busy_seconds`` is the integral of its utilization over time (SM utilization for a vGPU
    or process; for a MIG instance GPM SM activity in units of the instance's own SMs);
    ``memory_byte_seconds`` the integral of the memory it held; ``energy_joules`` its share of
    the GPU's energy counter (None where the GPU has no energy counter).
    """

    busy_seconds: float = 0.0
    memory_byte_seconds: float = 0.0
    energy_joules: float | None = None


@dataclass(frozen=True, slots=True)
class VgpuMeter:
    vgpu_id: int
    usage: Usage = field(default_factory=Usage)
    # Seconds the vGPU has been licensed and running yet under the idle ratio, without a break
    # (0 while in use; None where NVML gave no utilization or license state).
    idle_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class MigMeter:
    gpu_instance_id: int
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class ProcessMeter:
    pid: int
    name: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    usage: Usage = field(default_factory=Usage)
    # Seconds the process has held framebuffer with no SM utilization, without a break.
    idle_seconds: float | None = None
    # False: NVML lists the PID but it does not exist on the host (a dead holder); None where
    # vgpumon cannot see the host's processes (not in the host PID namespace, the simulator).
    alive: bool | None = None
    # The Kubernetes container running it, from /proc/PID/cgroup (None: not in a pod).
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    # How busy_seconds grew this cycle (METERING_METHODS): "accounting" or "accounting_average"
    # (the driver's own per-process record), or "process_samples" (NVML's per-process samples).
    busy_method: str | None = None


@dataclass(frozen=True, slots=True)
class PodMeter:
    namespace: str
    pod: str
    container: str
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True, slots=True)
class GpuMetering:
    """A GPU's usage counters, per tenant, and the idle findings of the cycle.

    Every entity's counters start at 0 when vgpumon first sees it and grow for its life. The
    GPU's energy is split once per kind of tenant (``vgpu``, ``mig``, ``pod``): per kind, the
    tenants' energy plus ``unattributed_energy_joules[kind]`` equals the GPU energy counter's
    increase since metering began (``energy_joules_metered``), tenants that ended included.
    """

    energy_joules_metered: float | None = None
    unattributed_energy_joules: dict[str, float] = field(default_factory=dict)
    unmetered_seconds: float = 0.0  # sampling gaps too long to integrate over
    vgpus: tuple[VgpuMeter, ...] = ()
    migs: tuple[MigMeter, ...] = ()
    processes: tuple[ProcessMeter, ...] = ()
    pods: tuple[PodMeter, ...] = ()
    # The longest any process has held memory with no SM use (0: none idle; None: no list).
    longest_idle_holder_seconds: float | None = None
    dead_holders: int | None = None  # listed PIDs not on the host; None: cannot tell
    dead_holder_memory_bytes: int | None = None
    # Per busy counter ("vgpu", "mig", "process", "pod"), the method it grew by this cycle
    # (METERING_METHODS); a counter with no tenant has no entry.
    methods: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- vGPU departures


@dataclass(frozen=True, slots=True)
class VanishedVgpu:
    """A vGPU gone while its VM still runs, as libvirt says (vgpumon.collect.vanished)."""

    vgpu_id: int
    vm_name: str | None = None
    vm_uuid: str | None = None
    since: float = 0.0  # Unix time it was last listed


@dataclass(frozen=True, slots=True)
class VgpuDepartures:
    """The vGPUs of a GPU that went away since vgpumon started, by what became of their VM
    (:data:`VGPU_DEPARTURES` -> count), and those whose VM still runs without them."""

    vanished: tuple[VanishedVgpu, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------- whole GPU


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    uuid: str
    up: bool = True
    down_reason: str | None = None  # NVML error name when up is False
    name: str | None = None
    pci_bus_id: str | None = None
    minor_number: int | None = None  # /dev/nvidiaN; DRA drivers name GPUs by it ("gpu-N")
    serial: str | None = None
    brand: str | None = None
    architecture: str | None = None
    compute_capability: str | None = None
    virtualization_mode: str | None = None  # VIRTUALIZATION_MODES
    host_vgpu_mode: str | None = None  # sriov | non_sriov
    vgpu_heterogeneous_mode: bool | None = None
    mig_mode_current: bool | None = None
    mig_mode_pending: bool | None = None
    utilization: Utilization = field(default_factory=Utilization)
    memory: Memory = field(default_factory=Memory)
    # ``memory.used_bytes``, or on a MIG-backed vGPU host the sum over its GPU instances' memory in
    # use where that is more: decided in vgpumon.collect.memory_in_use, read by every consumer.
    memory_in_use_bytes: int | None = None
    bar1_memory: Memory = field(default_factory=Memory)
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    temperatures: Temperatures = field(default_factory=Temperatures)
    clocks: Clocks = field(default_factory=Clocks)
    max_clocks: Clocks = field(default_factory=Clocks)
    clock_events: ClockEvents = field(default_factory=ClockEvents)
    performance_state: int | None = None
    fan_speed: float | None = None  # ratio; absent on boards without fans
    persistence_mode: bool | None = None
    compute_mode: str | None = None
    ecc: Ecc = field(default_factory=Ecc)
    remapped_rows: RemappedRows = field(default_factory=RemappedRows)
    xid_errors: dict[int, int] = field(default_factory=dict)  # xid -> count since start
    pcie: Pcie = field(default_factory=Pcie)
    nvlinks: tuple[NvLink, ...] = ()  # per link, on boards whose driver reports them
    extra_fields: tuple[FieldValue, ...] = ()  # the configured NVML fields this GPU answered
    gpm: Gpm | None = None
    processes: tuple[Process, ...] | None = None  # None: the list could not be read
    mig_instances: tuple[MigGpuInstance, ...] = ()
    vgpu_instances: tuple[VgpuInstance, ...] = ()
    vgpu_types: tuple[VgpuType, ...] = ()
    vgpu_processes: tuple[VgpuProcess, ...] = ()
    vgpu_schedulers: tuple[VgpuScheduler, ...] = ()
    # The encoder engines' schedulers (R590+), apart from the graphics engine's above so that
    # every reader of ``vgpu_schedulers`` keeps meaning the graphics engine.
    vgpu_encoder_schedulers: tuple[VgpuScheduler, ...] = ()
    guest_license_supported: bool | None = None
    guest_licenses: tuple[GuestLicenseFeature, ...] = ()
    # A vGPU host GPU that supports migrating its vGPUs (pGPU virtualization capabilities,
    # nvmlDeviceGetVgpuMetadata); a vGPU migrates only where both ends support it.
    vgpu_migration_supported: bool | None = None
    # Capacity of a vGPU host (time-sliced vGPUs): the framebuffer no running vGPU holds, and the
    # part of it that no supported type can use in the current mix (vgpumon.capacity says how).
    vgpu_framebuffer_free_bytes: int | None = None
    vgpu_framebuffer_stranded_bytes: int | None = None
    # Capacity of a MIG GPU: every GPU instance profile with its remaining capacity, and the
    # compute slices no GPU instance holds.
    mig_profiles: tuple[MigProfileCapacity, ...] = ()
    mig_free_slices: int | None = None
    # Usage counters and idle findings (vgpumon.collect.metering); None where metering is off.
    metering: GpuMetering | None = None
    # Its vGPUs that went away and what became of their VMs (vgpumon.collect.vanished); None
    # without the VMs' states (no libvirt) or on a GPU that is not a vGPU host.
    vgpu_departures: VgpuDepartures | None = None
    # What the driver says the GPU needs to recover (reset, reboot, drain) and pending repairs.
    recovery: Recovery = field(default_factory=Recovery)
    conf_compute: ConfCompute = field(default_factory=ConfCompute)
    # Accounting mode and the driver's per-process records (read only while the mode is on).
    accounting_enabled: bool | None = None
    accounting: tuple[AccountingRecord, ...] | None = None
    # Collectors that read nothing on this GPU because the driver (or the NVML module) lacks
    # their calls, with NVML's reason ("function_not_found", "not_supported", ...).
    unsupported: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- Kubernetes


@dataclass(frozen=True, slots=True)
class DeviceAllocation:
    """One device the kubelet hands out, and the container it is given to (if any).

    ``device_id`` is what the device plugin reported (a GPU or MIG UUID, an mdev UUID or a PCI
    address); ``kind`` and the ids after it say which part of this host's snapshot it is, and are
    None when the id matches nothing NVML reported (another vendor's device, a GPU that is down).
    """

    resource: str  # e.g. "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"
    device_id: str
    namespace: str | None = None  # None: allocatable, not given to any container
    pod: str | None = None
    container: str | None = None
    vm_name: str | None = None  # KubeVirt: the VM whose virt-launcher pod holds the device
    kind: str | None = None  # DEVICE_KINDS
    gpu_uuid: str | None = None
    gpu_instance_id: int | None = None  # MIG
    compute_instance_id: int | None = None  # MIG
    vgpu_id: int | None = None  # vGPU
    # Dynamic Resource Allocation: the ResourceClaim that holds the device (None for devices a
    # device plugin handed out). For DRA, ``resource`` is the DRA driver's name and
    # ``device_id`` the device's name in the driver's pool.
    claim_namespace: str | None = None
    claim_name: str | None = None


# --------------------------------------------------------------------------- exporter health


@dataclass(frozen=True, slots=True)
class CollectorStatus:
    """One reader's outcome in the cycle (``vgpumon_scrape_collector_*``); a failed one may say
    why: ``failure`` one of :data:`COLLECTOR_FAILURES` (a metric label), ``detail`` the line a
    person reads (the log, ``/api/v1/snapshot``)."""

    name: str
    success: bool
    duration_seconds: float
    failure: str | None = None  # COLLECTOR_FAILURES
    detail: str | None = None
    # GPUs on which the collector read nothing for lack of support, by NVML's reason
    # ("function_not_found": a driver or module older than the call; "not_supported": this GPU).
    unsupported: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NvmlErrorCount:
    function: str
    error: str  # NVML error name in lower case, e.g. "not_supported", "timeout"
    count: int


@dataclass(frozen=True, slots=True)
class SamplingCadence:
    """How often one expensive value is read (``vgpumon_sampler_cadence_seconds``).

    Between reads the last value stands; averages (GPM metrics, per-process utilization) cover
    the time since the previous read, so a reading describes the last ``seconds`` or so, not the
    last cycle. ``seconds`` is never below the cycle interval (a value read every cycle).
    """

    name: str
    seconds: float


@dataclass(frozen=True, slots=True)
class SamplerHealth:
    up: bool = False  # NVML initialised and the last cycle finished
    wedged: bool = False  # a cycle overran its deadline and was abandoned
    cycles_total: int = 0
    cycles_abandoned_total: int = 0
    last_cycle_duration_seconds: float | None = None
    hung_gpus: tuple[str, ...] = ()  # UUIDs whose calls did not return within the deadline
    # How the last cycle read its GPUs: "serial" or "parallel" (None: no NVML sampler).
    dispatch: str | None = None
    # Why ``up`` is False ("NVML not initialised: Driver Not Loaded; next try in 4 s"), for
    # readiness answers and logs; None while up.
    down_reason: str | None = None
    # The time between cycles and the cadences of the values read less often (None / empty:
    # not an NVML sampler, or an exporter too old to say).
    interval_seconds: float | None = None
    cadences: tuple[SamplingCadence, ...] = ()
    # How many GPUs NVML counted (nvmlDeviceGetCount) when it last counted; more than the
    # snapshot's GPUs when some could not be read at all (no handle): nothing may then be said
    # of the node as a whole. None: not counted (NVML down, not a sampler, an older exporter).
    gpus_counted: int | None = None


@dataclass(frozen=True, slots=True)
class HostRollup:
    """One host summed up, as the fleet rules record it from its series in Prometheus
    (packaging/prometheus/vgpumon-fleet.rules.yml): what a fleet's row of the host shows,
    without the host's GPUs and vGPUs. Counts are of the host's GPUs, vGPUs or licenses."""

    gpus: int = 0
    modes: tuple[tuple[str, int], ...] = ()  # (virtualization mode, "mig" or "unknown"; GPUs)
    utilization: float | None = None  # mean over the GPUs that report one
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    vgpus: int = 0
    vgpu_license_problems: int = 0  # vGPUs unlicensed, or licensed and expiring
    gpus_lost: int = 0
    gpus_with_xid: int = 0
    newest_xid: int | None = None  # the highest Xid any GPU had
    wedged: bool = False
    licenses_unlicensed: int = 0  # vGPUs and guest features
    licenses_expiring: int = 0
    vgpus_starved: int = 0
    idle_holders: int = 0  # vGPUs and processes idle long enough for the badge
    recovery_actions: tuple[str, ...] = ()  # what the driver asks for, each action once
    memory_faults: int = 0  # GPUs with memory beyond repair
    repairs_pending: int = 0  # GPUs with a repair pending at the next reset
    cc: tuple[str, ...] = ()  # confidential computing states of GPUs with it on (cc_label's)


# Not slotted: one per cycle, and referenced weakly (a weak-reference slot needs Python 3.11).
@dataclass(frozen=True)
class Snapshot:
    timestamp: float  # Unix seconds at the end of the cycle
    driver: DriverInfo = field(default_factory=DriverInfo)
    gpus: tuple[Gpu, ...] = ()
    collectors: tuple[CollectorStatus, ...] = ()
    nvml_errors: tuple[NvmlErrorCount, ...] = ()
    health: SamplerHealth = field(default_factory=SamplerHealth)
    source: str = "pynvml"  # the NVML module's name, e.g. "pynvml" or "sim:baremetal-8xh100"
    # Kubernetes devices of this node (the kubelet enricher); empty when it is off.
    allocations: tuple[DeviceAllocation, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def gpu(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


# --------------------------------------------------------------------------- migration readiness


def driver_branch(version: str | None) -> str | None:
    """A driver version's release branch, its first number: ``"580.82.07"`` -> ``"580"``."""
    if not version:
        return None
    head = version.strip().split(".", 1)[0]
    return head if head.isdigit() else None


def guest_driver_matches_host(host_driver: str | None, vgpu: VgpuInstance) -> bool | None:
    """The vGPU's guest driver is of the host driver's branch; None while either is unknown.

    A guest without a loaded driver (NVML's "Not Available", stored as None) is unknown, not a
    mismatch: the VM may be booting.
    """
    host, guest = driver_branch(host_driver), driver_branch(vgpu.guest_driver_version)
    if host is None or guest is None:
        return None
    return host == guest


def vgpu_migration_ready(host_driver: str | None, gpu: Gpu, vgpu: VgpuInstance) -> bool | None:
    """What NVML can tell of a live migration of ``vgpu``: both the GPU and the vGPU support it,
    the guest driver is of the host's branch, and NVML's compatibility check allows a live move.
    False as soon as one part says no; None when no part says no and one is unknown (a driver
    without the compatibility call leaves that part unknown). The destination host's side is the
    destination's answer.
    """
    parts = (
        gpu.vgpu_migration_supported,
        vgpu.migration_supported,
        guest_driver_matches_host(host_driver, vgpu),
        vgpu.live_migration_compatible,
    )
    # Each part is True, False or None, so ``in`` (equality) finds exactly these; it runs once
    # per vGPU on every render.
    if False in parts:
        return False
    if None in parts:
        return None
    return True


# --------------------------------------------------------------------------- JSON round trip

T = TypeVar("T")


class SchemaError(ValueError):
    """A JSON snapshot that does not fit this version's schema."""


def to_dict(obj: Any) -> Any:
    """Plain JSON-able data; dict keys become strings (JSON has no int keys)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (tuple, list)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def _fields_of(obj: Any) -> dict[str, Any]:
    """One dataclass's fields, for the JSON encoder to write (it asks per object it meets)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    raise TypeError(f"{type(obj).__name__} is not part of a snapshot")


def to_json(snapshot: object, *, indent: int | None = None) -> str:
    """The JSON of :func:`to_dict` (of a snapshot, or of any tree of the model's dataclasses),
    written without building that whole tree first.

    The encoder turns each dataclass into a dict as it reaches it and drops it once written, so no
    copy of the whole snapshot as dicts and lists exists beside the text. Tuples are JSON arrays and
    integer keys strings, as in :func:`to_dict`; the text is the same.
    """
    return json.dumps(snapshot, default=_fields_of, indent=indent, sort_keys=False)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, vars(sys.modules[__name__]))
    return _HINTS[cls]


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise SchemaError(f"{path}: null is not allowed")
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value, path)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return from_dict(tp, value, path)
    if origin is tuple:
        if not isinstance(value, list):
            raise SchemaError(f"{path}: expected a list")
        (item_tp, _ellipsis) = typing.get_args(tp)
        return tuple(_convert(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise SchemaError(f"{path}: expected an object")
        key_tp, val_tp = typing.get_args(tp)
        out = {}
        for k, v in value.items():
            try:
                key = key_tp(k)
            except ValueError:
                raise SchemaError(f"{path}: key {k!r} is not {key_tp.__name__}") from None
            out[key] = _convert(val_tp, v, f"{path}.{k}")
        return out
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SchemaError(f"{path}: expected a number")
        return float(value)
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise SchemaError(f"{path}: expected {tp.__name__}")
        return value
    return value


def from_dict(cls: type[T], data: Any, path: str = "$") -> T:
    if not isinstance(data, dict):
        raise SchemaError(f"{path}: expected an object for {cls.__name__}")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name], f"{path}.{f.name}")
    return cls(**kwargs)


def from_json(text: str | bytes) -> Snapshot:
    """A snapshot from its JSON (another host's, over the network): a :class:`SchemaError`, not a
    crash of whoever reads it, for anything that is not a snapshot of this schema, including JSON
    nested too deeply to parse and snapshots :func:`check_snapshot` refuses."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise SchemaError("$: the JSON is nested too deeply") from None
    if not isinstance(data, dict):
        raise SchemaError("$: expected an object")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SchemaError(
            f"snapshot schema version {version!r}, this vgpumon reads {SCHEMA_VERSION}"
        )
    snapshot = from_dict(Snapshot, data)
    check_snapshot(snapshot)
    return snapshot


# The largest Unix time a calendar date has (9999-12-31T23:59:59Z): later ones cannot be shown.
MAX_TIMESTAMP = 253402300799.0


def check_snapshot(snapshot: Snapshot) -> None:
    """Refuse a snapshot (from another host: a remote exporter's JSON, an agentless host's XML)
    that no reader of it can use: a timestamp that is not a time, or the same GPU, vGPU or MIG
    instance twice (every view keys its rows by them). A :class:`SchemaError` names the first
    problem."""
    t = snapshot.timestamp
    if not (math.isfinite(t) and 0 <= t <= MAX_TIMESTAMP):
        raise SchemaError(f"$.timestamp: {t!r} is not a time")
    uuids: set[str] = set()
    for i, g in enumerate(snapshot.gpus):
        if g.uuid in uuids:
            raise SchemaError(f"$.gpus[{i}]: GPU {g.uuid!r} is listed twice")
        uuids.add(g.uuid)
        _unique(f"$.gpus[{i}].vgpu_instances", "vGPU", (v.vgpu_id for v in g.vgpu_instances))
        _unique(f"$.gpus[{i}].mig_instances", "GPU instance", (m.id for m in g.mig_instances))


def _unique(path: str, what: str, ids: Iterable[int]) -> None:
    seen: set[int] = set()
    for i in ids:
        if i in seen:
            raise SchemaError(f"{path}: {what} {i} is listed twice")
        seen.add(i)
