"""The metric table: every family vgpumon exports, defined once.

Each :class:`Family` row says what an operator types into PromQL (the full name, ``_total`` included
for counters), its type, unit, help and label names, which collector fills the data, and how to pull
its samples out of a :class:`~vgpumon.model.Snapshot`. The Prometheus collector
(:mod:`vgpumon.metrics.exposition`), ``docs/metrics.md`` (:mod:`vgpumon.metrics.docs_gen`) and the
naming tests all read :data:`FAMILIES`, so a family cannot exist in one of them and not the others.

Families are built from *scopes*: a scope knows the identity labels of one kind of thing (a GPU, a
MIG GPU instance, a vGPU, ...) and how to walk the snapshot for it, so adding a family is one call::

    gauge(VGPU, "vgpumon_vgpu_encoder_average_fps", "Average encoder frame rate.",
          lambda v: v.encoder_average_fps, collector="vgpu")

The metric naming rules (docs/exporter.md, "Metric naming rules") are written once, in
:mod:`vgpumon.metrics.naming` (the tests check every family against them); the structure enforces
the data rules:

* a value that is ``None`` yields no sample (absent is not zero);
* per-GPU scopes skip GPUs that are down, except :data:`ALL_GPUS` (``vgpumon_gpu_up`` and the info);
* identity labels come first and are the scope's; descriptive data only in ``*_info`` families;
* enumerations are state sets (:func:`state_set`): one series per state, 1 for the current one;
* per-process series exist only with ``ExportOptions.processes`` and stop at ``processes_max``.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from vgpumon import __version__
from vgpumon.metrics.naming import COUNTER, GAUGE, unit_of
from vgpumon.model import (
    CC_ENVIRONMENTS,
    CC_MULTI_GPU_MODES,
    COLLECTOR_FAILURES,
    LICENSE_EXPIRY_STATUSES,
    MIGRATION_LIMITS,
    RECOVERY_ACTIONS,
    SCHEDULER_POLICIES,
    SHARE_STATES,
    VGPU_DEPARTURES,
    VGPU_LICENSE_STATES,
    VIRTUALIZATION_MODES,
    VM_STATES,
    CollectorStatus,
    DeviceAllocation,
    Gpm,
    Gpu,
    GpuInstanceVgpuCapacity,
    GpuMetering,
    GuestLicenseFeature,
    MigComputeInstance,
    MigGpuInstance,
    MigMeter,
    MigProfileCapacity,
    NvmlErrorCount,
    PodMeter,
    Process,
    ProcessMeter,
    SamplingCadence,
    Snapshot,
    VgpuDepartures,
    VgpuInstance,
    VgpuMeter,
    VgpuProcess,
    VgpuScheduler,
    VgpuSchedulerUsage,
    VgpuShare,
    VgpuType,
    guest_driver_matches_host,
    vgpu_migration_ready,
)

HOST_VGPU_MODES = ("non_sriov", "sriov")
COMPUTE_MODES = ("default", "exclusive_thread", "prohibited", "exclusive_process")
GUEST_LICENSE_STATES = ("unlicensed", "licensed")
EXPORTER = "exporter"  # the "collector" of the exporter's own health families

LabelValues = tuple[str, ...]
Sample = tuple[LabelValues, float]
Values = Iterable[tuple[Sequence[str], Any]]  # (extra label values, value) of one item
T = TypeVar("T")


@dataclass(frozen=True)
class ExportOptions:
    """Exposition choices that are not in the snapshot (flags of ``vgpumon serve``)."""

    processes: bool = False  # per-process series are opt-in: their pids churn the TSDB
    processes_max: int = 100  # at most this many processes (host and vGPU guest together)
    # Per-pod value series (namespace/pod/container labels) are opt-in too: pods churn like pids.
    pod_series: bool = False
    # Families from outside the table, rendered after it: the NVML fields an operator declared
    # in the serve config (:mod:`vgpumon.metrics.extra_fields`). Options, not table rows, because
    # they change with a config reload.
    families: tuple[Family, ...] = ()


# --------------------------------------------------------------------------- scopes


@dataclass(frozen=True)
class Scope(Generic[T]):
    """One kind of thing that series are about: its identity labels and how to find them."""

    section: str
    labels: tuple[str, ...]
    walk: Callable[[Snapshot, ExportOptions], Iterable[tuple[LabelValues, T]]]


def _gpu_id(g: Gpu) -> LabelValues:
    return (str(g.index), g.uuid)


def _up(s: Snapshot) -> Iterator[Gpu]:
    return (g for g in s.gpus if g.up)


def _host(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Snapshot]]:
    yield (), s


def _all_gpus(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Gpu]]:
    return ((_gpu_id(g), g) for g in s.gpus)


def _up_gpus(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Gpu]]:
    return ((_gpu_id(g), g) for g in _up(s))


def _collectors(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, CollectorStatus]]:
    return (((c.name,), c) for c in s.collectors)


def _cadences(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, SamplingCadence]]:
    return (((c.name,), c) for c in s.health.cadences)


def _nvml_errors(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, NvmlErrorCount]]:
    return (((e.function, e.error), e) for e in s.nvml_errors)


def _mig_gis(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, MigGpuInstance]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for gi in g.mig_instances:
            yield (gpu, uuid, str(gi.id)), gi


def _mig_cis(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, tuple[MigGpuInstance, MigComputeInstance]]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for gi in g.mig_instances:
            for ci in gi.compute_instances:
                yield (gpu, uuid, str(gi.id), str(ci.id)), (gi, ci)


def _collector_reasons(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, int]]:
    for c in s.collectors:
        for reason, gpus in sorted(c.unsupported.items()):
            yield (c.name, reason), gpus


def _mig_vgpu_gis(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, tuple[Gpu, MigGpuInstance]]]:
    """GPU instances of vGPU hosts: where MIG-backed vGPUs live."""
    for g in _up(s):
        if g.virtualization_mode != "host_vgpu":
            continue
        gpu, uuid = _gpu_id(g)
        for gi in g.mig_instances:
            yield (gpu, uuid, str(gi.id)), (g, gi)


def _mig_vgpu_capacity(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, GpuInstanceVgpuCapacity]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for gi in g.mig_instances:
            for c in gi.vgpu_capacity:
                yield (gpu, uuid, str(gi.id), str(c.type_id)), c


def _vgpu_hosts(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Gpu]]:
    # Only a vGPU host can say how many vGPUs it runs; elsewhere "0" would be a made-up value.
    # So would an empty list where the vgpu reader did not run (--no-collector.vgpu): the mode
    # comes from the device reader, the instances only from the vgpu reader.
    if not any(c.name == "vgpu" for c in s.collectors):
        return iter(())
    return ((_gpu_id(g), g) for g in _up(s) if g.virtualization_mode == "host_vgpu")


def _vgpus(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuInstance]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)  # once per GPU: the largest scope, walked on every render
        for v in g.vgpu_instances:
            yield (gpu, uuid, str(v.vgpu_id)), v


def _vms(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Process]]:
    """The VMs a hypervisor's process list shows on its GPUs (``kind`` vm: an agentless ESXi
    host's VM names and world IDs); few and long-lived, so not behind the per-process opt-in."""
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for p in g.processes or ():
            if p.kind == "vm":
                yield (gpu, uuid, str(p.pid)), p


def _vgpu_types(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuType]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for t in g.vgpu_types:
            yield (gpu, uuid, str(t.type_id)), t


def _mig_profiles(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, MigProfileCapacity]]:
    for g in _up(s):
        seen: set[str] = set()
        for p in g.mig_profiles:
            if p.name and p.name not in seen:  # the profile name is the identity label
                seen.add(p.name)
                yield (*_gpu_id(g), p.name), p


def _vgpu_migration(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, tuple[str | None, Gpu, VgpuInstance]]]:
    driver = s.driver.driver_version
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for v in g.vgpu_instances:
            yield (gpu, uuid, str(v.vgpu_id)), (driver, g, v)


def _gi_label(gpu_instance_id: int | None) -> str:
    # An empty label value is the same as no label in PromQL: time-sliced schedulers have none.
    return "" if gpu_instance_id is None else str(gpu_instance_id)


def _schedulers(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuScheduler]]:
    for g in _up(s):
        for sch in g.vgpu_schedulers:
            yield (*_gpu_id(g), _gi_label(sch.gpu_instance_id)), sch


def _scheduler_usage(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, VgpuSchedulerUsage]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for sch in g.vgpu_schedulers:
            gi = _gi_label(sch.gpu_instance_id)
            for u in sch.usage:
                yield (gpu, uuid, gi, str(u.vgpu_id)), u


def _encoder_usage(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, VgpuSchedulerUsage]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for sch in g.vgpu_encoder_schedulers:
            gi = _gi_label(sch.gpu_instance_id)
            for u in sch.usage:
                yield (gpu, uuid, gi, sch.engine, str(u.vgpu_id)), u


def _encoder_shares(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuShare]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for sch in g.vgpu_encoder_schedulers:
            gi = _gi_label(sch.gpu_instance_id)
            for v in sch.shares:
                yield (gpu, uuid, gi, sch.engine, str(v.vgpu_id)), v


def _scheduler_shares(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuShare]]:
    for g in _up(s):
        gpu, uuid = _gpu_id(g)
        for sch in g.vgpu_schedulers:
            gi = _gi_label(sch.gpu_instance_id)
            for v in sch.shares:
                yield (gpu, uuid, gi, str(v.vgpu_id)), v


def _departures(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuDepartures]]:
    # Only where the VMs' states are known (libvirt): no series is not "none vanished".
    return ((_gpu_id(g), g.vgpu_departures) for g in _up(s) if g.vgpu_departures is not None)


def _guest_features(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, GuestLicenseFeature]]:
    for g in _up(s):
        seen: set[str] = set()
        for f in g.guest_licenses:
            if f.feature not in seen:  # two features NVML cannot name would both be "unknown"
                seen.add(f.feature)
                yield (*_gpu_id(g), f.feature), f


@dataclass(frozen=True)
class ProcessWindow:
    """The processes that get series this scrape: host ones first, then vGPU guest ones."""

    host: tuple[tuple[Gpu, Process], ...]
    guest: tuple[tuple[Gpu, VgpuProcess], ...]
    truncated: bool


def process_window(s: Snapshot, o: ExportOptions) -> ProcessWindow:
    if not o.processes:
        return ProcessWindow((), (), False)
    # The VMs of a hypervisor's process list are the VM families' (not behind the opt-in).
    host = [(g, p) for g in _up(s) for p in (g.processes or ()) if p.kind != "vm"]
    guest = [(g, p) for g in _up(s) for p in g.vgpu_processes]
    room = max(0, o.processes_max)
    kept_host = host[:room]
    kept_guest = guest[: max(0, room - len(kept_host))]
    truncated = len(kept_host) + len(kept_guest) < len(host) + len(guest)
    return ProcessWindow(tuple(kept_host), tuple(kept_guest), truncated)


