"""A :class:`~vgpumon.model.Snapshot` rebuilt from its exposition: the metric table read backwards.

A Prometheus server holds what the exporter rendered, not the snapshot it rendered it from. To
show a host read from Prometheus with the same rows, columns, badges and verdicts as a host read
from its exporter, :func:`rebuild` turns one host's samples back into a snapshot, and every
screen reads that snapshot as it reads any other.

Nothing here names a metric or a model field by hand where the table already says it. Each row
of :data:`~vgpumon.metrics.table.FAMILIES` says how its value is pulled out of its scope's item
(``lambda v: v.encoder_average_fps``); :func:`plans` calls that function once on a *recording
probe*, an object that notes every attribute read on it, and so learns which field of which
item each family carries (``encoder_average_fps`` of a vGPU). Renaming a field or a family in the
table is followed without a change here. What a probe cannot read back is said, not guessed:

* a few families carry a collection their function walks (Xids, NVLink links, clock events,
  migration limits, unattributed energy, a GPU's allocations): :data:`CUSTOM` rebuilds those;
* :data:`DERIVED` lists the families computed from other fields (a count, a verdict joining two
  fields, a pod's copy of its device's reading) and those that are not snapshot data at all
  (the exporter's version, its HTTP server); they come back by themselves when the snapshot is
  rendered again, or not at all.

A family that is neither read back nor listed is an error when this module is imported, so a new
row of the table cannot be silently left out of ``top --prometheus``. Where each scope's items
live in a snapshot (a vGPU in ``gpus[].vgpu_instances``, keyed by ``vgpu_id``) is :data:`NODES`,
one entry per scope, checked the same way against the scope's identity labels.

``tests/metrics/test_rebuild.py`` renders every simulator scenario, rebuilds it, renders it again
and compares the two expositions sample for sample.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpumon import model
from vgpumon.metrics import table as t
from vgpumon.model import (
    MIGRATION_LIMITS,
    CollectorStatus,
    DeviceAllocation,
    DriverInfo,
    Gpu,
    GpuInstanceVgpuCapacity,
    GpuMetering,
    GuestLicenseFeature,
    MigComputeInstance,
    MigGpuInstance,
    MigMeter,
    MigProfileCapacity,
    NvLink,
    NvmlErrorCount,
    PodMeter,
    Process,
    ProcessMeter,
    SamplerHealth,
    SamplingCadence,
    Snapshot,
    VanishedVgpu,
    VgpuDepartures,
    VgpuInstance,
    VgpuMeter,
    VgpuProcess,
    VgpuScheduler,
    VgpuSchedulerUsage,
    VgpuShare,
    VgpuType,
)

Labels = Mapping[str, str]
# Per family name, its samples: (labels, value). Labels beyond the family's own (a Prometheus
# server's ``instance``, ``job``, external labels) are ignored.
Samples = Mapping[str, Iterable[tuple[Labels, float]]]

SOURCE = "prometheus"  # Snapshot.source where no vgpumon_nvml_module_info said otherwise


class NotReadBack(Exception):
    """A family's function did something with its item that a probe cannot follow back."""


# --------------------------------------------------------------------------- where items live


# One node of a chain as the builder walks it: (field, many, (label, item field, converter)...,
# fixed fields).
_Step = tuple[
    str, bool, tuple[tuple[str, str, Callable[[Any], Any]], ...], tuple[tuple[str, Any], ...]
]


@dataclass(frozen=True, eq=False)  # cached_property needs a __dict__: no slots
class Node:
    """Where the items of one kind live in a snapshot: under ``field`` of the parent's item, as
    a tuple keyed by ``keys`` (label, field) pairs, or as one object (``many`` False)."""

    parent: Node | None
    field: str
    cls: type
    keys: tuple[tuple[str, str], ...] = ()
    many: bool = True
    # Fields every item made here has, that no label carries (a VM is a process of kind "vm").
    fixed: tuple[tuple[str, Any], ...] = ()

    @property
    def chain(self) -> tuple[Node, ...]:
        """The nodes from the snapshot down to this one (the snapshot's node left out)."""
        out: list[Node] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            out.append(node)
            node = node.parent
        return tuple(reversed(out))

    @property
    def labels(self) -> tuple[str, ...]:
        """The identity labels that pick one item, from the snapshot down."""
        return tuple(label for node in self.chain for label, _ in node.keys)

    @functools.cached_property
    def steps(self) -> tuple[_Step, ...]:
        """The chain as the builder walks it: (field, many, (label, item field, label's
        converter) per key, fixed fields) per node."""
        return tuple(
            (
                n.field,
                n.many,
                tuple((label, f, _label_converter(n.cls, f)) for label, f in n.keys),
                n.fixed,
            )
            for n in self.chain
        )


