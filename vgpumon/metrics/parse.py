"""A vgpumon exposition turned back into (part of) a :class:`~vgpumon.model.Snapshot`.

``validate --via metrics`` checks what Prometheus would scrape, not only what the sampler read,
so it reads ``/metrics`` and maps it back onto the same model the in-process readers give. Only
what validate compares is rebuilt: GPU identity, up, virtualization and MIG mode, utilization,
memory used, GPM SM activity, MIG instances and per-process memory and SM utilization, plus the
sampler's timestamp, cycle count and up.

Every family name and label comes from the metric table (:mod:`vgpumon.metrics.table`): the
rows this module reads are bound to names there, and each label it reads is checked against its
row when this module is imported, so renaming a family or a label cannot leave a parser that
silently finds nothing.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from vgpumon.errors import VgpumonError, one_line
from vgpumon.metrics import table as m
from vgpumon.metrics.naming import NAMESPACE
from vgpumon.model import (
    Gpm,
    Gpu,
    Memory,
    MigComputeInstance,
    MigGpuInstance,
    Process,
    SamplerHealth,
    SamplingCadence,
    Snapshot,
    Utilization,
)

# What the exporter's per-process series can tell (``snapshot_from_metrics``).
PROCESS_SERIES_OFF = "off"  # started without --process-series
PROCESS_SERIES_COMPLETE = "complete"
PROCESS_SERIES_TRUNCATED = "truncated"  # --process-series-max left some processes out


class ExpositionError(VgpumonError):
    """The text is not a vgpumon exposition (or not an exposition at all); one line."""


def _label(family: m.Family, name: str) -> str:
    """``name``, after checking that ``family`` has that label (at import time)."""
    if name not in family.labels:
        raise AssertionError(f"{family.name} has no label {name!r}: the parser is out of date")
    return name


# Identity labels, as the scopes of the metric table define them.
_INDEX = _label(m.GPU_UP, m.GPU_LABELS[0])
_UUID = _label(m.GPU_UP, m.GPU_LABELS[1])
_GPU_NAME = _label(m.GPU_INFO, "name")
_ARCHITECTURE = _label(m.GPU_INFO, "architecture")
_MODE = _label(m.GPU_VIRTUALIZATION_MODE, "mode")
_PID = _label(m.PROCESS_MEMORY_USED_BYTES, "pid")
_PROCESS_NAME = _label(m.PROCESS_MEMORY_USED_BYTES, "process_name")
_PROCESS_GI = _label(m.PROCESS_MEMORY_USED_BYTES, "gpu_instance")
_PROCESS_CI = _label(m.PROCESS_MEMORY_USED_BYTES, "compute_instance")
_GI = _label(m.MIG_MEMORY_USED_BYTES, "gpu_instance")
_CI = _label(m.MIG_INSTANCE_INFO, "compute_instance")
_PROFILE = _label(m.MIG_INSTANCE_INFO, "profile")
_MIG_UUID = _label(m.MIG_INSTANCE_INFO, "mig_uuid")
_PLACEMENT_START = _label(m.MIG_INSTANCE_INFO, "placement_start")
_PLACEMENT_SIZE = _label(m.MIG_INSTANCE_INFO, "placement_size")


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return None


Series = dict[str, list[tuple[Mapping[str, str], float]]]


def _series(text: str) -> Series:
    series: Series = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                series[sample.name].append((sample.labels, float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise ExpositionError(
            f"the exporter's /metrics could not be parsed: {one_line(exc)}"
        ) from None
    if m.GPU_INFO.name not in series and m.UP.name not in series:
        raise ExpositionError(
            f"this /metrics is not a vgpumon exporter's (no {NAMESPACE}_* families)"
        )
    return series


def _process_series(series: Series) -> str:
    truncated = m.PROCESS_SERIES_TRUNCATED.name
    if truncated not in series:
        return PROCESS_SERIES_OFF
    if any(v == 1.0 for _, v in series[truncated]):
        return PROCESS_SERIES_TRUNCATED
    return PROCESS_SERIES_COMPLETE


def snapshot_from_metrics(text: str) -> tuple[Snapshot, str]:
    """The part of a Snapshot that validate reads, rebuilt from a vgpumon exposition.

    Returns the snapshot and the state of the exporter's per-process series, one of the
    ``PROCESS_SERIES_*`` values: with ``--process-series`` the exporter always exports
    the truncation flag, 1 when its cap left processes out. Only a complete list becomes
    ``Gpu.processes``; otherwise it stays unknown (None), so that a process the cap left out is
    not reported as one NVML does not list.
    """
    series = _series(text)
    fields: dict[str, dict[str, Any]] = {}

    def gpu(labels: Mapping[str, str]) -> dict[str, Any] | None:
        uuid = labels.get(_UUID)
        index = _int(labels.get(_INDEX))
        if not uuid or index is None:
            return None
        return fields.setdefault(uuid, {"index": index, "uuid": uuid})

    def of_gpus(family: m.Family) -> Iterator[tuple[dict[str, Any], Mapping[str, str], float]]:
        """The samples of ``family`` that name a GPU, with that GPU's fields."""
        for labels, value in series[family.name]:
            g = gpu(labels)
            if g is not None:
                yield g, labels, value

    def of_gpus_by(
        family: m.Family, label: str
    ) -> Iterator[tuple[dict[str, Any], int, Mapping[str, str], float]]:
        """The samples of ``family`` that name a GPU and an integer ``label`` (pid, instance)."""
        for g, labels, value in of_gpus(family):
            ident = _int(labels.get(label))
            if ident is not None:
                yield g, ident, labels, value

    for g, labels, _ in of_gpus(m.GPU_INFO):
        g["name"] = labels.get(_GPU_NAME) or None
        g["architecture"] = labels.get(_ARCHITECTURE) or None
    for g, _, value in of_gpus(m.GPU_UP):
        g["up"] = value == 1.0
    for g, labels, value in of_gpus(m.GPU_VIRTUALIZATION_MODE):
        if value == 1.0:
            g["virtualization_mode"] = labels.get(_MODE)
    for g, _, value in of_gpus(m.GPU_MIG_MODE_ENABLED):
        g["mig_mode_current"] = value == 1.0
    for g, _, value in of_gpus(m.GPU_UTILIZATION_RATIO):
        g["utilization"] = Utilization(gpu=value)
    for g, _, value in of_gpus(m.GPU_MEMORY_USED_BYTES):
        g["memory"] = Memory(used_bytes=int(value))
    for g, _, value in of_gpus(m.GPU_SM_ACTIVE_RATIO):
        g["gpm"] = Gpm(sm_active=value)

    process_series = _process_series(series)
    processes: dict[str, dict[tuple[int, int | None], dict[str, Any]]] = defaultdict(dict)
    for family, key in (
        (m.PROCESS_MEMORY_USED_BYTES, "used_memory_bytes"),
        (m.PROCESS_SM_UTILIZATION_RATIO, "sm_utilization"),
    ):
        for g, pid, labels, value in of_gpus_by(family, _PID):
            gi = _int(labels.get(_PROCESS_GI))
            entry = processes[g["uuid"]].setdefault(
                (pid, gi),
                {
                    "pid": pid,
                    "name": labels.get(_PROCESS_NAME) or None,
                    "gpu_instance_id": gi,
                    "compute_instance_id": _int(labels.get(_PROCESS_CI)),
                },
            )
            entry[key] = int(value) if key == "used_memory_bytes" else value

    instances: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for g, gi, labels, _ in of_gpus_by(m.MIG_INSTANCE_INFO, _GI):
        inst = instances[g["uuid"]].setdefault(
            gi, {"id": gi, "profile_name": labels.get(_PROFILE) or None, "cis": []}
        )
        ci = _int(labels.get(_CI))
        inst["cis"].append(
            MigComputeInstance(
                id=ci if ci is not None else 0,
                mig_uuid=labels.get(_MIG_UUID) or None,
                placement_start=_int(labels.get(_PLACEMENT_START)),
                placement_size=_int(labels.get(_PLACEMENT_SIZE)),
            )
        )
    for family, key in (
        (m.MIG_MEMORY_USED_BYTES, "memory_used_bytes"),
        (m.MIG_SM_ACTIVE_RATIO, "sm_active"),
    ):
        for g, gi, _, value in of_gpus_by(family, _GI):
            inst = instances[g["uuid"]].setdefault(gi, {"id": gi, "profile_name": None, "cis": []})
            inst[key] = value

    gpus = []
    for uuid, g in fields.items():
        if process_series == PROCESS_SERIES_COMPLETE:
            g["processes"] = tuple(
                Process(**entry)
                for _, entry in sorted(processes.get(uuid, {}).items(), key=lambda kv: kv[0][0])
            )
        gis = []
        for gi_id, inst in sorted(instances.get(uuid, {}).items()):
            sm = inst.get("sm_active")
            used = inst.get("memory_used_bytes")
            gis.append(
                MigGpuInstance(
                    id=gi_id,
                    profile_name=inst["profile_name"],
                    memory_used_bytes=int(used) if used is not None else None,
                    gpm=Gpm(sm_active=sm) if sm is not None else None,
                    compute_instances=tuple(sorted(inst["cis"], key=lambda c: c.id)),
                )
            )
        g["mig_instances"] = tuple(gis)
        gpus.append(Gpu(**g))

    timestamp = next(iter(series[m.LAST_SAMPLE_TIMESTAMP_SECONDS.name]), ({}, 0.0))[1]
    cycles = next(iter(series[m.SAMPLER_CYCLES_TOTAL.name]), ({}, -1.0))[1]
    up = next(iter(series[m.UP.name]), ({}, 0.0))[1]
    interval = next(iter(series[m.SAMPLER_INTERVAL_SECONDS.name]), ({}, None))[1]
    cadences = tuple(
        SamplingCadence(labels["reading"], value)
        for labels, value in series[m.SAMPLER_CADENCE_SECONDS.name]
        if labels.get("reading")
    )
    snapshot = Snapshot(
        timestamp=timestamp,
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        health=SamplerHealth(
            up=up == 1.0, cycles_total=int(cycles), interval_seconds=interval, cadences=cadences
        ),
        source="exporter",
    )
    return snapshot, process_series
