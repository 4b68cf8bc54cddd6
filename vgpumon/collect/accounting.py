"""Accounting: the driver's own per-process record of GPU time (accounting mode on).

Per-process utilization samples cannot bill a time-sliced GPU: on one H200 two processes at duty
0.3 and 0.5 summed 1,918 and 82 SM-percent over 40 s while the GPU read 50 % (docs/metering.md).
With accounting mode on, the driver integrates each process's utilization itself:
``nvmlDeviceGetAccountingStats_v2`` (R610+) gives the sum of the per-sample percentages and the
sample count, the older ``nvmlDeviceGetAccountingStats`` the rounded lifetime average; both give
the process's elapsed time (0 while it runs: then now - start).

The mode is read, never set (``nvidia-smi -am 1`` is the administrator's), every
:data:`~vgpumon.collect.base.SLOW_SECONDS`. While it is on, the PIDs in the driver's buffer are
read every cycle, and each running PID's record; a PID whose process ended has a final record,
read once and kept (the buffer holds up to a few thousand ended processes: they cost nothing per
cycle). Metering (:mod:`vgpumon.collect.metering`) turns the records into busy seconds.
"""

from __future__ import annotations

from typing import Any

from vgpumon.collect.base import (
    SLOW_SECONDS,
    FunctionReader,
    GpuBuilder,
    GpuContext,
    note_unsupported,
    nvml_int,
    ratio,
)
from vgpumon.model import AccountingRecord

NAME = "accounting"
_FINAL_KEY = "accounting.final"  # pid -> its record once the process ended
_MODE_KEY = "accounting.mode"
NOT_FOUND = 6  # a PID that left the buffer between the list and its stats


def _record(pid: int, raw: Any, now: float) -> AccountingRecord:
    running = bool(nvml_int(getattr(raw, "isRunning", None)))
    start_us = nvml_int(getattr(raw, "startTime", None))
    time_ms = nvml_int(getattr(raw, "time", None))
    start = start_us / 1e6 if start_us else None
    if running:
        elapsed = max(0.0, now - start) if start is not None else None
    else:
        elapsed = time_ms / 1e3 if time_ms is not None else None
    sum_util = nvml_int(getattr(raw, "sumGpuUtil", None))
    samples = nvml_int(getattr(raw, "sampleCount", None))
    memory = nvml_int(getattr(raw, "maxMemoryUsage", None))
    return AccountingRecord(
        pid=pid,
        running=running,
        gpu_utilization=ratio(nvml_int(getattr(raw, "gpuUtilization", None))),
        sum_gpu_util_percent=sum_util if samples else None,
        sample_count=samples if samples else None,
        elapsed_seconds=elapsed,
        start_timestamp_seconds=start,
        max_memory_bytes=memory if memory is not None and memory < 2**64 - 1 else None,
    )


def _stats(ctx: GpuContext, pid: int) -> Any:
    """The _v2 record where module and driver have it, else v1's."""
    got = ctx.attempt("nvmlDeviceGetAccountingStats_v2", ctx.handle, pid, no_data=(NOT_FOUND,))
    if got.ok or got.status != "absent":
        return got.value
    return ctx.call("nvmlDeviceGetAccountingStats", ctx.handle, pid, no_data=(NOT_FOUND,))


def read_accounting(ctx: GpuContext, out: GpuBuilder) -> None:
    if out.get("mig_mode_current"):
        return  # MIG forces accounting off (docs/nvml-notes.md §4.15)
    mode = ctx.attempt("nvmlDeviceGetAccountingMode", ctx.handle) if _due(ctx) else None
    if mode is not None:
        if not mode.ok:
            note_unsupported(out, NAME, mode.error if mode.status == "absent" else None)
            ctx.state[_MODE_KEY] = None
            return
        ctx.state[_MODE_KEY] = bool(nvml_int(mode.value))
    enabled = ctx.state.get(_MODE_KEY)
    out.set(accounting_enabled=enabled)
    final: dict[int, AccountingRecord] = ctx.state.setdefault(_FINAL_KEY, {})
    if not enabled:
        final.clear()
        return
    pids = ctx.call("nvmlDeviceGetAccountingPids", ctx.handle)
    if pids is None:
        return
    now = ctx.now
    listed = [p for p in (nvml_int(x) for x in pids) if p is not None]
    # A PID the driver lists as running again was reused by a new process: read it anew.
    running = {p.pid for p in out.get("processes") or ()}
    records = []
    for pid in listed:
        record = final.get(pid) if pid not in running else None
        if record is None:
            raw = _stats(ctx, pid)
            if raw is None:
                continue
            record = _record(pid, raw, now)
            if not record.running:
                final[pid] = record
        records.append(record)
    for pid in [p for p in final if p not in set(listed)]:
        del final[pid]  # left the buffer (it holds the most recent processes)
    out.set(accounting=tuple(records))


def _due(ctx: GpuContext) -> bool:
    return _MODE_KEY not in ctx.state or ctx.due(_MODE_KEY, SLOW_SECONDS)


READERS = [FunctionReader(NAME, read_accounting)]