ROOT = Node(None, "", Snapshot, many=False)
DRIVER = Node(ROOT, "driver", DriverInfo, many=False)
HEALTH = Node(ROOT, "health", SamplerHealth, many=False)
COLLECTORS = Node(ROOT, "collectors", CollectorStatus, (("collector", "name"),))
CADENCES = Node(HEALTH, "cadences", SamplingCadence, (("reading", "name"),))
NVML_ERRORS = Node(
    ROOT, "nvml_errors", NvmlErrorCount, (("function", "function"), ("error", "error"))
)
GPUS = Node(ROOT, "gpus", Gpu, (("gpu", "index"), ("uuid", "uuid")))
PROCESSES = Node(
    GPUS,
    "processes",
    Process,
    (
        ("pid", "pid"),
        ("process_name", "name"),
        ("gpu_instance", "gpu_instance_id"),
        ("compute_instance", "compute_instance_id"),
    ),
)
VGPU_PROCESSES = Node(
    GPUS,
    "vgpu_processes",
    VgpuProcess,
    (("vgpu_id", "vgpu_id"), ("pid", "pid"), ("process_name", "name")),
)
MIG_GIS = Node(GPUS, "mig_instances", MigGpuInstance, (("gpu_instance", "id"),))
MIG_CIS = Node(MIG_GIS, "compute_instances", MigComputeInstance, (("compute_instance", "id"),))
MIG_PROFILES = Node(GPUS, "mig_profiles", MigProfileCapacity, (("gpu_instance_profile", "name"),))
VGPUS = Node(GPUS, "vgpu_instances", VgpuInstance, (("vgpu_id", "vgpu_id"),))
VGPU_TYPES = Node(GPUS, "vgpu_types", VgpuType, (("vgpu_type_id", "type_id"),))
SCHEDULERS = Node(GPUS, "vgpu_schedulers", VgpuScheduler, (("gpu_instance", "gpu_instance_id"),))
SCHEDULER_USAGE = Node(SCHEDULERS, "usage", VgpuSchedulerUsage, (("vgpu_id", "vgpu_id"),))
SCHEDULER_SHARES = Node(SCHEDULERS, "shares", VgpuShare, (("vgpu_id", "vgpu_id"),))
GUEST_FEATURES = Node(GPUS, "guest_licenses", GuestLicenseFeature, (("feature", "feature"),))
METERING = Node(GPUS, "metering", GpuMetering, many=False)
METER_VGPUS = Node(METERING, "vgpus", VgpuMeter, (("vgpu_id", "vgpu_id"),))
METER_MIGS = Node(METERING, "migs", MigMeter, (("gpu_instance", "gpu_instance_id"),))
METER_PROCESSES = Node(
    METERING,
    "processes",
    ProcessMeter,
    (
        ("pid", "pid"),
        ("process_name", "name"),
        ("gpu_instance", "gpu_instance_id"),
        ("compute_instance", "compute_instance_id"),
    ),
)
METER_PODS = Node(
    METERING,
    "pods",
    PodMeter,
    (("namespace", "namespace"), ("pod", "pod"), ("container", "container")),
)
NVLINKS = Node(GPUS, "nvlinks", NvLink, (("link", "link"),))
# The VMs of a hypervisor's process list (agentless ESXi hosts): processes of kind "vm".
VMS = Node(GPUS, "processes", Process, (("vm_id", "pid"),), fixed=(("kind", "vm"),))
MIG_VGPU_CAPACITY = Node(
    MIG_GIS, "vgpu_capacity", GpuInstanceVgpuCapacity, (("vgpu_type_id", "type_id"),)
)
ENCODER_SCHEDULERS = Node(
    GPUS,
    "vgpu_encoder_schedulers",
    VgpuScheduler,
    (("gpu_instance", "gpu_instance_id"), ("engine", "engine")),
)
ENCODER_USAGE = Node(ENCODER_SCHEDULERS, "usage", VgpuSchedulerUsage, (("vgpu_id", "vgpu_id"),))
ENCODER_SHARES = Node(ENCODER_SCHEDULERS, "shares", VgpuShare, (("vgpu_id", "vgpu_id"),))
DEPARTURES = Node(GPUS, "vgpu_departures", VgpuDepartures, many=False)

