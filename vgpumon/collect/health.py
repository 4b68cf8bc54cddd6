"""Slow-moving health state: P-state, fans, ECC, row remapping.

Each is its own collector so that a board that lacks one (passive cooling has no fans; ECC off; no
row remapper before Ampere) pays exactly one not-supported call for it.

Value classes: P-state, fan speed, ECC and remapped-row counters are dynamic (every cycle; the
ECC counters come from the cycle's one batched field-value call); the ECC mode is slow (it
changes only with a reset after an administrator's ``nvidia-smi -e``).
"""

from __future__ import annotations

from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, ratio
from vgpumon.collect.field_values import read_fields
from vgpumon.model import Ecc, RemappedRows

PSTATE_UNKNOWN = 32
# nvmlMemoryErrorType_t x nvmlEccCounterType_t
CORRECTED, UNCORRECTED = 0, 1
VOLATILE, AGGREGATE = 0, 1


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def read_performance_state(ctx: GpuContext, out: GpuBuilder) -> None:
    state = _int(ctx.call("nvmlDeviceGetPerformanceState", ctx.handle))
    out.set(performance_state=state if state is not None and 0 <= state < PSTATE_UNKNOWN else None)


def read_fan(ctx: GpuContext, out: GpuBuilder) -> None:
    """Mean speed over the board's fans; absent on fanless (passively cooled) boards."""
    fans = ctx.attempt("nvmlDeviceGetNumFans", ctx.handle)
    count = _int(fans.value)
    if count is None:
        if fans.status == "absent":
            # Drivers before R510 have no fan count, only the single-fan getter.
            out.set(fan_speed=ratio(_int(ctx.call("nvmlDeviceGetFanSpeed", ctx.handle))))
        return
    speeds = [
        _int(ctx.call("nvmlDeviceGetFanSpeed_v2", ctx.handle, fan, key=fan)) for fan in range(count)
    ]
    known = [s for s in speeds if s is not None]
    out.set(fan_speed=ratio(sum(known) / len(known)) if known else None)


# (error type, counter type) -> field id of the same count (nvmlDeviceGetTotalEccErrors' values)
ECC_FIELDS = {
    (CORRECTED, VOLATILE): 3,  # NVML_FI_DEV_ECC_SBE_VOL_TOTAL
    (UNCORRECTED, VOLATILE): 4,  # NVML_FI_DEV_ECC_DBE_VOL_TOTAL
    (CORRECTED, AGGREGATE): 5,  # NVML_FI_DEV_ECC_SBE_AGG_TOTAL
    (UNCORRECTED, AGGREGATE): 6,  # NVML_FI_DEV_ECC_DBE_AGG_TOTAL
}


def _ecc_counts(ctx: GpuContext) -> dict[tuple[int, int], int | None]:
    """The four totals from the batched field values; the getter for any the batch lacked."""
    got = read_fields(ctx, list(ECC_FIELDS.values()))
    counts: dict[tuple[int, int], int | None] = {}
    for (error_type, counter), field_id in ECC_FIELDS.items():
        value = _int(got.get(field_id))
        if value is None:
            value = _int(
                ctx.call(
                    "nvmlDeviceGetTotalEccErrors",
                    ctx.handle,
                    error_type,
                    counter,
                    key=(error_type, counter),
                )
            )
        counts[(error_type, counter)] = value
    return counts


def read_ecc(ctx: GpuContext, out: GpuBuilder) -> None:
    mode = ctx.slow("ecc.mode", lambda: ctx.call("nvmlDeviceGetEccMode", ctx.handle))
    current = bool(mode[0]) if mode else None
    pending = bool(mode[1]) if mode else None
    # the counters exist only while ECC is on
    counts = _ecc_counts(ctx) if current else {}
    out.set(
        ecc=Ecc(
            mode_current=current,
            mode_pending=pending,
            corrected_volatile=counts.get((CORRECTED, VOLATILE)),
            uncorrected_volatile=counts.get((UNCORRECTED, VOLATILE)),
            corrected_aggregate=counts.get((CORRECTED, AGGREGATE)),
            uncorrected_aggregate=counts.get((UNCORRECTED, AGGREGATE)),
        )
    )


def read_remapped_rows(ctx: GpuContext, out: GpuBuilder) -> None:
    # NOT_SUPPORTED while MIG instances exist (docs/nvml-notes.md §4.8); asking would cache the GPU
    # as having no remapper at all.
    if out.get("mig_mode_current"):
        return
    rows = ctx.call("nvmlDeviceGetRemappedRows", ctx.handle)
    if not rows:
        return
    correctable, uncorrectable, pending, failed = (list(rows) + [None] * 4)[:4]
    out.set(
        remapped_rows=RemappedRows(
            correctable=_int(correctable),
            uncorrectable=_int(uncorrectable),
            pending=bool(pending) if pending is not None else None,
            failed=bool(failed) if failed is not None else None,
        )
    )


READERS = [
    FunctionReader("performance_state", read_performance_state),
    FunctionReader("fan", read_fan),
    FunctionReader("ecc", read_ecc),
    FunctionReader("remapped_rows", read_remapped_rows),
]
