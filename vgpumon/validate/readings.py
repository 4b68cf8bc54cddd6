"""What ``vgpumon validate`` reads: the target device, one reading, a window of readings.

Both sources (the in-process sampler and a running exporter) end up as a
:class:`~vgpumon.model.Snapshot`, so the device a ``--device`` selector names and the numbers a
check compares are found by one piece of code, :func:`resolve_target` and
:func:`reading_from_snapshot`, whichever way the snapshot arrived. Every value a check cannot use
carries the reason it is missing, because a skipped check must say why.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vgpumon.errors import ConfigError
from vgpumon.model import Gpu, MigComputeInstance, MigGpuInstance, Snapshot

# Keys of Reading.absent / Measurement.absent: one per reading a check uses.
UTILIZATION = "utilization"
GPM = "gpm_sm_active"
MEMORY = "memory_used"
PROCESSES = "processes"
PROCESS_UTILIZATION = "process_sm_utilization"

HOPPER_OR_NEWER = ("hopper", "blackwell", "rubin")
_PROFILE_SLICES = re.compile(r"(?:^|\D)(\d+)g\.", re.IGNORECASE)


@dataclass(frozen=True)
class Target:
    """The device under test as the readings name it.

    ``mig_uuid`` is set when the target is a MIG device; its GPU instance ``gpu_instance_id`` is
    then what GPM is checked on. ``mig_share`` is the fraction of that GPU instance's SMs the MIG
    device has (1.0 unless the GPU instance is split into several compute instances; ``None``
    when it cannot be told).
    """

    gpu_index: int
    gpu_uuid: str
    name: str | None = None
    architecture: str | None = None
    virtualization_mode: str | None = None
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    profile_name: str | None = None
    mig_share: float | None = None

    @property
    def is_mig(self) -> bool:
        return self.mig_uuid is not None

    @property
    def is_vgpu_guest(self) -> bool:
        return self.virtualization_mode == "vgpu"

    @property
    def load_device(self) -> str:
        """The selector a load worker gets: the MIG device or the GPU, by UUID."""
        return self.mig_uuid or self.gpu_uuid

    def describe(self) -> str:
        what = f"GPU {self.gpu_index} {self.name or ''} ({self.gpu_uuid})".replace("  ", " ")
        if self.is_mig:
            profile = f" {self.profile_name}" if self.profile_name else ""
            what += f", MIG device {self.mig_uuid} (GPU instance {self.gpu_instance_id}{profile})"
        if self.virtualization_mode and self.virtualization_mode != "none":
            what += f", virtualization mode {self.virtualization_mode}"
        return what

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu_index": self.gpu_index,
            "gpu_uuid": self.gpu_uuid,
            "name": self.name,
            "architecture": self.architecture,
            "virtualization_mode": self.virtualization_mode,
            "mig_uuid": self.mig_uuid,
            "gpu_instance_id": self.gpu_instance_id,
            "compute_instance_id": self.compute_instance_id,
            "profile_name": self.profile_name,
            "mig_share": self.mig_share,
        }


@dataclass(frozen=True)
class ProcessReading:
    pid: int
    used_memory_bytes: int | None = None
    sm_utilization: float | None = None


@dataclass(frozen=True)
class Reading:
    """The target's values in one snapshot; ``absent`` gives the reason for each ``None``.

    ``error`` is set when the target was not readable at all (GPU down, gone): that is a failure
    of the step, not a reason to skip a check.
    """

    timestamp: float
    utilization: float | None = None
    gpm_sm_active: float | None = None
    gpm_interval_s: float | None = None
    memory_used_bytes: int | None = None
    processes: tuple[ProcessReading, ...] | None = None
    absent: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class ProcessMeasurement:
    pid: int
    used_memory_bytes: int | None
    sm_utilization: float | None  # mean over the readings that carried a sample (see aggregate)
    sm_readings: int  # readings with a non-zero value
    zero_readings: int  # readings that read 0 (no NVML sample since the previous one)


@dataclass(frozen=True)
class Measurement:
    """A measurement window, reduced to one value per reading."""

    readings: int
    utilization: float | None = None
    utilization_values: tuple[float, ...] = ()
    gpm_sm_active: float | None = None
    gpm_seconds: float | None = None
    memory_used_bytes: int | None = None
    processes: Mapping[int, ProcessMeasurement] | None = None
    absent: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "readings": self.readings,
            "utilization": self.utilization,
            "utilization_values": list(self.utilization_values),
            "gpm_sm_active": self.gpm_sm_active,
            "gpm_seconds": self.gpm_seconds,
            "memory_used_bytes": self.memory_used_bytes,
            "processes": None
            if self.processes is None
            else [
                {
                    "pid": p.pid,
                    "used_memory_bytes": p.used_memory_bytes,
                    "sm_utilization": p.sm_utilization,
                    "sm_readings": p.sm_readings,
                    "zero_readings": p.zero_readings,
                }
                for p in self.processes.values()
            ],
            "absent": dict(self.absent),
            "error": self.error,
        }


# ------------------------------------------------------------------------------ the target


def resolve_target(snapshot: Snapshot, selector: str) -> Target:
    """The device ``--device`` names: an NVML index, a GPU UUID or a MIG device UUID.

    A MIG-enabled GPU cannot be the target as a whole (CUDA runs work only on its MIG devices), so
    naming one is refused with the MIG devices to choose from.
    """
    text = str(selector).strip()
    gpus = [g for g in snapshot.gpus]
    if not gpus:
        raise ConfigError("no GPU found: NVML lists none")
    if text.isdigit():
        gpu = next((g for g in gpus if g.index == int(text)), None)
        if gpu is None:
            raise ConfigError(f"no GPU with index {text}: this host has {_list_gpus(gpus)}")
        return _whole_gpu(gpu)
    lowered = text.lower()
    for gpu in gpus:
        if gpu.uuid.lower() == lowered:
            return _whole_gpu(gpu)
    for gpu in gpus:
        for gi in gpu.mig_instances:
            for ci in gi.compute_instances:
                if ci.mig_uuid is not None and ci.mig_uuid.lower() == lowered:
                    return _mig_target(gpu, gi, ci)
    raise ConfigError(
        f"no GPU or MIG device {text!r} here: give an index or a UUID from {_list_gpus(gpus)}"
        + _mig_hint(gpus)
    )


def _list_gpus(gpus: Sequence[Gpu]) -> str:
    return ", ".join(f"{g.index} ({g.uuid})" for g in gpus)


def _mig_hint(gpus: Sequence[Gpu]) -> str:
    migs = [
        ci.mig_uuid
        for g in gpus
        for gi in g.mig_instances
        for ci in gi.compute_instances
        if ci.mig_uuid is not None
    ]
    return f", or a MIG device: {', '.join(migs)}" if migs else ""


def _whole_gpu(gpu: Gpu) -> Target:
    if gpu.mig_mode_current:
        migs = [
            ci.mig_uuid for gi in gpu.mig_instances for ci in gi.compute_instances if ci.mig_uuid
        ]
        choose = f": {', '.join(migs)}" if migs else " (it has none yet: create one first)"
        raise ConfigError(
            f"GPU {gpu.index} ({gpu.uuid}) has MIG enabled, so load runs only on its MIG "
            f"devices; give one of them with --device{choose}"
        )
    if not gpu.up:
        raise ConfigError(f"GPU {gpu.index} ({gpu.uuid}) is down ({gpu.down_reason or 'lost'})")
    return Target(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        name=gpu.name,
        architecture=gpu.architecture,
        virtualization_mode=gpu.virtualization_mode,
    )


def _mig_target(gpu: Gpu, gi: MigGpuInstance, ci: MigComputeInstance) -> Target:
    return Target(
        gpu_index=gpu.index,
        gpu_uuid=gpu.uuid,
        name=gpu.name or ci.name,
        architecture=gpu.architecture,
        virtualization_mode=gpu.virtualization_mode,
        mig_uuid=ci.mig_uuid,
        gpu_instance_id=gi.id,
        compute_instance_id=ci.id,
        profile_name=gi.profile_name,
        mig_share=mig_share(gi, ci),
    )


def mig_share(gi: MigGpuInstance, ci: MigComputeInstance) -> float | None:
    """Fraction of the GPU instance's SMs that one of its compute instances has.

    A GPU instance with one compute instance gives it everything. Otherwise the compute slices
    tell: the profile name's ``Ng`` is the GPU instance's, the placement size the compute
    instance's (both in compute slices).
    """
    if len(gi.compute_instances) == 1:
        return 1.0
    match = _PROFILE_SLICES.search(gi.profile_name or "")
    size = ci.placement_size
    if match is None or size is None or size <= 0:
        return None
    return min(1.0, size / int(match.group(1)))


# ----------------------------------------------------------------------------- one reading


def reading_from_snapshot(
    snapshot: Snapshot,
    target: Target,
    *,
    reasons: Mapping[str, str] | None = None,
) -> Reading:
    """The target's values in ``snapshot``; ``reasons`` overrides why a missing value is missing
    (an exporter source knows better than "NVML gave none", e.g. per-process series turned off)."""
    gpu = snapshot.gpu(target.gpu_uuid)
    if gpu is None:
        return Reading(snapshot.timestamp, error=f"GPU {target.gpu_uuid} is no longer listed")
    if not gpu.up:
        return Reading(
            snapshot.timestamp,
            error=f"GPU {target.gpu_uuid} is down ({gpu.down_reason or 'lost'})",
        )
    overrides = dict(reasons or {})
    absent: dict[str, str] = {}

    if target.is_mig:
        gi = next((g for g in gpu.mig_instances if g.id == target.gpu_instance_id), None)
        if gi is None:
            return Reading(
                snapshot.timestamp,
                error=f"GPU instance {target.gpu_instance_id} of {target.gpu_uuid} is gone",
            )
        utilization = None
        absent[UTILIZATION] = (
            "NVML has no utilization for MIG devices (the GPU instance's GPM SM activity is "
            "checked instead)"
        )
        gpm = gi.gpm
        memory = gi.memory_used_bytes
        gpm_scope = f"GPU instance {gi.id}"
    else:
        utilization = gpu.utilization.gpu
        gpm = gpu.gpm
        memory = gpu.memory.used_bytes
        gpm_scope = "this GPU"
        if utilization is None:
            absent[UTILIZATION] = (
                "not visible in this vGPU guest"
                if target.is_vgpu_guest
                else "NVML gave no utilization for this GPU (not supported)"
            )

    sm_active = gpm.sm_active if gpm is not None else None
    if sm_active is None:
        absent[GPM] = _gpm_reason(target, gpm_scope)
    if memory is None:
        absent[MEMORY] = "NVML gave no memory use for " + (
            f"GPU instance {target.gpu_instance_id}" if target.is_mig else "this GPU"
        )

    processes: tuple[ProcessReading, ...] | None = None
    if gpu.processes is None:
        absent[PROCESSES] = "the process list could not be read"
    else:
        listed = [
            p
            for p in gpu.processes
            if not target.is_mig
            or p.gpu_instance_id is None
            or p.gpu_instance_id == target.gpu_instance_id
        ]
        processes = tuple(
            ProcessReading(p.pid, p.used_memory_bytes, p.sm_utilization) for p in listed
        )
        if any(p.sm_utilization is None for p in listed):
            absent[PROCESS_UTILIZATION] = (
                "NVML has no per-process utilization on MIG-enabled GPUs"
                if target.is_mig
                else "NVML gave no per-process utilization here"
            )
    for key, why in overrides.items():
        if key in absent:
            absent[key] = why
    return Reading(
        timestamp=snapshot.timestamp,
        utilization=utilization,
        gpm_sm_active=sm_active,
        gpm_interval_s=gpm.interval_seconds if gpm is not None else None,
        memory_used_bytes=memory,
        processes=processes,
        absent=absent,
    )


def _gpm_reason(target: Target, scope: str) -> str:
    arch = (target.architecture or "").lower()
    if target.is_vgpu_guest:
        return "GPM is not available inside a vGPU guest"
    if arch and arch not in HOPPER_OR_NEWER and arch != "unknown":
        return f"GPM needs a Hopper or newer GPU; this one is {target.architecture}"
    return f"no GPM reading for {scope} (GPM not supported or not readable here)"


# ---------------------------------------------------------------------------- a window


def aggregate(readings: Sequence[Reading]) -> Measurement:
    """One value per reading over a measurement window.

    * NVML utilization: the median (the driver's own sample period is shorter than the window,
      so single readings jitter by a point; the median ignores the odd one).
    * GPM SM activity: the mean weighted by each reading's GPM interval; consecutive intervals
      tile the window, so this is the activity over the whole window.
    * Memory used: the median.
    * Processes: as listed in the last reading that had a list. Per-process SM utilization is the
      mean of the readings where the process had a non-zero value: NVML publishes per-process
      samples about once a second, and a reading that falls between two samples reads 0 for
      every process (no sample is "not busy" to the reader), which is not a measurement of the
      load. A process that reads 0 throughout measures 0.
    """
    errors = [r.error for r in readings if r.error]
    if errors:
        return Measurement(readings=len(readings), error=errors[-1])
    if not readings:
        return Measurement(readings=0, error="no reading arrived in the measurement window")
    absent: dict[str, str] = {}
    for r in readings:
        absent.update(r.absent)

    utils = tuple(r.utilization for r in readings if r.utilization is not None)
    utilization = statistics.median(utils) if utils else None

    weighted = [
        (r.gpm_sm_active, r.gpm_interval_s) for r in readings if r.gpm_sm_active is not None
    ]
    gpm: float | None = None
    gpm_seconds: float | None = None
    if weighted:
        if all(w is not None and w > 0 for _, w in weighted):
            gpm_seconds = sum(float(w or 0.0) for _, w in weighted)
            gpm = sum(v * float(w or 0.0) for v, w in weighted) / gpm_seconds
        else:
            gpm = statistics.fmean(v for v, _ in weighted)

    memories = [r.memory_used_bytes for r in readings if r.memory_used_bytes is not None]
    memory = int(statistics.median(memories)) if memories else None

    processes: dict[int, ProcessMeasurement] | None = None
    listed = [r.processes for r in readings if r.processes is not None]
    if listed:
        last = listed[-1]
        processes = {}
        for p in last:
            values = [
                q.sm_utilization
                for plist in listed
                for q in plist
                if q.pid == p.pid and q.sm_utilization is not None
            ]
            busy = [v for v in values if v > 0]
            if busy:
                sm: float | None = statistics.fmean(busy)
            elif values:
                sm = 0.0
            else:
                sm = None
            processes[p.pid] = ProcessMeasurement(
                pid=p.pid,
                used_memory_bytes=p.used_memory_bytes,
                sm_utilization=sm,
                sm_readings=len(busy),
                zero_readings=len(values) - len(busy),
            )
    # A reason only stands for a value that is missing in the result.
    present = {
        UTILIZATION: utilization is not None,
        GPM: gpm is not None,
        MEMORY: memory is not None,
        PROCESSES: processes is not None,
    }
    absent = {k: v for k, v in absent.items() if not present.get(k, False)}
    return Measurement(
        readings=len(readings),
        utilization=utilization,
        utilization_values=utils,
        gpm_sm_active=gpm,
        gpm_seconds=gpm_seconds,
        memory_used_bytes=memory,
        processes=processes,
        absent=absent,
    )