# Each scope of the table: the nodes of its item (a tuple for scopes whose items are tuples).
# A scope missing here fails at import (a new scope needs its place in the snapshot said).
NODES: dict[int, tuple[Node, ...]] = {
    id(t.HOST): (ROOT,),
    id(t.COLLECTOR): (COLLECTORS,),
    id(t.CADENCE): (CADENCES,),
    id(t.NVML_ERROR): (NVML_ERRORS,),
    id(t.ALL_GPUS): (GPUS,),
    id(t.GPU): (GPUS,),
    id(t.GPU_XID): (GPUS,),
    id(t.PROCESS): (PROCESSES,),
    id(t.VGPU_PROCESS): (VGPU_PROCESSES,),
    id(t.MIG): (MIG_GIS,),
    id(t.MIG_CI): (MIG_GIS, MIG_CIS),
    id(t.VGPU_HOST): (GPUS,),
    id(t.VGPU): (VGPUS,),
    id(t.VGPU_TYPE): (VGPU_TYPES,),
    id(t.MIG_PROFILE): (MIG_PROFILES,),
    id(t.VGPU_MIGRATION): (DRIVER, GPUS, VGPUS),
    id(t.SCHEDULER): (SCHEDULERS,),
    id(t.SCHEDULER_USAGE): (SCHEDULER_USAGE,),
    id(t.SCHEDULER_SHARE): (SCHEDULER_SHARES,),
    id(t.GUEST): (GUEST_FEATURES,),
    id(t.ALLOCATION): (GPUS,),  # its one family is CUSTOM (an allocation's identity is all of it)
    id(t.METERED): (METERING,),
    id(t.METER_VGPU): (METER_VGPUS,),
    id(t.METER_MIG): (METER_MIGS,),
    id(t.METER_PROCESS): (METER_PROCESSES,),
    id(t.METER_POD): (METER_PODS,),
    id(t.VM): (VMS,),
    id(t.MIG_VGPU): (GPUS, MIG_GIS),
    id(t.MIG_VGPU_TYPE): (MIG_VGPU_CAPACITY,),
    id(t.ENCODER_USAGE): (ENCODER_USAGE,),
    id(t.ENCODER_SHARE): (ENCODER_SHARES,),
    id(t.DEPARTURES): (DEPARTURES,),
}
# Scopes of the table with no place of their own: their families are DERIVED, or CUSTOM (a
# collector's unsupported-reason counts are a dict of the collector's).
NO_NODES = frozenset(
    map(id, (t.HTTP_SERVER, t.PROCESS_HOST, t.POD, t.METERED_KIND, t.COLLECTOR_REASON))
)
for _name in dir(t):
    _scope = getattr(t, _name)
    if isinstance(_scope, t.Scope) and id(_scope) not in NODES and id(_scope) not in NO_NODES:
        raise AssertionError(f"metrics.table.{_name} has no place in the snapshot (rebuild.NODES)")
    if isinstance(_scope, t.Scope) and id(_scope) in NODES:
        _deepest = max(NODES[id(_scope)], key=lambda n: len(n.labels))
        if _deepest.labels != _scope.labels:
            raise AssertionError(
                f"metrics.table.{_name}: labels {_scope.labels} but rebuild.NODES picks items by "
                f"{_deepest.labels}"
            )


# --------------------------------------------------------------------------- the recording probe


class _Recorder:
    """Numbers that stand for fields: ``float(probe.x)`` must come back as itself in a sample."""

    BASE = float(2**60)

    def __init__(self) -> None:
        self.tokens: dict[float, tuple[Any, ...]] = {}

    def token(self, path: tuple[Any, ...]) -> float:
        number = self.BASE + len(self.tokens) * 1024.0  # exact in a double, and far from data
        self.tokens[number] = path
        return number


def _refuse(*_args: Any, **_kwargs: Any) -> Any:
    raise NotReadBack("the value is computed from the field, not the field itself")


class _Probe:
    """An item of a scope as a family's function sees it: each attribute read is a new probe
    that remembers its path; anything but reading attributes, testing truth and turning into a
    number (a comparison, arithmetic, iteration, a call) is :class:`NotReadBack`."""

    __slots__ = ("_path", "_recorder")
    _path: tuple[Any, ...]
    _recorder: _Recorder

    def __init__(self, path: tuple[Any, ...], recorder: _Recorder) -> None:
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_recorder", recorder)

    def __getattr__(self, name: str) -> _Probe:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Probe((*self._path, name), self._recorder)

    def __bool__(self) -> bool:  # "x.gpm.sm_active if x.gpm else None": the field is there
        return True

    def __float__(self) -> float:  # float(x.flag), as _flag does
        return self._recorder.token(self._path)

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = __iter__ = __len__ = __call__ = __getitem__ = __contains__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __floordiv__ = __mod__ = __or__ = __ror__ = _refuse
    __and__ = __rand__ = __neg__ = __int__ = __index__ = __str__ = __format__ = _refuse


