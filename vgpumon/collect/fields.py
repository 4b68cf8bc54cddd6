"""Reading NVML field values, whose failures come per entry, not as exceptions.

``nvmlDeviceGetFieldValues`` succeeds even when every entry failed (docs/nvml-notes.md §4.14), so
the guarded call alone cannot tell absent from present. This module decodes each entry's value union
and remembers, per GPU, the field ids that answered "not supported", so they are not asked again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vgpumon.collect.base import GpuContext
from vgpumon.nvml.errors import ABSENT_CODES, INVALID_ARGUMENT

_STATE_KEY = "fields.absent"

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


def read_fields(ctx: GpuContext, field_ids: Sequence[int]) -> dict[int, float | int]:
    """Values of the given field ids that this GPU gave; absent ids are simply missing."""
    absent: set[int] = ctx.state.setdefault(_STATE_KEY, set())
    wanted = [f for f in field_ids if f not in absent]
    if not wanted:
        return {}
    entries = ctx.call("nvmlDeviceGetFieldValues", ctx.handle, wanted)
    if entries is None:
        return {}
    values: dict[int, float | int] = {}
    for i, field_id in enumerate(wanted):
        try:
            entry = entries[i]
        except (IndexError, TypeError):
            break
        ret = int(getattr(entry, "nvmlReturn", -1))
        if ret != 0:
            if ret in ABSENT_CODES or ret == INVALID_ARGUMENT:
                # 2 here means the driver does not know the id: as permanent as "not supported".
                absent.add(field_id)
            continue
        value = decode_value(getattr(entry, "valueType", -1), getattr(entry, "value", None))
        if value is not None:
            values[field_id] = value
    return values
