"""Families for the NVML fields declared in the serve config (``fields:``).

The metric table (:mod:`vgpumon.metrics.table`) is the one place built-in names are defined;
these families are the operator's, so they are built from the config and handed to the renderer
through :class:`~vgpumon.metrics.table.ExportOptions` (``families``), which a config reload
replaces. They are ordinary :class:`~vgpumon.metrics.table.Family` rows of the per-GPU scope:
the same identity labels (``gpu``, ``uuid``), only GPUs that are up, no sample where the GPU gave
no value (docs/design.md, rule 4), and the same renderer for text and OpenMetrics. Their names
were checked against the naming rules and the table when the config was read
(:mod:`vgpumon.config.fields`).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

from vgpumon.metrics.table import GPU, ExportOptions, Family, Sample, unit_of
from vgpumon.model import FieldValue, Gpu, Snapshot

COLLECTOR = "fields"  # the reader's name (vgpumon.collect.fields)
Key = tuple[int, int | None]  # (field id, scope id or None)


@dataclass(frozen=True)
class ExtraField:
    """One declared field: which NVML value, and the family it is exported as."""

    field_id: int
    name: str  # the full metric name, ``_total`` included for a counter
    type: str  # "gauge" | "counter"
    help: str
    scale: float = 1.0  # the exported value is NVML's times this
    scope_id: int | None = None  # asked as (id, scope) when set: a link, a sensor, ...

    @property
    def key(self) -> int | tuple[int, int]:
        """How the sampler asks for it (:data:`vgpumon.collect.base.SamplerConfig.extra_fields`)."""
        return self.field_id if self.scope_id is None else (self.field_id, self.scope_id)


class _Index:
    """Each GPU's field values by (id, scope), built once per snapshot for all the families.

    A family's samples walk every GPU; looking a value up in the GPU's list would cost
    fields x fields per GPU and render. Like the renderer, not thread-safe: the server renders
    on its event loop only. The snapshot is held weakly, so the index never keeps a replaced
    snapshot alive (the publisher's memory bound, vgpumon/export/publisher.py).
    """

    def __init__(self) -> None:
        self._snapshot: weakref.ReferenceType[Snapshot] | None = None
        self._by_gpu: dict[str, dict[Key, float]] = {}

    def values(self, snapshot: Snapshot, gpu: Gpu) -> dict[Key, float]:
        if self._snapshot is None or self._snapshot() is not snapshot:
            self._snapshot = weakref.ref(snapshot)
            self._by_gpu = {}
        found = self._by_gpu.get(gpu.uuid)
        if found is None:
            found = self._by_gpu[gpu.uuid] = {_key(v): v.value for v in gpu.extra_fields}
        return found


def _key(value: FieldValue) -> Key:
    return value.field_id, value.scope_id


@functools.lru_cache(maxsize=8)
def field_families(fields: tuple[ExtraField, ...]) -> tuple[Family, ...]:
    """One family per declared field. Cached by the (immutable) declarations, so a reload that
    changes nothing yields equal export options and no re-render."""
    index = _Index()
    return tuple(_family(spec, index) for spec in fields)


def _family(spec: ExtraField, index: _Index) -> Family:
    key: Key = (spec.field_id, spec.scope_id)
    scale = spec.scale

    def samples(snapshot: Snapshot, options: ExportOptions) -> Iterator[Sample]:
        for ids, gpu in GPU.walk(snapshot, options):
            value = index.values(snapshot, gpu).get(key)
            if value is not None:
                yield ids, value * scale

    return Family(
        name=spec.name,
        type=spec.type,
        unit=unit_of(spec.name),
        help=spec.help,
        labels=GPU.labels,
        section=GPU.section,
        collector=COLLECTOR,
        samples=samples,
    )