def _probe_item(nodes: Sequence[Node], recorder: _Recorder) -> Any:
    probes = tuple(_Probe((i,), recorder) for i in range(len(nodes)))
    return probes[0] if len(probes) == 1 else probes


def _path_of(value: Any, recorder: _Recorder) -> tuple[Any, ...] | None:
    """Where ``value`` came from: a probe's path, a number standing for one; None: a constant."""
    if isinstance(value, _Probe):
        return value._path
    if isinstance(value, float) and value in recorder.tokens:
        return recorder.tokens[value]
    if value is None or isinstance(value, (str, int, float)):
        return None
    raise NotReadBack(f"a {type(value).__name__} is not a field")


# --------------------------------------------------------------------------- plans


@dataclass(frozen=True)
class Leaf:
    """One field of an item that a sample sets: where it is, and how a sample's number or a
    label's text becomes the field's value."""

    node: Node  # the item's place
    head: tuple[str, ...]  # nested objects from the item down (``("memory",)``)
    last: str  # the field
    number: Callable[[float], Any]
    text: Callable[[Any], Any]  # raises ValueError for text that is not of the field's type


def _leaf(nodes: Sequence[Node], path: tuple[Any, ...]) -> Leaf:
    node = nodes[path[0]]
    cls = node.cls
    *head, last = path[1:]
    for name in head:
        cls, _ = _bare(_hints(cls)[name])
    if last not in _hints(cls):
        raise NotReadBack(f"{cls.__name__} has no field {last!r}")
    return Leaf(node, tuple(head), last, _number_converter(cls, last), _label_converter(cls, last))


@dataclass(frozen=True)
class Plan:
    """How one family's samples go back into a snapshot."""

    family: t.Family
    nodes: tuple[Node, ...]
    # The field the value is, for a family of one value per item or a state set.
    leaf: Leaf | None = None
    # State sets: the label holding the state.
    state_label: str | None = None
    # Info families: (label, field) of each descriptive label read back.
    info: tuple[tuple[str, Leaf], ...] = ()
    # Labelled families: extra label values -> field.
    labeled: Mapping[tuple[str, ...], Leaf] = dataclasses.field(default_factory=dict)
    own: tuple[str, ...] = ()  # the family's labels after its scope's (sensor, clock, ...)


def _plan(family: t.Family) -> Plan:
    rows = family.rows
    scope = getattr(rows, "scope", None)
    if rows is None or scope is None or id(scope) not in NODES:
        raise NotReadBack("its scope has no place in the snapshot")
    nodes = NODES[id(scope)]
    recorder = _Recorder()
    item = _probe_item(nodes, recorder)
    own = family.labels[len(scope.labels) :]
    if isinstance(rows, t.OneValue):
        path = _path_of(rows.value(item), recorder)
        if path is None:
            raise NotReadBack("its value is a constant")
        return Plan(family, nodes, leaf=_leaf(nodes, path))
    if isinstance(rows, t.StateValues):
        path = _path_of(rows.current(item), recorder)
        if path is None:
            raise NotReadBack("its state is a constant")
        return Plan(family, nodes, leaf=_leaf(nodes, path), state_label=own[0])
    if isinstance(rows, t.InfoValues):
        values = rows.values(item)
        if values is None:
            raise NotReadBack("it has no labels to read back")
        info = []
        for label, value in zip(own, values, strict=True):
            path = _path_of(value, recorder)
            if path is not None:
                info.append((label, _leaf(nodes, path)))
        if not info:
            raise NotReadBack("its labels are constants")
        return Plan(family, nodes, info=tuple(info))
    if isinstance(rows, t.LabeledValues):
        labeled = {}
        for extra, value in rows.values(item):
            path = _path_of(value, recorder)
            if path is None:
                raise NotReadBack("one of its values is a constant")
            labeled[tuple(extra)] = _leaf(nodes, path)
        return Plan(family, nodes, labeled=labeled, own=own)
    raise NotReadBack(f"unknown row kind {type(rows).__name__}")


