"""Reading NVML field values: one batched call per GPU per cycle, failures per entry.

``nvmlDeviceGetFieldValues`` succeeds even when every entry failed (docs/nvml-notes.md §4.14), so
the guarded call alone cannot tell absent from present. This module decodes each entry's value
union and remembers, per GPU, the field ids that answered "not supported" (re-probed after the
session's re-probe period, like every other absence, so a transient answer does not remove them
for good).

**Batching.** Readers ask for the ids they need with :func:`read_fields`. The ids readers asked
for every cycle during one cycle are the next cycle's batch: the first :func:`read_fields` of a
cycle fetches all of them in one call, and the other readers of that cycle are answered from it.
Ids nobody asks for any more (a configured field removed by a config reload, a count read once)
leave the batch after one cycle. A reader whose ids are not wanted every cycle (a cadenced
value) passes ``every_cycle=False`` and gets its own call when it is due, so its cost is not
added to every cycle's batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from vgpumon.collect.base import GpuContext
from vgpumon.nvml.errors import ABSENT_CODES, INVALID_ARGUMENT
from vgpumon.nvml.session import REPROBE_SECONDS

# A field id, or (field id, scope id) for fields asked per link or per scope.
FieldKey = TypeVar("FieldKey", bound=int | tuple[int, int])
_ABSENT_KEY = "fields.absent"  # field id -> ctx.now when it answered "not supported"
_CYCLE_KEY = "fields.cycle"  # the current cycle's _Cycle


@dataclass
class _Cycle:
    """One GPU's field values in one cycle. The sampler makes a new context for every GPU and
    cycle, so the context itself says which cycle a memo belongs to."""

    ctx: GpuContext
    wanted: set[Any]  # the batch: ids asked for every cycle during the previous cycle
    values: dict[Any, float | int] = field(default_factory=dict)
    fetched: set[Any] = field(default_factory=set)  # asked of NVML this cycle, answered or not
    asked: set[Any] = field(default_factory=set)  # asked for every cycle: the next batch


# nvmlValueType_t -> the c_nvmlValue_t member holding the value (docs/nvml-notes.md §1.8).
_UNION_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def decode_value(value_type: int, union: Any) -> float | int | None:
    member = _UNION_MEMBERS.get(int(value_type))
    if member is None:
        return None
    value = getattr(union, member, None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def read_fields(
    ctx: GpuContext, field_ids: Sequence[FieldKey], *, every_cycle: bool = True
) -> dict[FieldKey, float | int]:
    """Values of the given field ids that this GPU gave; absent ids are simply missing."""
    absent: dict[Any, float] = ctx.state.setdefault(_ABSENT_KEY, {})
    for fid in [f for f, since in absent.items() if ctx.now - since >= REPROBE_SECONDS]:
        del absent[fid]
    cycle: _Cycle | None = ctx.state.get(_CYCLE_KEY)
    if cycle is None or cycle.ctx is not ctx:
        cycle = _Cycle(ctx, cycle.asked if cycle is not None else set())
        ctx.state[_CYCLE_KEY] = cycle
    if every_cycle:
        cycle.asked.update(field_ids)
    missing: list[Any] = [f for f in field_ids if f not in cycle.fetched and f not in absent]
    if missing:
        batch = list(missing)
        if every_cycle:
            extra = cycle.wanted - cycle.fetched - absent.keys() - set(missing)
            batch += sorted(extra, key=repr)  # ints and (id, scope) pairs: a stable order
        _fetch(ctx, batch, cycle.values, absent)
        cycle.fetched.update(batch)
    return {f: cycle.values[f] for f in field_ids if f in cycle.values}


def _fetch(
    ctx: GpuContext, ids: list[Any], values: dict[Any, float | int], absent: dict[Any, float]
) -> None:
    entries = ctx.call("nvmlDeviceGetFieldValues", ctx.handle, ids)
    if entries is None:
        return
    for i, field_id in enumerate(ids):
        try:
            entry = entries[i]
        except (IndexError, TypeError):
            break
        ret = int(getattr(entry, "nvmlReturn", -1))
        if ret != 0:
            if ret in ABSENT_CODES or ret == INVALID_ARGUMENT:
                # 2 here means the driver does not know the id: as lasting as "not supported".
                absent[field_id] = ctx.now
            continue
        value = decode_value(getattr(entry, "valueType", -1), getattr(entry, "value", None))
        if value is not None:
            values[field_id] = value
