"""Processes using the GPU, their memory, and their share of the SMs.

Per-process utilization comes as timestamped samples (docs/design.md, rule 5): a per-GPU cursor
keeps the newest timestamp seen, each cycle averages the samples newer than it, and NVML's NOT_FOUND
(or pynvml's SUCCESS-raised-as-error, docs/nvml-notes.md §1.6) means "no process was busy" —
processes without a sample are then truly idle (0), not unknown, once their last sample is older
than ``HOLD_CYCLES`` cycles (NVML samples each process only about once a second). On a MIG-enabled
GPU the parent lists every instance's processes only with privileges; otherwise each MIG device
lists its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vgpumon.collect.base import (
    FunctionReader,
    GpuBuilder,
    GpuContext,
    cadence,
    nvml_id,
    nvml_int,
    ratio,
)
from vgpumon.collect.mig import MigDevice, mig_devices
from vgpumon.model import Process
from vgpumon.nvml.errors import NOT_FOUND

# Process lists and their utilization samples: every 5 s by default (averaged between reads).
PROCESSES = cadence("processes", 5.0)
CURSOR_KEY = "processes.cursor"
HELD_KEY = "processes.held"
# NVML publishes a per-process sample about once a second, so a cycle can end between two samples
# of a busy process. Its last sample stands in for that many cycles before it counts as idle.
HOLD_CYCLES = 2
UTIL_FUNCTION = "nvmlDeviceGetProcessUtilization"
LISTS = (
    ("compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
)


_Key = tuple[int, "int | None", "int | None"]  # pid, GPU instance, compute instance


@dataclass
class _Entry:
    pid: int
    kind: str
    used_memory_bytes: int | None
    gpu_instance_id: int | None
    compute_instance_id: int | None


@dataclass
class _Util:
    sm: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)
    encoder: list[float] = field(default_factory=list)
    decoder: list[float] = field(default_factory=list)


def _proc_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def process_name(ctx: GpuContext, pid: int) -> str | None:
    """/proc where this host's PIDs are visible; NVML's own lookup otherwise.

    A simulated host's PIDs are not this machine's, so /proc is never read for them.
    """
    if not ctx.session.source.startswith("sim:"):
        name = _proc_name(pid)
        if name is not None:
            return name
    name = ctx.call("nvmlSystemGetProcessName", pid, no_data=(NOT_FOUND,))
    if isinstance(name, bytes):
        name = name.decode("utf-8", "replace")
    return name or None


def _add(
    entries: dict[_Key, _Entry],
    kind: str,
    listed: Iterable[Any],
    device: MigDevice | None,
) -> None:
    for p in listed:
        pid = nvml_int(getattr(p, "pid", None))
        if pid is None:
            continue
        gi = nvml_id(getattr(p, "gpuInstanceId", None))
        ci = nvml_id(getattr(p, "computeInstanceId", None))
        if device is not None:
            gi = device.gpu_instance_id if gi is None else gi
            ci = device.compute_instance_id if ci is None else ci
        key = (pid, gi, ci)
        memory = nvml_int(getattr(p, "usedGpuMemory", None))
        known = entries.get(key)
        if known is None:
            entries[key] = _Entry(pid, kind, memory, gi, ci)
        elif known.used_memory_bytes is None:
            known.used_memory_bytes = memory  # compute and graphics list the same context


def _list_processes(ctx: GpuContext, mig: bool) -> dict[_Key, _Entry] | None:
    """Processes by (pid, GI, CI); None when a list failed this cycle or none could be read.

    A list that failed (a timeout, an unknown error) makes the whole answer unknown: reporting the
    other list alone would show processes as gone. A list that is absent (graphics on a compute-only
    board) just contributes nothing.
    """
    entries: dict[_Key, _Entry] = {}
    read_any = failed = False

    def read(handle: Any, device: MigDevice | None, key: Any) -> None:
        nonlocal read_any, failed
        for kind, function in LISTS:
            got = ctx.attempt(function, handle, key=key)
            if got.value is not None:
                read_any = True
                _add(entries, kind, got.value, device)
            elif got.status == "error":
                failed = True

    read(ctx.handle, None, ())
    if mig and not read_any and not failed:
        for device in mig_devices(ctx):
            read(device.handle, device, "mig")
    return entries if read_any and not failed else None


def _utilization(ctx: GpuContext) -> dict[int, _Util] | None:
    """Samples newer than the cursor, by PID; None when NVML could not say."""
    cursor = ctx.state.get(CURSOR_KEY)
    first = not isinstance(cursor, int)
    if not isinstance(cursor, int):
        cursor = max(0, int((ctx.now - 1.0) * 1_000_000))
    got = ctx.attempt(UTIL_FUNCTION, ctx.handle, cursor, no_data=(NOT_FOUND,))
    if got.status in ("absent", "error"):
        return None
    # NOT_FOUND / SUCCESS-as-error: nothing was busy since the cursor
    samples = got.value if got.value is not None else []
    by_pid: dict[int, _Util] = {}
    newest = cursor
    for sample in samples:
        pid = nvml_int(getattr(sample, "pid", None))
        stamp = nvml_int(getattr(sample, "timeStamp", None))
        if pid is None or stamp is None or stamp <= cursor:
            continue
        newest = max(newest, stamp)
        util = by_pid.setdefault(pid, _Util())
        for name, attr in (
            ("sm", "smUtil"),
            ("memory", "memUtil"),
            ("encoder", "encUtil"),
            ("decoder", "decUtil"),
        ):
            value = nvml_int(getattr(sample, attr, None))
            if value is not None:
                getattr(util, name).append(float(value))
    ctx.state[CURSOR_KEY] = newest
    _hold_recent(ctx, by_pid)
    if first and not by_pid:
        # A driver (or simulator) that has only just started has no samples yet: a one-shot
        # snapshot should look again after an interval rather than report everyone idle.
        ctx.want_interval()
    return by_pid


def _hold_recent(ctx: GpuContext, by_pid: dict[int, _Util]) -> None:
    """Fill PIDs without a new sample from their last one, for at most HOLD_CYCLES cycles."""
    held: dict[int, tuple[_Util, int]] = ctx.state.setdefault(HELD_KEY, {})
    for pid in list(held):
        util, age = held[pid]
        if pid in by_pid:
            continue
        if age >= HOLD_CYCLES:
            del held[pid]
        else:
            held[pid] = (util, age + 1)
            by_pid[pid] = util
    for pid, util in by_pid.items():
        if held.get(pid, (None, 0))[0] is not util:
            held[pid] = (util, 0)


def _mean(values: list[float], known: bool) -> float | None:
    if values:
        return ratio(sum(values) / len(values))
    return 0.0 if known else None


def read_processes(ctx: GpuContext, out: GpuBuilder) -> None:
    """Cadenced (``SamplerConfig.cadences["processes"]``): between reads the last list stands."""
    if not ctx.config.processes:
        return
    if not ctx.due(PROCESSES):
        if ctx.previous is not None:
            out.set(processes=ctx.previous.processes)
        return
    mig = bool(out.get("mig_mode_current"))
    entries = _list_processes(ctx, mig)
    if entries is None:
        return
    # Per-process utilization is one of the calls a MIG-enabled GPU does not support.
    util = None if mig or not entries else _utilization(ctx)
    processes = []
    for entry in sorted(entries.values(), key=lambda e: (e.pid, e.gpu_instance_id or 0)):
        sample = util.get(entry.pid, _Util()) if util is not None else _Util()
        known = util is not None
        processes.append(
            Process(
                pid=entry.pid,
                name=process_name(ctx, entry.pid),
                kind=entry.kind,
                used_memory_bytes=entry.used_memory_bytes,
                gpu_instance_id=entry.gpu_instance_id,
                compute_instance_id=entry.compute_instance_id,
                sm_utilization=_mean(sample.sm, known),
                memory_utilization=_mean(sample.memory, known),
                encoder_utilization=_mean(sample.encoder, known),
                decoder_utilization=_mean(sample.decoder, known),
            )
        )
    out.set(processes=tuple(processes))


READERS = [FunctionReader("processes", read_processes)]