def _processes(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Process]]:
    for g, p in process_window(s, o).host:
        labels = (
            *_gpu_id(g),
            str(p.pid),
            p.name or "",
            _gi_label(p.gpu_instance_id),
            _gi_label(p.compute_instance_id),
        )
        yield labels, p


def _vgpu_processes(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuProcess]]:
    for g, p in process_window(s, o).guest:
        yield (*_gpu_id(g), str(p.vgpu_id), str(p.pid), p.name or ""), p


def _process_host(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, ProcessWindow]]:
    if o.processes:  # the flag only exists where per-process series were asked for
        yield (), process_window(s, o)


def _allocated(s: Snapshot) -> Iterator[tuple[Gpu, DeviceAllocation]]:
    """Allocations the kubelet reported that are devices of an up GPU of this snapshot."""
    if not s.allocations:
        return
    gpus = {g.uuid: g for g in _up(s)}
    for a in s.allocations:
        g = gpus.get(a.gpu_uuid) if a.gpu_uuid else None
        if g is not None:
            yield g, a


def _allocations(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, tuple[Gpu, DeviceAllocation]]]:
    return ((_gpu_id(g), (g, a)) for g, a in _allocated(s))


def _pod_devices(
    s: Snapshot, o: ExportOptions
) -> Iterator[tuple[LabelValues, tuple[Gpu, DeviceAllocation]]]:
    if not o.pod_series:
        return
    for g, a in _allocated(s):
        if a.pod is not None:
            labels = (
                *_gpu_id(g),
                _gi_label(a.gpu_instance_id),
                _gi_label(a.vgpu_id),
                a.namespace or "",
                a.pod,
                a.container or "",
            )
            yield labels, (g, a)


# Metering (vgpumon.collect.metering): usage counters per tenant, on GPUs the stage metered.
def _metered(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, GpuMetering]]:
    return ((_gpu_id(g), g.metering) for g in _up(s) if g.metering is not None)


def _metered_kinds(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, float]]:
    for ids, m in _metered(s, o):
        for kind, joules in sorted(m.unattributed_energy_joules.items()):
            yield (*ids, kind), joules


def _vgpu_meters(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, VgpuMeter]]:
    for ids, m in _metered(s, o):
        for v in m.vgpus:
            yield (*ids, str(v.vgpu_id)), v


def _mig_meters(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, MigMeter]]:
    for ids, m in _metered(s, o):
        for gi in m.migs:
            yield (*ids, str(gi.gpu_instance_id)), gi


def _process_meters(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, ProcessMeter]]:
    # The same processes as the per-process gauges: opt-in, and within processes_max.
    window = process_window(s, o)
    kept = {(g.uuid, p.pid, p.gpu_instance_id, p.compute_instance_id) for g, p in window.host}
    for g in _up(s):
        for p in g.metering.processes if g.metering else ():
            if (g.uuid, p.pid, p.gpu_instance_id, p.compute_instance_id) in kept:
                labels = (
                    *_gpu_id(g),
                    str(p.pid),
                    p.name or "",
                    _gi_label(p.gpu_instance_id),
                    _gi_label(p.compute_instance_id),
                )
                yield labels, p


def _pod_meters(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, PodMeter]]:
    for ids, m in _metered(s, o):
        for p in m.pods:
            yield (*ids, p.namespace, p.pod, p.container), p


# Xids the alert rules tell apart (packaging/prometheus/vgpumon.rules.yml), after the resolution
# buckets of NVIDIA's Xid catalog. Critical: the GPU (or its memory, NVLink or GSP firmware) needs a
# reset, a drain or service. Informational: the running application is at fault or the hardware
# already recovered; worth a look, not a page.
XID_CRITICAL = (46, 48, 62, 64, 74, 79, 95, 109, 119, 120, 140, 154)
XID_INFORMATIONAL = (13, 31, 43, 45, 63, 68, 92, 94)
XID_CATALOG = tuple(sorted((*XID_CRITICAL, *XID_INFORMATIONAL)))


def _xid_gpus(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Gpu]]:
    # Only where the xid reader ran: a zero is "watched, none seen", never "not watched".
    if not any(c.name == "xid" for c in s.collectors):
        return iter(())
    return _up_gpus(s, o)


def _xid_counts(g: Gpu) -> list[tuple[tuple[str], int]]:
    """Every catalogued Xid at 0 until it happens, so ``increase()`` sees the first one.

    A counter that appears at its first event has no earlier sample, and ``increase()`` over a
    window with one sample is empty: the first Xid 79 on a GPU would never fire an alert.
    Xids outside the catalog still appear at their first event.
    """
    counts = dict.fromkeys(XID_CATALOG, 0) | g.xid_errors
    return [((str(x),), n) for x, n in sorted(counts.items())]


def _http_server(s: Snapshot, o: ExportOptions) -> Iterator[tuple[LabelValues, Any]]:
    """The HTTP server's counts: only a snapshot-like object that carries them has any (the
    server renders these families apart, from its own counts; a snapshot has none)."""
    stats = getattr(s, "http_server", None)
    if stats is not None:
        yield (), stats


def _counts(counts: dict[Any, int]) -> Values:
    return [((str(key),), value) for key, value in sorted(counts.items())]


# The HTTP server's families: rendered from the server's counts (vgpumon.export.serverstats),
# never from a snapshot, which has none.
HTTP_SERVER_PREFIX = "vgpumon_http_"

GPU_LABELS = ("gpu", "uuid")
HOST: Scope[Snapshot] = Scope("Exporter health", (), _host)
HTTP_SERVER: Scope[Any] = Scope("Exporter health", (), _http_server)
COLLECTOR: Scope[CollectorStatus] = Scope("Exporter health", ("collector",), _collectors)
CADENCE: Scope[SamplingCadence] = Scope("Exporter health", ("reading",), _cadences)
NVML_ERROR: Scope[NvmlErrorCount] = Scope("Exporter health", ("function", "error"), _nvml_errors)
COLLECTOR_REASON: Scope[int] = Scope("Exporter health", ("collector", "reason"), _collector_reasons)
ALL_GPUS: Scope[Gpu] = Scope("Physical GPU", GPU_LABELS, _all_gpus)
GPU: Scope[Gpu] = Scope("Physical GPU", GPU_LABELS, _up_gpus)
GPU_XID: Scope[Gpu] = Scope("Physical GPU", GPU_LABELS, _xid_gpus)
PROCESS_HOST: Scope[ProcessWindow] = Scope("Processes (opt-in)", (), _process_host)
PROCESS: Scope[Process] = Scope(
    "Processes (opt-in)",
    (*GPU_LABELS, "pid", "process_name", "gpu_instance", "compute_instance"),
    _processes,
)
VGPU_PROCESS: Scope[VgpuProcess] = Scope(
    "Processes (opt-in)", (*GPU_LABELS, "vgpu_id", "pid", "process_name"), _vgpu_processes
)
MIG: Scope[MigGpuInstance] = Scope("MIG", (*GPU_LABELS, "gpu_instance"), _mig_gis)
MIG_CI: Scope[tuple[MigGpuInstance, MigComputeInstance]] = Scope(
    "MIG", (*GPU_LABELS, "gpu_instance", "compute_instance"), _mig_cis
)
MIG_VGPU: Scope[tuple[Gpu, MigGpuInstance]] = Scope(
    "MIG", (*GPU_LABELS, "gpu_instance"), _mig_vgpu_gis
)
MIG_VGPU_TYPE: Scope[GpuInstanceVgpuCapacity] = Scope(
    "MIG", (*GPU_LABELS, "gpu_instance", "vgpu_type_id"), _mig_vgpu_capacity
)
VGPU_HOST: Scope[Gpu] = Scope("vGPU host", GPU_LABELS, _vgpu_hosts)
VGPU: Scope[VgpuInstance] = Scope("vGPU host", (*GPU_LABELS, "vgpu_id"), _vgpus)
VM: Scope[Process] = Scope("vGPU host", (*GPU_LABELS, "vm_id"), _vms)
VGPU_TYPE: Scope[VgpuType] = Scope("vGPU host", (*GPU_LABELS, "vgpu_type_id"), _vgpu_types)
MIG_PROFILE: Scope[MigProfileCapacity] = Scope(
    "MIG", (*GPU_LABELS, "gpu_instance_profile"), _mig_profiles
)
VGPU_MIGRATION: Scope[tuple[str | None, Gpu, VgpuInstance]] = Scope(
    "vGPU host", (*GPU_LABELS, "vgpu_id"), _vgpu_migration
)
SCHEDULER: Scope[VgpuScheduler] = Scope(
    "vGPU scheduler", (*GPU_LABELS, "gpu_instance"), _schedulers
)
SCHEDULER_USAGE: Scope[VgpuSchedulerUsage] = Scope(
    "vGPU scheduler", (*GPU_LABELS, "gpu_instance", "vgpu_id"), _scheduler_usage
)
DEPARTURES: Scope[VgpuDepartures] = Scope("vGPU host", GPU_LABELS, _departures)
ENCODER_USAGE: Scope[VgpuSchedulerUsage] = Scope(
    "vGPU scheduler", (*GPU_LABELS, "gpu_instance", "engine", "vgpu_id"), _encoder_usage
)
ENCODER_SHARE: Scope[VgpuShare] = Scope(
    "vGPU scheduler", (*GPU_LABELS, "gpu_instance", "engine", "vgpu_id"), _encoder_shares
)
SCHEDULER_SHARE: Scope[VgpuShare] = Scope(
    "vGPU scheduler", (*GPU_LABELS, "gpu_instance", "vgpu_id"), _scheduler_shares
)
GUEST: Scope[GuestLicenseFeature] = Scope("Guest", (*GPU_LABELS, "feature"), _guest_features)
ALLOCATION: Scope[tuple[Gpu, DeviceAllocation]] = Scope("Kubernetes", GPU_LABELS, _allocations)
POD: Scope[tuple[Gpu, DeviceAllocation]] = Scope(
    "Kubernetes",
    (*GPU_LABELS, "gpu_instance", "vgpu_id", "namespace", "pod", "container"),
    _pod_devices,
)

METERED: Scope[GpuMetering] = Scope("Metering", GPU_LABELS, _metered)
METERED_KIND: Scope[float] = Scope("Metering", (*GPU_LABELS, "kind"), _metered_kinds)
METER_VGPU: Scope[VgpuMeter] = Scope("Metering", (*GPU_LABELS, "vgpu_id"), _vgpu_meters)
METER_MIG: Scope[MigMeter] = Scope("Metering", (*GPU_LABELS, "gpu_instance"), _mig_meters)
METER_PROCESS: Scope[ProcessMeter] = Scope(
    "Metering",
    (*GPU_LABELS, "pid", "process_name", "gpu_instance", "compute_instance"),
    _process_meters,
)
METER_POD: Scope[PodMeter] = Scope(
    "Metering", (*GPU_LABELS, "namespace", "pod", "container"), _pod_meters
)

