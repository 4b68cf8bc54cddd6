"""The NVML fields an operator declared in the serve config (``fields:``), read raw.

The ids ride in the cycle's one batched ``nvmlDeviceGetFieldValues`` call per GPU
(:mod:`vgpumon.collect.field_values`), so declaring a field adds an entry to that call, not a
call. A field the GPU answers "not supported" (or an id its driver does not know) has no value
and is not asked again until the re-probe, like every other absence (docs/design.md, rules 3 and 4).

Values go into the snapshot as NVML gave them (:class:`vgpumon.model.FieldValue`): the metric
name, type and scale are the exporter's (:mod:`vgpumon.metrics.extra_fields`). The collector is
``fields``; without declared fields it does not run and has no collector status, so an exporter
that uses none serves exactly what it served before.
"""

from __future__ import annotations

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, SamplerConfig
from vgpumon.collect.field_values import read_fields
from vgpumon.model import FieldValue


def read_extra_fields(ctx: GpuContext, out: GpuBuilder) -> None:
    keys = ctx.config.extra_fields  # one tuple for the whole read, even across a reload
    if not keys:
        return
    got = read_fields(ctx, list(keys))
    values = []
    for key in keys:
        value = got.get(key)
        if value is None:
            continue
        field_id, scope_id = key if isinstance(key, tuple) else (key, None)
        values.append(FieldValue(field_id=field_id, value=float(value), scope_id=scope_id))
    out.set(extra_fields=tuple(values))


def _declared(config: SamplerConfig) -> bool:
    return bool(config.extra_fields)


READERS = [FunctionReader("fields", read_extra_fields, active=_declared)]