# Families computed from other fields, or not snapshot data at all: nothing goes back, and the
# reason is said (tests/metrics/test_rebuild.py checks each comes back or is left out as said).
DERIVED: dict[str, str] = {
    "vgpumon_build_info": "the version of the exporter, not of its snapshot",
    "vgpumon_http_connections": "the exporter's HTTP server, not its snapshot",
    "vgpumon_http_connections_accepted_total": "the exporter's HTTP server",
    "vgpumon_http_connections_refused_total": "the exporter's HTTP server",
    "vgpumon_http_connections_evicted_total": "the exporter's HTTP server",
    "vgpumon_http_connection_timeouts_total": "the exporter's HTTP server",
    "vgpumon_http_requests_total": "the exporter's HTTP server",
    "vgpumon_http_auth_refusals_total": "the exporter's HTTP server",
    "vgpumon_process_series_truncated": "an option of the exporter (read for the process list)",
    "vgpumon_gpu_processes": "counted from the process list (kept only with --process-series)",
    "vgpumon_gpu_vgpu_instances": "counted from the vGPU instances",
    "vgpumon_mig_vgpu_instances": "counted from the vGPU instances of the GPU instance",
    "vgpumon_vgpu_guest_driver_matches_host": "from the guest and host driver versions",
    "vgpumon_vgpu_migration_ready": "from the GPU's and vGPU's migration fields",
    "vgpumon_pod_gpu_utilization_ratio": "the pod's device's own utilization",
    "vgpumon_pod_gpu_memory_used_bytes": "the pod's device's own memory",
}


# --------------------------------------------------------------------------- the builder


class _Many(dict[tuple[Any, ...], dict[str, Any]]):
    """Items of one tuple field by key, while the snapshot is built."""


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    got = _HINTS.get(cls)
    if got is None:
        got = _HINTS[cls] = typing.get_type_hints(cls, vars(sys.modules[model.__name__]))
    return got


def _bare(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (it, False)."""
    args = typing.get_args(tp)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def _text(value: Any) -> str:
    if type(value) is not str or not value:  # a label of an answer we do not control
        raise ValueError("not text")
    return value


def _int(value: Any) -> int:
    return int(_text(value))


def _label_converter(cls: type, field: str) -> Callable[[Any], Any]:
    """Label text -> the field's value: ``""`` (an absent label: Prometheus drops empty ones)
    is None where the field may be None, numbers are parsed; ValueError for anything else, and
    for an empty value of a field that must have one."""
    tp, optional = _bare(_hints(cls)[field])
    convert: Callable[[Any], Any] = _int if tp is int else _text
    if not optional:
        return convert
    return lambda value: None if value == "" else convert(value)


def _number_converter(cls: type, field: str) -> Callable[[float], Any]:
    """A sample's value -> the field's value (flags are 0 and 1, counts whole numbers)."""
    tp, _ = _bare(_hints(cls)[field])
    if tp is bool:
        return lambda value: value != 0.0
    if tp is int:
        return lambda value: int(value) if math.isfinite(value) else 0
    if tp is float:
        return float
    return lambda _value: None  # a text field set from a number: not a reading


def _from_label(cls: type, field: str, text: str) -> Any:
    return _label_converter(cls, field)(text)


def _from_number(tp: Any, value: float) -> Any:
    tp, _ = _bare(tp)
    if tp is bool:
        return value != 0.0
    if tp is int:
        return int(value) if math.isfinite(value) else 0
    return float(value)


class _Builder:
    """One host's snapshot as nested dicts (the JSON shape), filled sample by sample."""

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}

    def item(self, node: Node, labels: Labels) -> dict[str, Any] | None:
        """The item ``labels`` pick under ``node`` (made on first use); None when a label is
        missing or not of its field's type."""
        here = self.root
        for field, many, keys, fixed in node.steps:
            if not many:
                found = here.get(field)
                if found is None:
                    found = here[field] = {}
                here = found
                continue
            try:
                key = tuple([convert(labels.get(label, "")) for label, _f, convert in keys])
            except (ValueError, TypeError):
                return None
            items = here.get(field)
            if items is None:
                items = here[field] = _Many()
            if fixed:  # apart from the items of the same field keyed otherwise
                key = (*key, *(v for _, v in fixed))
            found = items.get(key)
            if found is None:
                found = items[key] = {f: v for (_, f, _c), v in zip(keys, key, strict=False)}
                found.update(fixed)
            here = found
        return here

    def set(self, leaf: Leaf, labels: Labels, value: float) -> None:
        """Set ``leaf`` of the item ``labels`` pick from a sample's number."""
        here = self.item(leaf.node, labels)
        if here is None:
            return
        for name in leaf.head:
            here = here.setdefault(name, {})
        here[leaf.last] = leaf.number(value)

    def set_text(self, leaf: Leaf, labels: Labels, text: Any) -> None:
        """Set ``leaf`` of the item ``labels`` pick from a label's text."""
        here = self.item(leaf.node, labels)
        if here is None:
            return
        try:
            value = leaf.text(text)
        except (ValueError, TypeError):
            return
        for name in leaf.head:
            nested = here.get(name)
            if nested is None:
                if value is None:
                    return  # an absent label makes no nested object (a VM with no name)
                nested = here[name] = {}
            here = nested
        here[leaf.last] = value