SECTIONS = (
    "Exporter health",
    "Physical GPU",
    "Processes (opt-in)",
    "MIG",
    "vGPU host",
    "vGPU scheduler",
    "Guest",
    "Kubernetes",
    "Metering",
)


# --------------------------------------------------------------------------- the family row


# How a row's samples come out of its scope, said as data rather than only as the ``samples``
# function, so that the renderer can keep each entity's formatted lines between snapshots and
# format only what changed (vgpumon.metrics.exposition). Each describes exactly what the row's
# ``samples`` yields; the renderer's tests hold the two to the same bytes.


@dataclass(frozen=True)
class OneValue(Generic[T]):
    """One sample per scope item, labelled with the item's identity alone (none where None)."""

    scope: Scope[T]
    value: Callable[[T], Any]


@dataclass(frozen=True)
class StateValues(Generic[T]):
    """A state set: one sample per state, 1 for ``current(item)``; none while that is None."""

    scope: Scope[T]
    states: tuple[str, ...]
    current: Callable[[T], str | None]


@dataclass(frozen=True)
class InfoValues(Generic[T]):
    """One sample of value 1 per item, its descriptive labels from ``values(item)`` (str() of
    each, None empty); none where ``values`` gives None. The values are str, int or None, never
    bool or float: the renderer keeps an entity's line while its values compare equal, and
    True == 1 == 1.0 would print otherwise."""

    scope: Scope[T]
    values: Callable[[T], Sequence[str | int | None] | None]


@dataclass(frozen=True)
class LabeledValues(Generic[T]):
    """Several samples per item: ``values(item)`` gives (extra label values, value) pairs."""

    scope: Scope[T]
    values: Callable[[T], Values]


Rows = OneValue[Any] | StateValues[Any] | InfoValues[Any] | LabeledValues[Any]


@dataclass(frozen=True)
class Family:
    name: str  # as queried: counters include "_total"
    type: str  # GAUGE | COUNTER
    unit: str  # one of UNITS or "" (a count, a flag, a state, an info)
    help: str
    labels: tuple[str, ...]  # identity labels of the scope, then the family's own
    section: str
    collector: str  # the reader (``--collector.NAME``) whose data this is, or "exporter"
    samples: Callable[[Snapshot, ExportOptions], Iterable[Sample]] = field(repr=False)
    info: bool = False  # descriptive labels, value always 1
    # What ``samples`` yields, as data (None: only ``samples`` knows, as for families made
    # outside the table); must say the same as ``samples`` wherever it is set.
    rows: Rows | None = field(default=None, repr=False, compare=False)

    @property
    def base_name(self) -> str:
        """The name without the counter suffix, as prometheus-client wants it."""
        return self.name[: -len("_total")] if self.type == COUNTER else self.name


# Within a render (:func:`walk_cache`), the walk of each scope: the families of one scope
# (sixteen for a vGPU) walk the same items with the same identity labels, so a render walks each
# scope once. Emptied when the last render in progress ends, so nothing outlives a render.
_WALKS: dict[int, tuple[Snapshot, ExportOptions, list[tuple[LabelValues, Any]]]] = {}
_rendering = 0


@contextlib.contextmanager
def walk_cache() -> Iterator[None]:
    """Walk each scope once per snapshot while this is open (the renderer opens it)."""
    global _rendering
    _rendering += 1
    try:
        yield
    finally:
        _rendering -= 1
        if not _rendering:
            _WALKS.clear()


def walked(scope: Scope[T], s: Snapshot, o: ExportOptions) -> Iterable[tuple[LabelValues, T]]:
    """``scope.walk(s, o)``; inside :func:`walk_cache`, walked once per snapshot and options."""
    if not _rendering:
        return scope.walk(s, o)
    key = id(scope)
    got = _WALKS.get(key)
    if got is not None and got[0] is s and got[1] is o:
        return got[2]
    items = list(scope.walk(s, o))
    _WALKS[key] = (s, o, items)
    return items


def _number(value: Any) -> float | None:
    if value is None:
        return None
    return float(value)  # bool -> 1.0 / 0.0


def _family(
    scope: Scope[T],
    name: str,
    type_: str,
    help_: str,
    extra: tuple[str, ...],
    values: Callable[[T], Values],
    collector: str,
    rows: Rows,
    info: bool = False,
) -> Family:
    def samples(s: Snapshot, o: ExportOptions) -> Iterator[Sample]:
        for ids, item in walked(scope, s, o):
            for labels, value in values(item):
                number = _number(value)
                if number is not None:
                    yield (*ids, *labels), number

    return Family(
        name=name,
        type=type_,
        unit=unit_of(name),
        help=help_,
        labels=(*scope.labels, *extra),
        section=scope.section,
        collector=collector,
        samples=samples,
        info=info,
        rows=rows,
    )


def _single(
    scope: Scope[T], name: str, type_: str, help_: str, value: Callable[[T], Any], collector: str
) -> Family:
    """One sample per scope item, labelled with the item's identity alone (none where ``value``
    gives None): the commonest row, so its samples skip the extra-label machinery."""

    def samples(s: Snapshot, o: ExportOptions) -> Iterator[Sample]:
        for ids, item in walked(scope, s, o):
            got = value(item)
            if got is not None:
                yield ids, float(got)  # bool -> 1.0 / 0.0

    return Family(
        name=name,
        type=type_,
        unit=unit_of(name),
        help=help_,
        labels=scope.labels,
        section=scope.section,
        collector=collector,
        samples=samples,
        rows=OneValue(scope, value),
    )


def gauge(
    scope: Scope[T], name: str, help_: str, value: Callable[[T], Any], *, collector: str
) -> Family:
    """One sample per scope item (none where ``value`` gives None)."""
    return _single(scope, name, GAUGE, help_, value, collector)


def counter(
    scope: Scope[T], name: str, help_: str, value: Callable[[T], Any], *, collector: str
) -> Family:
    return _single(scope, name, COUNTER, help_, value, collector)


def labeled(
    scope: Scope[T],
    name: str,
    help_: str,
    labels: tuple[str, ...],
    values: Callable[[T], Values],
    *,
    collector: str,
    type_: str = GAUGE,
) -> Family:
    """Several samples per item, told apart by ``labels`` (sensor, clock, direction, ...)."""
    return _family(
        scope, name, type_, help_, labels, values, collector, LabeledValues(scope, values)
    )


def state_set(
    scope: Scope[T],
    name: str,
    help_: str,
    label: str,
    states: Sequence[str],
    current: Callable[[T], str | None],
    *,
    collector: str,
) -> Family:
    """An enumeration: every state is a series, 1 for the current one; nothing when unknown."""

    def values(item: T) -> Values:
        now = current(item)
        if now is None:
            return []
        return [((st,), 1.0 if st == now else 0.0) for st in states]

    rows = StateValues(scope, tuple(states), current)
    return _family(scope, name, GAUGE, help_, (label,), values, collector, rows)


def info(
    scope: Scope[T],
    name: str,
    help_: str,
    labels: tuple[str, ...],
    values: Callable[[T], Sequence[str | int | None] | None],
    *,
    collector: str,
) -> Family:
    """Descriptive labels with value 1 (joined with ``group_left``); None labels are empty."""

    def one(item: T) -> Values:
        got = values(item)
        if got is None:
            return []
        return [(tuple("" if v is None else str(v) for v in got), 1.0)]

    rows = InfoValues(scope, values)
    return _family(scope, name, GAUGE, help_, labels, one, collector, rows, info=True)


def _pairs(**values: Any) -> Values:
    """``sensor="gpu"``-style extra label values -> samples (the keyword is the label value)."""
    return [((k,), v) for k, v in values.items()]


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


# --------------------------------------------------------------------------- derived values


def _compute_process_count(g: Gpu) -> int | None:
    if g.processes is None:
        return None
    return len({p.pid for p in g.processes if p.kind in ("compute", "mps")})


def _clock_events(g: Gpu) -> Values:
    active = set(g.clock_events.active)
    return [((r,), 1.0 if r in active else 0.0) for r in g.clock_events.supported]


def _mig_info(item: tuple[MigGpuInstance, MigComputeInstance]) -> tuple[str | int | None, ...]:
    gi, ci = item
    return (gi.profile_name, ci.mig_uuid, gi.placement_start, gi.placement_size)


def _vgpu_info(v: VgpuInstance) -> tuple[str | int | None, ...]:
    return (
        v.uuid,
        v.type_name,
        v.type_class,
        v.vm_id,
        v.vm_id_type,
        v.guest_driver_version,
        v.mdev_uuid,
        v.gpu_instance_id,
        v.placement_id,
        v.vm.name if v.vm else None,
        v.vm.uuid if v.vm else None,
        v.vm.title if v.vm else None,
        v.vf_pci_bus_id,
    )


def _allocation_info(item: tuple[Gpu, DeviceAllocation]) -> tuple[str | int | None, ...]:
    _, a = item
    return (
        a.resource,
        a.device_id,
        a.kind,
        a.gpu_instance_id,
        a.compute_instance_id,
        a.vgpu_id,
        a.namespace,
        a.pod,
        a.container,
        a.vm_name,
        a.claim_namespace,
        a.claim_name,
    )


def _device_usage(item: tuple[Gpu, DeviceAllocation]) -> tuple[float | None, int | None]:
    """(utilization ratio, memory used bytes) of the allocated device itself."""
    g, a = item
    if a.kind == "vgpu":
        v = next((v for v in g.vgpu_instances if v.vgpu_id == a.vgpu_id), None)
        return (v.utilization.sm, v.framebuffer_used_bytes) if v else (None, None)
    if a.kind == "mig":
        gi = next((gi for gi in g.mig_instances if gi.id == a.gpu_instance_id), None)
        if gi is None:
            return None, None
        return (gi.gpm.sm_active if gi.gpm else None), gi.memory_used_bytes
    return g.utilization.gpu, g.memory.used_bytes


def _license_state(state: str | None, licensed: bool | None) -> str | None:
    """The named state; drivers that only say licensed yes/no still give one of two states."""
    if state is not None:
        return state
    if licensed is not None:
        return "licensed" if licensed else "unlicensed"
    return None


# --------------------------------------------------------------------------- GPM readings

# The GPM readings a GPU and a MIG instance both have (model.Gpm), in their order in the table:
# the family's name after the scope's prefix, the reading, and the help text for a GPU and for an
# instance. gpm_families() writes one scope's families from these rows; the GPU scope and the MIG
# scope each take them once.
GPM_READINGS: tuple[tuple[str, str, str, str], ...] = (
    (
        "sm_active_ratio",
        "sm_active",
        "GPM: fraction of SM cycles with work, averaged over all SMs.",
        "GPM: fraction of the instance's SM cycles with work.",
    ),
    (
        "sm_occupancy_ratio",
        "sm_occupancy",
        "GPM: resident warps as a fraction of the maximum.",
        "GPM: resident warps in the instance as a fraction of the maximum.",
    ),
    (
        "tensor_active_ratio",
        "tensor_active",
        "GPM: fraction of cycles the tensor cores were busy.",
        "GPM: fraction of cycles the instance's tensor cores were busy.",
    ),
    (
        "dram_active_ratio",
        "dram_active",
        "GPM: fraction of cycles the memory interface was busy.",
        "GPM: fraction of cycles the instance's memory interface was busy.",
    ),
    (
        "graphics_active_ratio",
        "graphics_active",
        "GPM: fraction of time the graphics engine was busy.",
        "GPM: fraction of time the instance's graphics engine was busy.",
    ),
)
GPM_PIPES_HELP = (
    "GPM: fraction of cycles each floating-point pipe was busy.",
    "GPM: fraction of cycles each floating-point pipe of the instance was busy.",
)


def gpm_families(
    scope: Scope[T], prefix: str, gpm: Callable[[T], Gpm | None], *, instance: bool
) -> tuple[Family, ...]:
    """The GPM families of one scope (``prefix`` ``vgpumon_gpu_`` or ``vgpumon_mig_``), read from
    ``gpm(item)``; ``instance`` picks the MIG instance's help texts."""

    def reading(attribute: str) -> Callable[[T], float | None]:
        def value(item: T) -> float | None:
            got = gpm(item)
            return None if got is None else getattr(got, attribute)

        return value

    def pipes(item: T) -> Values:
        got = gpm(item)
        if got is None:
            return []
        return _pairs(fp64=got.fp64_active, fp32=got.fp32_active, fp16=got.fp16_active)

    return (
        *(
            gauge(scope, prefix + name, mig if instance else whole, reading(attr), collector="gpm")
            for name, attr, whole, mig in GPM_READINGS
        ),
        labeled(
            scope,
            prefix + "pipe_active_ratio",
            GPM_PIPES_HELP[instance],
            ("pipe",),
            pipes,
            collector="gpm",
        ),
    )


GPU_GPM = gpm_families(GPU, "vgpumon_gpu_", lambda g: g.gpm, instance=False)
MIG_GPM = gpm_families(MIG, "vgpumon_mig_", lambda gi: gi.gpm, instance=True)
# Referred to elsewhere (the /metrics parser, validate's messages).
GPU_SM_ACTIVE_RATIO = GPU_GPM[0]
MIG_SM_ACTIVE_RATIO = MIG_GPM[0]


# --------------------------------------------------------------------------- the table

_PROC = "processes"