def _read(plan: Plan, builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    leaf = plan.leaf
    if plan.state_label is not None:
        assert leaf is not None
        for labels, value in samples:
            if value == 1.0:
                builder.set_text(leaf, labels, labels.get(plan.state_label, ""))
        return
    if plan.info:
        for labels, _value in samples:
            for label, info_leaf in plan.info:
                builder.set_text(info_leaf, labels, labels.get(label, ""))
        return
    if plan.labeled:
        for labels, value in samples:
            found = plan.labeled.get(tuple([labels.get(label, "") for label in plan.own]))
            if found is not None:
                builder.set(found, labels, value)
        return
    assert leaf is not None
    for labels, value in samples:
        builder.set(leaf, labels, value)


# ---- families whose function walks a collection: read back by hand


def _xid(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    # The table lists every catalogued Xid at 0 until it happens; the snapshot holds those seen.
    for labels, value in samples:
        gpu = builder.item(GPUS, labels)
        if gpu is None or value <= 0:
            continue
        try:
            gpu.setdefault("xid_errors", {})[int(labels["xid"])] = int(value)
        except (KeyError, ValueError):
            continue


def _clock_events(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    for labels, value in samples:
        gpu = builder.item(GPUS, labels)
        reason = labels.get("reason")
        if gpu is None or not reason:
            continue
        events = gpu.setdefault("clock_events", {"supported": [], "active": []})
        events["supported"].append(reason)
        if value == 1.0:
            events["active"].append(reason)


def _nvlink(
    fields: Mapping[tuple[str, ...], str],
) -> Callable[[_Builder, Iterable[tuple[Labels, float]]], None]:
    """NVLink families: (extra label values after ``link``) -> the link's field."""

    def read(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
        for labels, value in samples:
            link = builder.item(NVLINKS, labels)
            if link is None:
                continue
            rest = tuple(v for k, v in labels.items() if k in ("direction", "error"))
            name = fields.get(rest)
            if name is not None:
                link[name] = _from_number(_hints(NvLink)[name], value)

    return read


def _migration_limits(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    for labels, value in samples:
        vgpu = builder.item(VGPUS, labels)
        reason = labels.get("reason")
        if vgpu is None or reason not in MIGRATION_LIMITS:
            continue
        limits = vgpu.setdefault("migration_limits", [])
        if value == 1.0:
            limits.append(reason)


def _unattributed(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    for labels, value in samples:
        metering = builder.item(METERING, labels)
        kind = labels.get("kind")
        if metering is not None and kind:
            metering.setdefault("unattributed_energy_joules", {})[kind] = float(value)


# vgpumon_gpu_allocation_info's labels -> DeviceAllocation's fields.
_ALLOCATION_LABELS = (
    ("resource", "resource"),
    ("device_id", "device_id"),
    ("device_kind", "kind"),
    ("gpu_instance", "gpu_instance_id"),
    ("compute_instance", "compute_instance_id"),
    ("vgpu_id", "vgpu_id"),
    ("namespace", "namespace"),
    ("pod", "pod"),
    ("container", "container"),
    ("vm_name", "vm_name"),
    ("claim_namespace", "claim_namespace"),
    ("claim_name", "claim_name"),
)


def _allocations(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    found = builder.root.setdefault("allocations", _Many())
    for labels, _value in samples:
        uuid = labels.get("uuid")
        if not uuid:
            continue
        try:
            entry = {
                f: _from_label(DeviceAllocation, f, labels.get(label, ""))
                for label, f in _ALLOCATION_LABELS
            }
        except ValueError:
            continue
        entry["gpu_uuid"] = uuid
        found[tuple(entry.values())] = entry


def _counts_by(kind: Node, label: str, field: str) -> Custom:
    """A counter family with one series per value of ``label`` (a reason): each series' count
    under ``field`` of its ``kind`` item, by that value."""

    def read(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
        for labels, value in samples:
            item = builder.item(kind, labels)
            key = labels.get(label)
            if item is not None and key and type(key) is str and math.isfinite(value):
                item.setdefault(field, {})[key] = int(value)

    return read


def _metering_methods(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    for labels, value in samples:
        metering = builder.item(METERING, labels)
        counter, method = labels.get("counter"), labels.get("method")
        if metering is not None and counter and method and value == 1.0:
            metering.setdefault("methods", {})[counter] = method


def _vanished(builder: _Builder, samples: Iterable[tuple[Labels, float]]) -> None:
    # The exposition carries how many vGPUs vanished, not which: they come back unnamed.
    for labels, value in samples:
        departures = builder.item(DEPARTURES, labels)
        if departures is not None and math.isfinite(value) and value >= 0:
            departures["vanished"] = tuple(VanishedVgpu(vgpu_id=-1) for _ in range(int(value)))


Custom = Callable[[_Builder, Iterable[tuple[Labels, float]]], None]
CUSTOM: dict[str, Custom] = {
    "vgpumon_gpu_xid_errors_total": _xid,
    "vgpumon_gpu_clock_event_active": _clock_events,
    "vgpumon_gpu_nvlink_up": _nvlink({(): "up"}),
    "vgpumon_gpu_nvlink_data_bytes_total": _nvlink({("tx",): "tx_bytes", ("rx",): "rx_bytes"}),
    "vgpumon_gpu_nvlink_errors_total": _nvlink(
        {("crc",): "crc_errors", ("replay",): "replay_errors", ("recovery",): "recovery_errors"}
    ),
    "vgpumon_vgpu_migration_limit": _migration_limits,
    "vgpumon_gpu_unattributed_energy_joules_total": _unattributed,
    "vgpumon_gpu_allocation_info": _allocations,
    "vgpumon_scrape_collector_unsupported_gpus": _counts_by(COLLECTORS, "reason", "unsupported"),
    "vgpumon_gpu_metering_method": _metering_methods,
    "vgpumon_gpu_vgpus_vanished": _vanished,
    "vgpumon_gpu_vgpu_departures_total": _counts_by(DEPARTURES, "reason", "counts"),
}

# Required fields of the model that no family carries, and what an item rebuilt without them has:
# a MIG profile is known to the exposition by its name only.
_UNKNOWN_REQUIRED: dict[tuple[type, str], Any] = {(MigProfileCapacity, "profile_id"): -1}


def _plans() -> dict[str, Plan | Custom]:
    out: dict[str, Plan | Custom] = {}
    for family in t.FAMILIES:
        if family.name in CUSTOM:
            out[family.name] = CUSTOM[family.name]
            continue
        try:
            plan = _plan(family)
        except NotReadBack as exc:
            if family.name not in DERIVED:
                raise AssertionError(
                    f"{family.name} cannot be read back ({exc}): add it to rebuild.CUSTOM, or to "
                    "rebuild.DERIVED with the reason"
                ) from None
            continue
        if family.name in DERIVED:
            raise AssertionError(f"{family.name} is read back: take it out of rebuild.DERIVED")
        out[family.name] = plan
    for name in (*CUSTOM, *DERIVED):
        if not any(f.name == name for f in t.FAMILIES):
            raise AssertionError(f"rebuild names {name}, which the metric table does not have")
    return out


PLANS = _plans()
# What a rebuild reads: every family read back, by name.
READ_BACK: frozenset[str] = frozenset(PLANS)


# --------------------------------------------------------------------------- into the model


# How each field of a model class is finished: "many" (a tuple of items, kept by key), "one"
# (a nested object), "list" (a tuple of plain values) or plain.
_Spec = tuple[dict[str, tuple[str, Any]], tuple[tuple[str, Any], ...]]
_SPECS: dict[type, _Spec] = {}


def _spec(cls: type) -> _Spec:
    """(field -> (kind, item class), required fields with what stands in for a missing one)."""
    got = _SPECS.get(cls)
    if got is not None:
        return got
    fields: dict[str, tuple[str, Any]] = {}
    for name, hint in _hints(cls).items():
        tp, _ = _bare(hint)
        args = typing.get_args(tp)
        if typing.get_origin(tp) is tuple and args and dataclasses.is_dataclass(args[0]):
            fields[name] = ("many", args[0])
        elif dataclasses.is_dataclass(tp):
            fields[name] = ("one", tp)
        elif typing.get_origin(tp) is tuple:
            fields[name] = ("list", None)
        else:
            fields[name] = ("plain", None)
    required = tuple(
        (f.name, _UNKNOWN_REQUIRED.get((cls, f.name)))
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    got = _SPECS[cls] = (fields, required)
    return got


def _finish(cls: type, data: Mapping[str, Any]) -> Any:
    """``data`` (the JSON shape, with :class:`_Many` for tuples) as an instance of ``cls``."""
    fields, required = _spec(cls)
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        kind, sub = fields[name]
        if kind == "many" and isinstance(value, _Many):
            items = sorted(value.items(), key=lambda kv: _order(kv[0]))
            kwargs[name] = tuple(_finish(sub, v) for _, v in items)
        elif kind == "one" and isinstance(value, dict):
            kwargs[name] = _finish(sub, value)
        elif kind == "list" and isinstance(value, list):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    for name, stand_in in required:
        if name not in kwargs:
            if stand_in is None:
                raise _Incomplete(f"{cls.__name__}.{name}")
            kwargs[name] = stand_in
    return cls(**kwargs)


class _Incomplete(Exception):
    """An item whose required field no sample gave (its families were not all asked for)."""


def _order(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """Items in the order of their identity, numbers as numbers and absent ids first."""
    return tuple(
        (0, 0, "") if k is None else (1, k, "") if isinstance(k, int) else (2, 0, k) for k in key
    )


def _drop_incomplete(cls: type, data: dict[str, Any]) -> None:
    """Take out items a partial query left without a required field (say, a collector's
    duration when only its success was asked for), deepest first."""
    fields, _required = _spec(cls)
    for name, value in data.items():
        kind, sub = fields[name]
        if kind == "many" and isinstance(value, _Many):
            for key in list(value):
                _drop_incomplete(sub, value[key])
                try:
                    _finish(sub, value[key])
                except _Incomplete:
                    del value[key]
        elif kind == "one" and isinstance(value, dict):
            _drop_incomplete(sub, value)


def rebuild(samples: Samples, *, timestamp: float | None = None) -> Snapshot:
    """One host's snapshot from the samples of its families (any subset of the table's).

    Only what the samples carry is set; the rest keeps the model's defaults (None: unknown).
    ``timestamp`` stands in when ``vgpumon_last_sample_timestamp_seconds`` is not among them.
    """
    builder = _Builder()
    for name, series in samples.items():
        plan = PLANS.get(name)
        if plan is None:
            continue
        if isinstance(plan, Plan):
            _read(plan, builder, series)
        else:
            plan(builder, series)
    root = builder.root
    root.setdefault("timestamp", timestamp if timestamp is not None else 0.0)
    root.setdefault("source", SOURCE)
    _complete_processes(root, samples)
    try:
        return typing.cast(Snapshot, _finish(Snapshot, root))
    except _Incomplete:
        _drop_incomplete(Snapshot, root)
        return typing.cast(Snapshot, _finish(Snapshot, root))


def _complete_processes(root: dict[str, Any], samples: Samples) -> None:
    """A GPU's process list is known only where the exporter listed every process
    (``--process-series`` and nothing left out) and counted them (``vgpumon_gpu_processes``:
    the list was readable); elsewhere it is unknown (None), as in the exporter's own snapshot
    when NVML could not list them, or only its VMs are known. A process's kind (compute,
    graphics) is not exported: the rebuilt ones are all compute (the VMs, vm)."""
    truncated = [value for _, value in samples.get(t.PROCESS_SERIES_TRUNCATED.name, ())]
    complete = bool(truncated) and all(value == 0.0 for value in truncated)
    counted: set[tuple[int, str]] = set()
    for labels, _value in samples.get(_GPU_PROCESSES, ()):
        try:
            counted.add((int(labels["gpu"]), labels["uuid"]))
        except (KeyError, ValueError):
            continue
    for key, gpu in (root.get("gpus") or {}).items():
        if complete and key in counted:
            gpu.setdefault("processes", _Many())
            continue
        # A hypervisor's VMs are exported with or without --process-series: where its list
        # has them (an agentless ESXi host, whose process list is its VMs) they are the list.
        listed = gpu.pop("processes", None) or {}
        vms = _Many({k: p for k, p in listed.items() if p.get("kind") == "vm"})
        if vms:
            gpu["processes"] = vms


_GPU_PROCESSES = "vgpumon_gpu_processes"