# A row bound to a name, ``(GPU_UP := gauge(...))``, is one that code elsewhere refers to: the
# /metrics parser (:mod:`vgpumon.metrics.parse`) and validate's messages take its name and labels
# from the row itself, so a family is renamed here and nowhere else.
FAMILIES: tuple[Family, ...] = (
    # ---- exporter health
    info(
        HOST,
        "vgpumon_build_info",
        "vgpumon's version and the Python it runs on.",
        ("version", "python_version"),
        lambda s: (__version__, platform.python_version()),
        collector=EXPORTER,
    ),
    info(
        HOST,
        "vgpumon_driver_info",
        "NVIDIA driver, NVML and CUDA driver versions.",
        ("driver_version", "nvml_version", "cuda_driver_version"),
        lambda s: (
            (s.driver.driver_version, s.driver.nvml_version, s.driver.cuda_driver_version)
            if s.driver.driver_version or s.driver.nvml_version
            else None
        ),
        collector=EXPORTER,
    ),
    info(
        HOST,
        "vgpumon_nvml_module_info",
        "The NVML module read: pynvml, the simulator (sim:SCENARIO) or another module.",
        ("module",),
        lambda s: (s.source,),
        collector=EXPORTER,
    ),
    (
        UP := gauge(
            HOST,
            "vgpumon_up",
            "1 when NVML is initialised and the last sampling cycle finished.",
            lambda s: s.health.up,
            collector=EXPORTER,
        )
    ),
    gauge(
        COLLECTOR,
        "vgpumon_scrape_collector_success",
        "1 when the collector ran in the last cycle and read every GPU without an unexpected "
        "failure; 0 when it failed (on some GPU every NVML call it made failed, or its main "
        "reading did) or did not run (NVML down, no GPU readable).",
        lambda c: c.success,
        collector=EXPORTER,
    ),
    gauge(
        COLLECTOR,
        "vgpumon_scrape_collector_duration_seconds",
        "Time the collector took in the last cycle, summed over GPUs.",
        lambda c: c.duration_seconds,
        collector=EXPORTER,
    ),
    gauge(
        COLLECTOR_REASON,
        "vgpumon_scrape_collector_unsupported_gpus",
        "GPUs on which the collector read nothing because the driver or the NVML module lacks "
        "its calls, by NVML's reason (function_not_found: older than the call; not_supported: "
        "not on this GPU). Its series are absent there, never 0.",
        lambda n: n,
        collector=EXPORTER,
    ),
    state_set(
        COLLECTOR,
        "vgpumon_scrape_collector_failure_reason",
        "Why the collector failed in the last cycle, where the source tells (an agentless host's "
        "vGPU report: empty, exit_status, unparsable, too_large or timeout, the host then "
        "served from its device report); no series while it succeeds.",
        "reason",
        COLLECTOR_FAILURES,
        lambda c: c.failure,
        collector=EXPORTER,
    ),
    (
        LAST_SAMPLE_TIMESTAMP_SECONDS := gauge(
            HOST,
            "vgpumon_last_sample_timestamp_seconds",
            "When the served sample was taken (Unix time); scrapes never sample.",
            lambda s: s.timestamp,
            collector=EXPORTER,
        )
    ),
    gauge(
        HOST,
        "vgpumon_sampler_wedged",
        "1 when the last cycle overran its deadline and was abandoned; older data is served.",
        lambda s: s.health.wedged,
        collector=EXPORTER,
    ),
    (
        SAMPLER_CYCLES_TOTAL := counter(
            HOST,
            "vgpumon_sampler_cycles_total",
            "Sampling cycles started.",
            lambda s: s.health.cycles_total,
            collector=EXPORTER,
        )
    ),
    counter(
        HOST,
        "vgpumon_sampler_cycles_abandoned_total",
        "Sampling cycles abandoned at their deadline.",
        lambda s: s.health.cycles_abandoned_total,
        collector=EXPORTER,
    ),
    gauge(
        HOST,
        "vgpumon_sampler_last_cycle_duration_seconds",
        "Wall time of the last sampling cycle.",
        lambda s: s.health.last_cycle_duration_seconds,
        collector=EXPORTER,
    ),
    (
        SAMPLER_INTERVAL_SECONDS := gauge(
            HOST,
            "vgpumon_sampler_interval_seconds",
            "Time between sampling cycles (--interval).",
            lambda s: s.health.interval_seconds,
            collector=EXPORTER,
        )
    ),
    (
        SAMPLER_CADENCE_SECONDS := gauge(
            CADENCE,
            "vgpumon_sampler_cadence_seconds",
            "How often the value is read (--interval.READING, at least --interval); between "
            "reads the last value stands, and averages (GPM, per-process utilization) cover "
            "the time since the previous read.",
            lambda c: c.seconds,
            collector=EXPORTER,
        )
    ),
    state_set(
        HOST,
        "vgpumon_sampler_dispatch",
        "How the last cycle read the GPUs: one after another (serial) or all at once (parallel).",
        "mode",
        ("parallel", "serial"),
        lambda s: s.health.dispatch,
        collector=EXPORTER,
    ),
    counter(
        NVML_ERROR,
        "vgpumon_nvml_errors_total",
        "NVML calls that failed, by function and error (unsupported ones count once per GPU).",
        lambda e: e.count,
        collector=EXPORTER,
    ),
    # ---- exporter health: the HTTP server (vgpumon.export.serverstats; docs/reliability.md)
    gauge(
        HTTP_SERVER,
        "vgpumon_http_connections",
        "HTTP connections open now, TLS handshakes under way included.",
        lambda h: h.open,
        collector=EXPORTER,
    ),
    counter(
        HTTP_SERVER,
        "vgpumon_http_connections_accepted_total",
        "HTTP connections accepted and given a slot.",
        lambda h: h.accepted,
        collector=EXPORTER,
    ),
    counter(
        HTTP_SERVER,
        "vgpumon_http_connections_refused_total",
        "HTTP connections closed at once: the connection cap was reached and every connection"
        " was answering a request.",
        lambda h: h.refused,
        collector=EXPORTER,
    ),
    labeled(
        HTTP_SERVER,
        "vgpumon_http_connections_evicted_total",
        "HTTP connections closed at the cap to make room for a new one, by what they were doing"
        " (idle: kept alive between requests; head: sending a request head; handshake: in TLS;"
        " stalled: not taking their answer; closing: closed with an answer still unsent).",
        ("state",),
        lambda h: _counts(h.evicted),
        collector=EXPORTER,
        type_=COUNTER,
    ),
    labeled(
        HTTP_SERVER,
        "vgpumon_http_connection_timeouts_total",
        "HTTP connections closed by a timeout, by timeout (header, tls_handshake, write, idle).",
        ("timeout",),
        lambda h: _counts(h.timeouts),
        collector=EXPORTER,
        type_=COUNTER,
    ),
    labeled(
        HTTP_SERVER,
        "vgpumon_http_requests_total",
        "HTTP answers sent, by status code (malformed requests included).",
        ("code",),
        lambda h: _counts(h.requests),
        collector=EXPORTER,
        type_=COUNTER,
    ),
    labeled(
        HTTP_SERVER,
        "vgpumon_http_auth_refusals_total",
        "Requests refused by basic auth, by reason (unauthorized: 401; throttled: 429, the"
        " address failed too often or has too many checks queued; busy: 503, the check queue"
        " is full).",
        ("reason",),
        lambda h: _counts(h.auth),
        collector=EXPORTER,
        type_=COUNTER,
    ),
    # ---- physical GPU: identity and modes
    (
        GPU_INFO := info(
            ALL_GPUS,
            "vgpumon_gpu_info",
            "GPU identity; kept while the GPU is down.",
            ("name", "pci_bus_id", "serial", "brand", "architecture", "compute_capability"),
            lambda g: (
                g.name,
                g.pci_bus_id,
                g.serial,
                g.brand,
                g.architecture,
                g.compute_capability,
            ),
            collector="device",
        )
    ),
    (
        GPU_UP := gauge(
            ALL_GPUS,
            "vgpumon_gpu_up",
            "1 when the GPU answers; 0 when it is lost or hung, or no NVML call about it "
            "answered in the last cycle (its other series are dropped).",
            lambda g: g.up,
            collector="device",
        )
    ),
    (
        GPU_VIRTUALIZATION_MODE := state_set(
            GPU,
            "vgpumon_gpu_virtualization_mode",
            "Virtualization mode of the GPU as this host sees it (state set).",
            "mode",
            VIRTUALIZATION_MODES,
            lambda g: g.virtualization_mode,
            collector="device",
        )
    ),
    state_set(
        GPU,
        "vgpumon_gpu_host_vgpu_mode",
        "How a vGPU host shares the GPU: SR-IOV virtual functions or not (state set).",
        "mode",
        HOST_VGPU_MODES,
        lambda g: g.host_vgpu_mode,
        collector="device",
    ),
    (
        GPU_MIG_MODE_ENABLED := gauge(
            GPU,
            "vgpumon_gpu_mig_mode_enabled",
            "1 when MIG mode is enabled now.",
            lambda g: _flag(g.mig_mode_current),
            collector="device",
        )
    ),
    gauge(
        GPU,
        "vgpumon_gpu_mig_mode_pending",
        "1 when MIG mode will be enabled after the next GPU reset.",
        lambda g: _flag(g.mig_mode_pending),
        collector="device",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_persistence_mode_enabled",
        "1 when persistence mode keeps the driver loaded without clients.",
        lambda g: _flag(g.persistence_mode),
        collector="device",
    ),
    state_set(
        GPU,
        "vgpumon_gpu_compute_mode",
        "Compute mode: who may create CUDA contexts (state set).",
        "mode",
        COMPUTE_MODES,
        lambda g: g.compute_mode,
        collector="device",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_vgpu_heterogeneous_mode_enabled",
        "1 when vGPUs of different types may share this GPU.",
        lambda g: _flag(g.vgpu_heterogeneous_mode),
        collector="vgpu",
    ),
    # ---- physical GPU: load
    (
        GPU_UTILIZATION_RATIO := gauge(
            GPU,
            "vgpumon_gpu_utilization_ratio",
            'Fraction of time a kernel was running (NVML "gpu" utilization).',
            lambda g: g.utilization.gpu,
            collector="utilization",
        )
    ),
    gauge(
        GPU,
        "vgpumon_gpu_memory_utilization_ratio",
        "Fraction of time the memory controller was busy.",
        lambda g: g.utilization.memory,
        collector="utilization",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_encoder_utilization_ratio",
        "Video encoder utilization.",
        lambda g: g.utilization.encoder,
        collector="utilization",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_decoder_utilization_ratio",
        "Video decoder utilization.",
        lambda g: g.utilization.decoder,
        collector="utilization",
    ),
    # ---- physical GPU: memory
    gauge(
        GPU,
        "vgpumon_gpu_memory_total_bytes",
        "Framebuffer memory installed.",
        lambda g: g.memory.total_bytes,
        collector="memory",
    ),
    (
        GPU_MEMORY_USED_BYTES := gauge(
            GPU,
            "vgpumon_gpu_memory_used_bytes",
            "Framebuffer memory allocated (without the driver's reservation where NVML splits it).",
            lambda g: g.memory.used_bytes,
            collector="memory",
        )
    ),
    # Decided once (vgpumon.collect.memory_in_use): what `top` shows and the fleet rule sums.
    gauge(
        GPU,
        "vgpumon_gpu_memory_in_use_bytes",
        "Framebuffer memory in use: vgpumon_gpu_memory_used_bytes, or on a host of MIG-backed "
        "vGPUs the sum of vgpumon_mig_memory_in_use_bytes over its GPU instances where that is "
        "more (NVML counts the guests' memory in neither).",
        lambda g: g.memory_in_use_bytes,
        collector="memory",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_memory_free_bytes",
        "Framebuffer memory free.",
        lambda g: g.memory.free_bytes,
        collector="memory",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_memory_reserved_bytes",
        "Framebuffer memory reserved by the driver.",
        lambda g: g.memory.reserved_bytes,
        collector="memory",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_bar1_memory_total_bytes",
        "BAR1 aperture size.",
        lambda g: g.bar1_memory.total_bytes,
        collector="memory",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_bar1_memory_used_bytes",
        "BAR1 aperture in use.",
        lambda g: g.bar1_memory.used_bytes,
        collector="memory",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_bar1_memory_free_bytes",
        "BAR1 aperture free.",
        lambda g: g.bar1_memory.free_bytes,
        collector="memory",
    ),
    # ---- physical GPU: power, heat, clocks
    gauge(
        GPU,
        "vgpumon_gpu_power_watts",
        "Power draw.",
        lambda g: g.power_watts,
        collector="power",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_power_limit_watts",
        "Enforced power limit.",
        lambda g: g.power_limit_watts,
        collector="power",
    ),
    counter(
        GPU,
        "vgpumon_gpu_energy_joules_total",
        "Energy consumed since the driver was loaded.",
        lambda g: g.energy_joules,
        collector="energy",
    ),
    labeled(
        GPU,
        "vgpumon_gpu_temperature_celsius",
        "Temperature by sensor.",
        ("sensor",),
        lambda g: _pairs(gpu=g.temperatures.gpu_celsius, memory=g.temperatures.memory_celsius),
        collector="temperature",
    ),
    labeled(
        GPU,
        "vgpumon_gpu_clock_hertz",
        "Current clock by domain.",
        ("clock",),
        lambda g: _pairs(
            graphics=g.clocks.graphics_hertz,
            sm=g.clocks.sm_hertz,
            memory=g.clocks.memory_hertz,
            video=g.clocks.video_hertz,
        ),
        collector="clocks",
    ),
    labeled(
        GPU,
        "vgpumon_gpu_max_clock_hertz",
        "Maximum clock by domain.",
        ("clock",),
        lambda g: _pairs(
            graphics=g.max_clocks.graphics_hertz,
            sm=g.max_clocks.sm_hertz,
            memory=g.max_clocks.memory_hertz,
            video=g.max_clocks.video_hertz,
        ),
        collector="clocks",
    ),
    labeled(
        GPU,
        "vgpumon_gpu_clock_event_active",
        "1 while the reason holds the clocks down; one series per reason the GPU supports.",
        ("reason",),
        _clock_events,
        collector="clock_events",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_performance_state",
        "Performance state number (0 = P0, the fastest).",
        lambda g: g.performance_state,
        collector="performance_state",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_fan_speed_ratio",
        "Mean fan speed as a fraction of the maximum; absent on fanless boards.",
        lambda g: g.fan_speed,
        collector="fan",
    ),
    # ---- physical GPU: errors
    gauge(
        GPU,
        "vgpumon_gpu_ecc_mode_enabled",
        "1 when ECC is enabled now.",
        lambda g: _flag(g.ecc.mode_current),
        collector="ecc",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_ecc_mode_pending",
        "1 when ECC will be enabled after the next reboot.",
        lambda g: _flag(g.ecc.mode_pending),
        collector="ecc",
    ),
    labeled(
        GPU,
        "vgpumon_gpu_ecc_errors_total",
        "ECC errors over the GPU's lifetime (aggregate counters).",
        ("type",),
        lambda g: _pairs(
            corrected=g.ecc.corrected_aggregate, uncorrected=g.ecc.uncorrected_aggregate
        ),
        collector="ecc",
        type_=COUNTER,
    ),
    labeled(
        GPU,
        "vgpumon_gpu_ecc_volatile_errors_total",
        "ECC errors since the driver was loaded (volatile counters).",
        ("type",),
        lambda g: _pairs(
            corrected=g.ecc.corrected_volatile, uncorrected=g.ecc.uncorrected_volatile
        ),
        collector="ecc",
        type_=COUNTER,
    ),
    labeled(
        GPU,
        "vgpumon_gpu_remapped_rows",
        "Memory rows remapped, by the kind of error that caused it.",
        ("kind",),
        lambda g: _pairs(
            correctable=g.remapped_rows.correctable, uncorrectable=g.remapped_rows.uncorrectable
        ),
        collector="remapped_rows",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_remapped_rows_pending",
        "1 when a row remapping waits for a GPU reset.",
        lambda g: _flag(g.remapped_rows.pending),
        collector="remapped_rows",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_remapped_rows_failed",
        "1 when a row remapping failed (the GPU needs service).",
        lambda g: _flag(g.remapped_rows.failed),
        collector="remapped_rows",
    ),
    # ---- what the driver says the GPU needs (vgpumon.collect.recovery)
    (
        GPU_RECOVERY_ACTION := state_set(
            GPU,
            "vgpumon_gpu_recovery_action",
            "What the driver asks for to bring the GPU back (R565+): none, gpu_reset, "
            "node_reboot, drain_p2p, drain_and_reset, recover_imex_domain, bus_reset, "
            "system_reboot (state set).",
            "action",
            RECOVERY_ACTIONS,
            lambda g: g.recovery.action,
            collector="recovery",
        )
    ),
    labeled(
        GPU,
        "vgpumon_gpu_repair_pending",
        "1 when a repair is pending, done at the GPU's next reset (R580+), by kind (channel, tpc).",
        ("kind",),
        lambda g: _pairs(
            channel=_flag(g.recovery.channel_repair_pending),
            tpc=_flag(g.recovery.tpc_repair_pending),
        ),
        collector="recovery",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_unrepairable_memory",
        "1 when the GPU has memory the row remapper can no longer repair (R590+): the board "
        "needs service.",
        lambda g: _flag(g.recovery.unrepairable_memory),
        collector="recovery",
    ),
    # ---- confidential computing (vgpumon.collect.confcompute)
    gauge(
        GPU,
        "vgpumon_gpu_cc_enabled",
        "1 when confidential computing is on for the system the GPU is in.",
        lambda g: _flag(g.conf_compute.feature_enabled),
        collector="confcompute",
    ),
    state_set(
        GPU,
        "vgpumon_gpu_cc_environment",
        "Confidential computing environment: unavailable, sim, prod (state set).",
        "environment",
        CC_ENVIRONMENTS,
        lambda g: g.conf_compute.environment,
        collector="confcompute",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_cc_devtools_mode_enabled",
        "1 in confidential computing's developer-tools mode (not a protected setup).",
        lambda g: _flag(g.conf_compute.devtools_mode),
        collector="confcompute",
    ),
    state_set(
        GPU,
        "vgpumon_gpu_cc_multi_gpu_mode",
        "Confidential computing multi-GPU protection: none, protected_pcie, nvle (state set).",
        "mode",
        CC_MULTI_GPU_MODES,
        lambda g: g.conf_compute.multi_gpu_mode,
        collector="confcompute",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_cc_ready",
        "1 when the GPUs accept client work in confidential computing (attestation set them "
        "ready); 0 while they refuse it.",
        lambda g: _flag(g.conf_compute.ready),
        collector="confcompute",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_cc_protected_memory_total_bytes",
        "GPU memory protected by confidential computing (present only with CC on).",
        lambda g: g.conf_compute.protected_memory_total_bytes,
        collector="confcompute",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_cc_protected_memory_used_bytes",
        "Protected memory in use (present only with CC on).",
        lambda g: g.conf_compute.protected_memory_used_bytes,
        collector="confcompute",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_accounting_mode_enabled",
        "1 when the driver's accounting mode is on: per-process busy time comes from the "
        "driver's own records (docs/metering.md); read, never set.",
        lambda g: _flag(g.accounting_enabled),
        collector="accounting",
    ),
    labeled(
        GPU_XID,
        "vgpumon_gpu_xid_errors_total",
        "Xid errors seen since the exporter started, by Xid number (catalogued Xids start at 0).",
        ("xid",),
        _xid_counts,
        collector="xid",
        type_=COUNTER,
    ),
    # ---- physical GPU: PCIe
    labeled(
        GPU,
        "vgpumon_gpu_pcie_throughput_bytes_per_second",
        "PCIe throughput by direction (opt-in: --pcie-throughput; the call blocks ~20 ms).",
        ("direction",),
        lambda g: _pairs(tx=g.pcie.tx_bytes_per_second, rx=g.pcie.rx_bytes_per_second),
        collector="pcie",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_pcie_link_generation",
        "Current PCIe link generation.",
        lambda g: g.pcie.link_generation,
        collector="pcie",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_pcie_link_width",
        "Current PCIe link width (lanes).",
        lambda g: g.pcie.link_width,
        collector="pcie",
    ),
    counter(
        GPU,
        "vgpumon_gpu_pcie_replay_errors_total",
        "PCIe replays (link-level retransmissions) since the driver was loaded.",
        lambda g: g.pcie.replay_errors,
        collector="pcie",
    ),
    # ---- physical GPU: NVLink (boards whose driver reports links; read by the pcie collector)
    labeled(
        GPU,
        "vgpumon_gpu_nvlink_up",
        "1 when the NVLink link is active, 0 when it is down.",
        ("link",),
        lambda g: [((str(n.link),), _flag(n.up)) for n in g.nvlinks],
        collector="pcie",
    ),
    labeled(
        GPU,
        "vgpumon_gpu_nvlink_data_bytes_total",
        "Data sent (tx) and received (rx) over the NVLink link since the driver was loaded.",
        ("link", "direction"),
        lambda g: [
            pair
            for n in g.nvlinks
            for pair in (((str(n.link), "tx"), n.tx_bytes), ((str(n.link), "rx"), n.rx_bytes))
        ],
        collector="pcie",
        type_=COUNTER,
    ),
    labeled(
        GPU,
        "vgpumon_gpu_nvlink_errors_total",
        "NVLink data-link-layer errors by kind (crc, replay, recovery) since the driver loaded.",
        ("link", "error"),
        lambda g: [
            pair
            for n in g.nvlinks
            for pair in (
                ((str(n.link), "crc"), n.crc_errors),
                ((str(n.link), "replay"), n.replay_errors),
                ((str(n.link), "recovery"), n.recovery_errors),
            )
        ],
        collector="pcie",
        type_=COUNTER,
    ),
    # ---- physical GPU: GPM (Hopper+)
    *GPU_GPM,
    labeled(
        GPU,
        "vgpumon_gpu_gpm_pcie_throughput_bytes_per_second",
        "GPM: PCIe throughput by direction over the GPM interval (no blocking call).",
        ("direction",),
        lambda g: (
            _pairs(tx=g.gpm.pcie_tx_bytes_per_second, rx=g.gpm.pcie_rx_bytes_per_second)
            if g.gpm
            else []
        ),
        collector="gpm",
    ),
    # ---- processes
    gauge(
        GPU,
        "vgpumon_gpu_processes",
        "Compute processes running on the GPU.",
        _compute_process_count,
        collector=_PROC,
    ),
    (
        PROCESS_SERIES_TRUNCATED := gauge(
            PROCESS_HOST,
            "vgpumon_process_series_truncated",
            "1 when some processes got no per-process series because of --process-series-max.",
            lambda w: w.truncated,
            collector=_PROC,
        )
    ),
    (
        PROCESS_MEMORY_USED_BYTES := gauge(
            PROCESS,
            "vgpumon_process_memory_used_bytes",
            "GPU memory used by the process.",
            lambda p: p.used_memory_bytes,
            collector=_PROC,
        )
    ),
    (
        PROCESS_SM_UTILIZATION_RATIO := gauge(
            PROCESS,
            "vgpumon_process_sm_utilization_ratio",
            "SM utilization of the process over the last cycle.",
            lambda p: p.sm_utilization,
            collector=_PROC,
        )
    ),
    gauge(
        PROCESS,
        "vgpumon_process_memory_utilization_ratio",
        "Memory controller utilization of the process over the last cycle.",
        lambda p: p.memory_utilization,
        collector=_PROC,
    ),
    gauge(
        PROCESS,
        "vgpumon_process_encoder_utilization_ratio",
        "Encoder utilization of the process over the last cycle.",
        lambda p: p.encoder_utilization,
        collector=_PROC,
    ),
    gauge(
        PROCESS,
        "vgpumon_process_decoder_utilization_ratio",
        "Decoder utilization of the process over the last cycle.",
        lambda p: p.decoder_utilization,
        collector=_PROC,
    ),
    gauge(
        VGPU_PROCESS,
        "vgpumon_vgpu_process_sm_utilization_ratio",
        "SM utilization of a process inside a vGPU guest, seen from the host.",
        lambda p: p.sm_utilization,
        collector="vgpu",
    ),
    gauge(
        VGPU_PROCESS,
        "vgpumon_vgpu_process_memory_utilization_ratio",
        "Memory controller utilization of a process inside a vGPU guest.",
        lambda p: p.memory_utilization,
        collector="vgpu",
    ),
    gauge(
        VGPU_PROCESS,
        "vgpumon_vgpu_process_encoder_utilization_ratio",
        "Encoder utilization of a process inside a vGPU guest.",
        lambda p: p.encoder_utilization,
        collector="vgpu",
    ),
    gauge(
        VGPU_PROCESS,
        "vgpumon_vgpu_process_decoder_utilization_ratio",
        "Decoder utilization of a process inside a vGPU guest.",
        lambda p: p.decoder_utilization,
        collector="vgpu",
    ),
    # ---- MIG
    (
        MIG_INSTANCE_INFO := info(
            MIG_CI,
            "vgpumon_mig_instance_info",
            "One MIG compute instance: its GPU instance profile, MIG device UUID and placement.",
            ("profile", "mig_uuid", "placement_start", "placement_size"),
            _mig_info,
            collector="mig",
        )
    ),
    gauge(
        MIG_CI,
        "vgpumon_mig_compute_instance_multiprocessors",
        "Streaming multiprocessors of the MIG compute instance.",
        lambda it: it[1].sm_count,
        collector="mig",
    ),
    gauge(
        MIG,
        "vgpumon_mig_memory_total_bytes",
        "Memory of the GPU instance.",
        lambda gi: gi.memory_total_bytes,
        collector="mig",
    ),
    (
        MIG_MEMORY_USED_BYTES := gauge(
            MIG,
            "vgpumon_mig_memory_used_bytes",
            "Memory used in the GPU instance.",
            lambda gi: gi.memory_used_bytes,
            collector="mig",
        )
    ),
    # Decided once (vgpumon.collect.memory_in_use): what `top` shows and the MIG dashboard graphs.
    gauge(
        MIG,
        "vgpumon_mig_memory_in_use_bytes",
        "Memory in use in the GPU instance: vgpumon_mig_memory_used_bytes, or what the MIG-backed "
        "vGPUs in it hold where that is more (NVML counts the guests' memory in neither).",
        lambda gi: gi.memory_in_use_bytes,
        collector="mig",
    ),
    *MIG_GPM,
    # ---- vGPU host
    # Vanished or shut down (vgpumon.collect.vanished; docs/verdicts.md), with libvirt only.
    gauge(
        DEPARTURES,
        "vgpumon_gpu_vgpus_vanished",
        "The GPU's vGPUs that went away while their VM still runs (libvirt's state); absent "
        "without libvirt. A VM shut down, destroyed or migrated away is counted in "
        "vgpumon_gpu_vgpu_departures_total, not here.",
        lambda d: len(d.vanished),
        collector="libvirt",
    ),
    labeled(
        DEPARTURES,
        "vgpumon_gpu_vgpu_departures_total",
        "The GPU's vGPUs that went away since the exporter started, by what became of their VM: "
        "vm_stopped (shut down, destroyed, migrated), vm_holds_another (restarted with a new "
        "vGPU), vanished (it still runs without one), vm_unknown (libvirt never knew it).",
        ("reason",),
        lambda d: [((r,), d.counts.get(r, 0)) for r in VGPU_DEPARTURES],
        collector="libvirt",
        type_=COUNTER,
    ),
    gauge(
        VGPU_HOST,
        "vgpumon_gpu_vgpu_instances",
        "Active vGPU instances on the GPU (vGPU hosts only).",
        lambda g: len(g.vgpu_instances),
        collector="vgpu",
    ),
    gauge(
        VGPU_HOST,
        "vgpumon_gpu_vgpu_migration_supported",
        "1 when the GPU supports live migration of its vGPUs (the pGPU migration capability).",
        lambda g: _flag(g.vgpu_migration_supported),
        collector="vgpu",
    ),
    info(
        VGPU,
        "vgpumon_vgpu_info",
        "One vGPU instance: type, the VM that holds it (named by libvirt when enabled), its "
        "SR-IOV virtual function and its guest driver.",
        (
            "vgpu_uuid",
            "vgpu_type",
            "vgpu_class",
            "vm_id",
            "vm_id_type",
            "guest_driver_version",
            "mdev_uuid",
            "gpu_instance",
            "placement_id",
            "vm_name",
            "vm_uuid",
            "vm_title",
            "vf_pci_bus_id",
        ),
        _vgpu_info,
        collector="vgpu",
    ),
    gauge(
        VM,
        "vgpumon_vm_memory_used_bytes",
        "GPU memory (framebuffer) a VM holds, as the hypervisor's process list shows the VMs on "
        "its GPUs (agentless ESXi hosts: vm_id is the VM's world ID); there with or without the "
        "vGPU report.",
        lambda p: p.used_memory_bytes,
        collector="processes",
    ),
    info(
        VM,
        "vgpumon_vm_info",
        "A VM the hypervisor's process list shows on the GPU, with its name (agentless ESXi "
        "hosts; join on vm_id).",
        ("vm_name",),
        lambda p: (p.name,),
        collector="processes",
    ),
    state_set(
        VGPU,
        "vgpumon_vgpu_vm_state",
        "State of the libvirt domain holding the vGPU (state set; --libvirt.uri).",
        "state",
        VM_STATES,
        lambda v: v.vm.state if v.vm else None,
        collector="libvirt",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_utilization_ratio",
        "SM (3D/compute) engine utilization, averaged over the cycle's samples.",
        lambda v: v.utilization.sm,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_memory_utilization_ratio",
        "Memory controller utilization, averaged over the cycle's samples.",
        lambda v: v.utilization.memory,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_encoder_utilization_ratio",
        "Encoder utilization, averaged over the cycle's samples.",
        lambda v: v.utilization.encoder,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_decoder_utilization_ratio",
        "Decoder utilization, averaged over the cycle's samples.",
        lambda v: v.utilization.decoder,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_framebuffer_used_bytes",
        "Framebuffer memory the guest uses.",
        lambda v: v.framebuffer_used_bytes,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_framebuffer_total_bytes",
        "Framebuffer memory of the vGPU.",
        lambda v: v.framebuffer_total_bytes,
        collector="vgpu",
    ),
    state_set(
        VGPU,
        "vgpumon_vgpu_license_state",
        "License state of the guest driver (state set).",
        "state",
        VGPU_LICENSE_STATES,
        lambda v: _license_state(v.license.state, v.license.licensed),
        collector="license",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_license_expiry_timestamp_seconds",
        "When the guest's license lease ends (Unix time; a healthy guest renews it long "
        "before); absent when it has no expiry.",
        lambda v: v.license.expiry_timestamp_seconds,
        collector="license",
    ),
    state_set(
        VGPU,
        "vgpumon_vgpu_license_expiry_status",
        "What the license's expiry is (state set): valid (it has a date), permanent, "
        "not_applicable, not_available or invalid.",
        "state",
        LICENSE_EXPIRY_STATUSES,
        lambda v: v.license.expiry_status,
        collector="license",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_license_renewal_overdue",
        "1 when the guest's license lease was not renewed when due: over half of it passed "
        "without a renewal (docs/licensing.md); absent where there is no lease.",
        lambda v: _flag(v.license.renewal_overdue),
        collector="license",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_encoder_sessions",
        "Active encoder sessions.",
        lambda v: v.encoder_sessions,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_encoder_average_fps",
        "Average frame rate over the active encoder sessions.",
        lambda v: v.encoder_average_fps,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_encoder_average_latency_seconds",
        "Average encode latency over the active encoder sessions.",
        lambda v: v.encoder_average_latency_seconds,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_encoder_capacity_ratio",
        "Share of the encoder the vGPU may use.",
        lambda v: v.encoder_capacity,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_fbc_sessions",
        "Active frame buffer capture sessions.",
        lambda v: v.fbc_sessions,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_fbc_average_fps",
        "Average frame rate over the active frame buffer capture sessions.",
        lambda v: v.fbc_average_fps,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_fbc_average_latency_seconds",
        "Average capture latency over the active frame buffer capture sessions.",
        lambda v: v.fbc_average_latency_seconds,
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_migration_supported",
        "1 when the vGPU can be live-migrated (vMotion, KVM migration); it moves only to a host "
        "whose GPU supports it too.",
        lambda v: _flag(v.migration_supported),
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_frame_rate_limit",
        "Frame rate limit in frames per second; absent when the limiter is off.",
        lambda v: v.frame_rate_limit,
        collector="vgpu",
    ),
    info(
        VGPU_TYPE,
        "vgpumon_vgpu_type_info",
        "A vGPU type the GPU supports.",
        ("vgpu_type", "vgpu_class", "gpu_instance_profile_id"),
        lambda t: (t.name, t.type_class, t.gpu_instance_profile_id),
        collector="vgpu",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_framebuffer_bytes",
        "Framebuffer memory of one vGPU of this type.",
        lambda t: t.framebuffer_bytes,
        collector="vgpu",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_max_instances",
        "Most vGPUs of this type the GPU can hold.",
        lambda t: t.max_instances,
        collector="vgpu",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_active_instances",
        "vGPUs of this type running now.",
        lambda t: t.active_instances,
        collector="vgpu",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_creatable",
        "1 when a vGPU of this type can be created now.",
        lambda t: t.creatable,
        collector="vgpu",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_creatable_instances",
        "How many more vGPUs of this type fit now; absent when the driver cannot tell.",
        lambda t: t.creatable_instances,
        collector="vgpu",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_framebuffer_reservation_bytes",
        "Framebuffer the driver reserves for each vGPU of this type, beyond its own (R550+).",
        lambda t: t.framebuffer_reservation_bytes,
        collector="vgpu_type_reservations",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_gsp_heap_bytes",
        "GSP firmware heap each vGPU of this type takes (R550+).",
        lambda t: t.gsp_heap_bytes,
        collector="vgpu_type_reservations",
    ),
    gauge(
        VGPU_TYPE,
        "vgpumon_vgpu_type_bar1_bytes",
        "BAR1 aperture of one vGPU of this type (R550+).",
        lambda t: t.bar1_bytes,
        collector="vgpu_type_reservations",
    ),
    # ---- MIG-backed time-sliced vGPUs per GPU instance (GB20x, R575+)
    gauge(
        MIG_VGPU,
        "vgpumon_mig_vgpu_instances",
        "MIG-backed vGPUs running in the GPU instance.",
        lambda m: sum(1 for v in m[0].vgpu_instances if v.gpu_instance_id == m[1].id),
        collector="vgpu",
    ),
    gauge(
        MIG_VGPU,
        "vgpumon_mig_vgpu_heterogeneous_mode_enabled",
        "1 when the GPU instance may host time-sliced vGPUs of different sizes at once.",
        lambda m: _flag(m[1].vgpu_heterogeneous_mode),
        collector="vgpu_gpu_instances",
    ),
    gauge(
        MIG_VGPU_TYPE,
        "vgpumon_mig_vgpu_type_creatable_instances",
        "How many more vGPUs of this type fit in the GPU instance now (its free placements); "
        "types it cannot host have no series.",
        lambda c: c.creatable_instances,
        collector="vgpu_gpu_instances",
    ),
    # ---- capacity (docs/capacity.md)
    gauge(
        VGPU_HOST,
        "vgpumon_gpu_vgpu_framebuffer_free_bytes",
        "Framebuffer no running time-sliced vGPU holds: the most the GPU's types hand out "
        "(framebuffer x max instances) less the running vGPUs' type framebuffer.",
        lambda g: g.vgpu_framebuffer_free_bytes,
        collector="vgpu",
    ),
    gauge(
        VGPU_HOST,
        "vgpumon_gpu_vgpu_framebuffer_stranded_bytes",
        "Free framebuffer that no supported vGPU type can use in the current mix (homogeneous "
        "mode, placement gaps, types at their limit); absent when a type's count is unknown.",
        lambda g: g.vgpu_framebuffer_stranded_bytes,
        collector="vgpu",
    ),
    gauge(
        MIG_PROFILE,
        "vgpumon_mig_profile_creatable_instances",
        "How many more GPU instances of this MIG profile fit in the current layout (NVML's "
        "remaining capacity).",
        lambda p: p.creatable_instances,
        collector="mig",
    ),
    gauge(
        MIG_PROFILE,
        "vgpumon_mig_profile_max_instances",
        "Most GPU instances of this MIG profile on an empty GPU.",
        lambda p: p.max_instances,
        collector="mig",
    ),
    gauge(
        MIG_PROFILE,
        "vgpumon_mig_profile_slices",
        "Compute slices one GPU instance of this MIG profile takes.",
        lambda p: p.slices,
        collector="mig",
    ),
    gauge(
        MIG_PROFILE,
        "vgpumon_mig_profile_memory_bytes",
        "Memory of one GPU instance of this MIG profile.",
        lambda p: p.memory_bytes,
        collector="mig",
    ),
    gauge(
        GPU,
        "vgpumon_gpu_mig_free_slices",
        "Compute slices of a MIG GPU that no GPU instance holds.",
        lambda g: g.mig_free_slices,
        collector="mig",
    ),
    # ---- migration readiness
    gauge(
        VGPU_MIGRATION,
        "vgpumon_vgpu_guest_driver_matches_host",
        "1 when the guest driver is of the host driver's release branch, 0 when not; absent "
        "while the guest driver is not loaded.",
        lambda m: _flag(guest_driver_matches_host(m[0], m[2])),
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_live_migration_compatible",
        "1 when NVML's compatibility check of the vGPU against this host's GPU allows a live "
        "migration (nvmlGetVgpuCompatibility), 0 when it allows less.",
        lambda v: _flag(v.live_migration_compatible),
        collector="vgpu",
    ),
    labeled(
        VGPU,
        "vgpumon_vgpu_migration_limit",
        "What NVML says limits moving the vGPU: 1 for each limit that applies (host driver, "
        "guest driver, GPU, other), 0 for the others.",
        ("reason",),
        lambda v: (
            []
            if v.migration_limits is None
            else [((lim,), float(lim in v.migration_limits)) for lim in MIGRATION_LIMITS]
        ),
        collector="vgpu",
    ),
    gauge(
        VGPU_MIGRATION,
        "vgpumon_vgpu_migration_ready",
        "1 when this host's side of a live migration is ready: the GPU and the vGPU support "
        "migration, the guest driver is of the host's branch and NVML's compatibility check "
        "allows a live move; 0 when one of them says no.",
        lambda m: _flag(vgpu_migration_ready(m[0], m[1], m[2])),
        collector="vgpu",
    ),
    gauge(
        VGPU,
        "vgpumon_vgpu_migration_state_bytes",
        "Bytes a live migration of the vGPU would move now (R565+): its runtime state, "
        "framebuffer in use included.",
        lambda v: v.migration_state_bytes,
        collector="vgpu_migration",
    ),
    # ---- vGPU scheduler
    state_set(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_policy",
        "vGPU scheduler policy (state set).",
        "policy",
        SCHEDULER_POLICIES,
        lambda sch: sch.policy,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_arr_enabled",
        "1 when adaptive round-robin scheduling is on.",
        lambda sch: _flag(sch.arr_enabled),
        collector="scheduler",
    ),
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_timeslice_seconds",
        "Time slice each vGPU gets.",
        lambda sch: sch.timeslice_seconds,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_min_timeslice_seconds",
        "Shortest time slice the scheduler accepts.",
        lambda sch: sch.min_timeslice_seconds,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_max_timeslice_seconds",
        "Longest time slice the scheduler accepts.",
        lambda sch: sch.max_timeslice_seconds,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_average_factor",
        "Averaging factor of adaptive round-robin.",
        lambda sch: sch.average_factor,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_frequency_hertz",
        "Scheduling frequency, where the driver reports it.",
        lambda sch: sch.frequency_hertz,
        collector="scheduler",
    ),
    counter(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_log_entries_total",
        "Scheduler log entries read since the exporter started.",
        lambda sch: sch.log_entries_total,
        collector="scheduler",
    ),
    counter(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_log_entries_missed_total",
        "Scheduler log entries overwritten before they were read (raise the sampling rate).",
        lambda sch: sch.log_entries_missed_total,
        collector="scheduler",
    ),
    counter(
        SCHEDULER_USAGE,
        "vgpumon_vgpu_scheduler_run_seconds_total",
        "Time the vGPU ran on the GPU, from the scheduler log.",
        lambda u: u.run_seconds_total,
        collector="scheduler",
    ),
    counter(
        SCHEDULER_USAGE,
        "vgpumon_vgpu_scheduler_preemption_seconds_total",
        "Time the vGPU was preempted, from the scheduler log.",
        lambda u: u.preemption_seconds_total,
        collector="scheduler",
    ),
    # ---- the encoder engines' schedulers (R590+ engine ids): what VDI and streaming VMs share
    counter(
        ENCODER_USAGE,
        "vgpumon_vgpu_encoder_scheduler_run_seconds_total",
        "Time the vGPU ran on the video encoder engine (engine: nvenc0, nvenc1), from that "
        "engine's scheduler log.",
        lambda u: u.run_seconds_total,
        collector="scheduler",
    ),
    counter(
        ENCODER_USAGE,
        "vgpumon_vgpu_encoder_scheduler_preemption_seconds_total",
        "Time the vGPU was held off the video encoder engine, from that engine's scheduler log.",
        lambda u: u.preemption_seconds_total,
        collector="scheduler",
    ),
    # The encoder engines' share against due, under the one starvation rule (docs/verdicts.md):
    # the same verdict as the graphics engine's, per engine.
    state_set(
        ENCODER_SHARE,
        "vgpumon_vgpu_encoder_share_state",
        "The vGPU's share verdict on a video encoder engine over the window (state set): "
        "starved, ok, or why there is none; the graphics engine's rule, per engine.",
        "state",
        SHARE_STATES,
        lambda v: v.state,
        collector="scheduler",
    ),
    gauge(
        ENCODER_SHARE,
        "vgpumon_vgpu_encoder_due_share_ratio",
        "Part of the encoder engine's time the scheduler policy entitles the vGPU to.",
        lambda v: v.due,
        collector="scheduler",
    ),
    gauge(
        ENCODER_SHARE,
        "vgpumon_vgpu_encoder_received_share_ratio",
        "Part of the window the vGPU ran on the encoder engine.",
        lambda v: v.received,
        collector="scheduler",
    ),
    gauge(
        ENCODER_SHARE,
        "vgpumon_vgpu_encoder_waited_share_ratio",
        "Part of the window the vGPU was held off the encoder engine with work left.",
        lambda v: v.waited,
        collector="scheduler",
    ),
    # The one starvation verdict (vgpumon.collect.starvation; docs/verdicts.md), which the alert,
    # the dashboards, top, check and the node features all read.
    gauge(
        SCHEDULER,
        "vgpumon_vgpu_scheduler_share_window_seconds",
        "Time the scheduler's share verdicts cover: up to a minute of its counters.",
        lambda sch: sch.share_window_seconds,
        collector="scheduler",
    ),
    state_set(
        SCHEDULER_SHARE,
        "vgpumon_vgpu_scheduler_share_state",
        "The vGPU's share verdict over the window (state set): starved, ok, or why there is "
        "none (short_window, missed_entries, unknown_policy). docs/verdicts.md gives the rule.",
        "state",
        SHARE_STATES,
        lambda v: v.state,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER_SHARE,
        "vgpumon_vgpu_scheduler_due_share_ratio",
        "Part of the engine's time the scheduler policy entitles the vGPU to over the window.",
        lambda v: v.due,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER_SHARE,
        "vgpumon_vgpu_scheduler_received_share_ratio",
        "Part of the window the vGPU ran on the engine.",
        lambda v: v.received,
        collector="scheduler",
    ),
    gauge(
        SCHEDULER_SHARE,
        "vgpumon_vgpu_scheduler_waited_share_ratio",
        "Part of the window the vGPU was preempted with work left.",
        lambda v: v.waited,
        collector="scheduler",
    ),
    # ---- guest
    state_set(
        GUEST,
        "vgpumon_guest_license_state",
        "License state of a licensable feature inside the guest (state set).",
        "state",
        GUEST_LICENSE_STATES,
        lambda f: _license_state(f.state, f.licensed),
        collector="guest",
    ),
    gauge(
        GUEST,
        "vgpumon_guest_license_expiry_timestamp_seconds",
        "When the feature's license lease ends (Unix time; a healthy guest renews it long "
        "before); absent when it has no expiry.",
        lambda f: f.expiry_timestamp_seconds,
        collector="guest",
    ),
    gauge(
        GUEST,
        "vgpumon_guest_license_renewal_overdue",
        "1 when the feature's license lease was not renewed when due (docs/licensing.md); "
        "absent where there is no lease.",
        lambda f: _flag(f.renewal_overdue),
        collector="guest",
    ),
    state_set(
        GUEST,
        "vgpumon_guest_license_expiry_status",
        "What the feature's license expiry is (state set): valid (it has a date), permanent, "
        "not_applicable, not_available or invalid.",
        "state",
        LICENSE_EXPIRY_STATUSES,
        lambda f: f.expiry_status,
        collector="guest",
    ),
    # ---- Kubernetes
    info(
        ALLOCATION,
        "vgpumon_gpu_allocation_info",
        "A GPU, MIG device or vGPU the kubelet offers and the container it was given to "
        "(pod labels empty while free; KubeVirt VMs named from their virt-launcher pod; the "
        "ResourceClaim for devices allocated through DRA).",
        (
            "resource",
            "device_id",
            "device_kind",
            "gpu_instance",
            "compute_instance",
            "vgpu_id",
            "namespace",
            "pod",
            "container",
            "vm_name",
            "claim_namespace",
            "claim_name",
        ),
        _allocation_info,
        collector="kubelet",
    ),
    gauge(
        POD,
        "vgpumon_pod_gpu_utilization_ratio",
        "Utilization of the device the container holds: whole GPU, vGPU (SM) or MIG (GPM SM "
        "activity); opt-in, --kubernetes.pod-series.",
        lambda it: _device_usage(it)[0],
        collector="kubelet",
    ),
    gauge(
        POD,
        "vgpumon_pod_gpu_memory_used_bytes",
        "Memory used on the device the container holds (GPU memory, vGPU framebuffer, MIG GPU "
        "instance); opt-in, --kubernetes.pod-series.",
        lambda it: _device_usage(it)[1],
        collector="kubelet",
    ),
    # ---- metering (docs/metering.md)
    counter(
        METER_VGPU,
        "vgpumon_vgpu_busy_seconds_total",
        "Integral of the vGPU's SM utilization over time since vgpumon first saw it.",
        lambda v: v.usage.busy_seconds,
        collector="metering",
    ),
    counter(
        METER_VGPU,
        "vgpumon_vgpu_framebuffer_byte_seconds_total",
        "Integral of the vGPU's used framebuffer over time.",
        lambda v: v.usage.memory_byte_seconds,
        collector="metering",
    ),
    counter(
        METER_VGPU,
        "vgpumon_vgpu_energy_joules_total",
        "The vGPU's share of the GPU's energy: by busy time, idle power by framebuffer reserved.",
        lambda v: v.usage.energy_joules,
        collector="metering",
    ),
    gauge(
        METER_VGPU,
        "vgpumon_vgpu_idle_seconds",
        "How long the licensed, running vGPU has been under the idle SM utilization ratio "
        "without a break (0 while in use).",
        lambda v: v.idle_seconds,
        collector="metering",
    ),
    counter(
        METER_MIG,
        "vgpumon_mig_sm_active_seconds_total",
        "GPM SM activity of the GPU instance integrated over time, in units of its own SMs.",
        lambda m: m.usage.busy_seconds,
        collector="metering",
    ),
    counter(
        METER_MIG,
        "vgpumon_mig_memory_byte_seconds_total",
        "Integral of the GPU instance's used memory over time.",
        lambda m: m.usage.memory_byte_seconds,
        collector="metering",
    ),
    counter(
        METER_MIG,
        "vgpumon_mig_energy_joules_total",
        "The GPU instance's share of the GPU's energy: by SM activity weighted by its slices, "
        "idle power by memory size.",
        lambda m: m.usage.energy_joules,
        collector="metering",
    ),
    counter(
        METER_PROCESS,
        "vgpumon_process_busy_seconds_total",
        "Integral of the process's SM utilization over time; opt-in, --process-series.",
        lambda p: p.usage.busy_seconds,
        collector="metering",
    ),
    counter(
        METER_PROCESS,
        "vgpumon_process_memory_byte_seconds_total",
        "Integral of the process's used GPU memory over time; opt-in, --process-series.",
        lambda p: p.usage.memory_byte_seconds,
        collector="metering",
    ),
    gauge(
        METER_PROCESS,
        "vgpumon_process_idle_seconds",
        "How long the process has held GPU memory with no SM utilization, without a break; "
        "opt-in, --process-series.",
        lambda p: p.idle_seconds,
        collector="metering",
    ),
    counter(
        METER_POD,
        "vgpumon_pod_busy_seconds_total",
        "Integral of the SM utilization of the container's processes on the GPU over time.",
        lambda p: p.usage.busy_seconds,
        collector="metering",
    ),
    counter(
        METER_POD,
        "vgpumon_pod_memory_byte_seconds_total",
        "Integral of the GPU memory the container's processes used over time.",
        lambda p: p.usage.memory_byte_seconds,
        collector="metering",
    ),
    counter(
        METER_POD,
        "vgpumon_pod_energy_joules_total",
        "The container's share of the GPU's energy: by busy time, idle power by memory used.",
        lambda p: p.usage.energy_joules,
        collector="metering",
    ),
    counter(
        METERED_KIND,
        "vgpumon_gpu_unattributed_energy_joules_total",
        "GPU energy not given to any tenant of the kind (vgpu, mig, pod): idle with no holder, "
        "processes outside pods, gaps; tenants plus this add up to the GPU's energy.",
        lambda joules: joules,
        collector="metering",
    ),
    counter(
        METERED,
        "vgpumon_gpu_metered_energy_joules_total",
        "Increase of the GPU's energy counter since metering began: what the split divides.",
        lambda m: m.energy_joules_metered,
        collector="metering",
    ),
    counter(
        METERED,
        "vgpumon_gpu_unmetered_seconds_total",
        "Time between samples too long to integrate (sampler wedged, GPU down): no usage counted.",
        lambda m: m.unmetered_seconds,
        collector="metering",
    ),
    gauge(
        METERED,
        "vgpumon_gpu_longest_idle_holder_seconds",
        "The longest any process on the GPU has held memory with no SM utilization, without a "
        "break (0: none idle).",
        lambda m: m.longest_idle_holder_seconds,
        collector="metering",
    ),
    gauge(
        METERED,
        "vgpumon_gpu_dead_holder_processes",
        "Processes NVML lists on the GPU that do not exist on the host (absent where vgpumon "
        "cannot see the host's processes).",
        lambda m: m.dead_holders,
        collector="metering",
    ),
    gauge(
        METERED,
        "vgpumon_gpu_dead_holder_memory_bytes",
        "GPU memory held by processes that no longer exist on the host.",
        lambda m: m.dead_holder_memory_bytes,
        collector="metering",
    ),
    labeled(
        METERED,
        "vgpumon_gpu_metering_method",
        "1 for the method each busy counter grew by in the last cycle (counter: vgpu, mig, "
        "process, pod; method: accounting, accounting_average, process_samples, vgpu_samples, "
        "gpm); docs/metering.md gives each method's error bound.",
        ("counter", "method"),
        lambda m: [((c, method), 1.0) for c, method in sorted(m.methods.items())],
        collector="metering",
    ),
)
