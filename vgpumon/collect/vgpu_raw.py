"""vGPU calls made so that the true value comes back, and decoders for NVML's vGPU structs.

pynvml 13.615.71 wraps a few vGPU calls wrongly (docs/nvml-notes.md §11, §12.1). On real pynvml
these helpers go around the wrapper through the loaded library (``_nvmlGetFunctionPointer``) with
the C types the header declares; a module without that hook (the simulator, a vendor shim) is asked
through its Python function, which must then return the true value:

* ``nvmlVgpuInstanceGetFbUsage`` reads a 64-bit value into a 32-bit ``c_uint``: usage wraps every
  4 GiB (a VM using 5 GiB reads as 1 GiB). Raw call with ``c_ulonglong``.
* ``nvmlVgpuInstanceGetAccountingPids`` raises ``UnboundLocalError`` when the list is empty and
  returns ctypes objects, not a list. Raw call with a caller-sized buffer.
* ``nvmlVgpuInstanceGetVmID`` returns ``(bytes, int)`` although every other vGPU string is ``str``.
* The ``_v2`` scheduler calls (header 13.2) raise FUNCTION_NOT_FOUND on R580: ask them first, fall
  back to v1 once the session has cached them as absent.
* The v1 scheduler parameters are a union whose ``timeslice`` sits at offset 4 in the ARR member and
  at offset 0 in the plain one: the member is chosen by ``arrMode``.

Every call still goes through :class:`~vgpumon.nvml.session.NvmlSession`, so errors are classified,
counted and cached exactly like any other call.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from vgpumon.nvml.errors import DRIVER_NOT_LOADED, NOT_FOUND
from vgpumon.nvml.session import SYSTEM, NvmlSession

# NOT_FOUND for an instance id: the vGPU was destroyed between listing and reading it (churn).
GONE = (NOT_FOUND,)
# DRIVER_NOT_LOADED from per-instance getters means "the guest driver is not running", not that the
# host driver is gone: it must never reach the session's lifecycle handling (which re-inits NVML).
GUEST_DRIVER_ABSENT = DRIVER_NOT_LOADED

ENGINE_GRAPHICS = 1  # NVML_VGPU_SCHEDULER_ENGINE_TYPE_GRAPHICS
# The encoder engines a scheduler log can be asked for (R590+ engine ids), by their names.
ENCODER_ENGINES = {"nvenc0": 3, "nvenc1": 2}  # NVML_VGPU_SCHEDULER_ENGINE_TYPE_NVENC0 / 1
ARR_DEFAULT, ARR_DISABLE, ARR_ENABLE = 0, 1, 2
POLICY_BEST_EFFORT = 1
RING_ENTRIES = 200  # NVML_SCHEDULER_SW_MAX_LOG_ENTRIES
# Struct versions of the GPU-instance v1 scheduler getters, for modules without the constants.
STATE_INFO_V1 = 0x01000018  # nvmlVgpuSchedulerStateInfo_v1
LOG_INFO_V1 = 0x010025A0  # nvmlVgpuSchedulerLogInfo_v1

# A vGPU host has at most a few hundred guest processes per vGPU in its accounting buffer; asking
# with room for this many makes the sizing round trip (and its SUCCESS-on-empty trap) unnecessary.
MAX_ACCOUNTING_PIDS = 4096


def has_raw(session: NvmlSession) -> bool:
    """Whether the module can hand out C symbols (real pynvml) for the raw calls below."""
    return callable(getattr(session.module, "_nvmlGetFunctionPointer", None))


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    inner = getattr(value, "value", None)  # a ctypes scalar
    if isinstance(inner, int) and not isinstance(inner, bool):
        return inner
    return None


def nvml_text(value: Any) -> str | None:
    """A string from NVML: ``str`` as pynvml decodes it, or ``bytes`` where it does not."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value).split(b"\x00", 1)[0].decode("utf-8", "replace")
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


# --------------------------------------------------------------------------- instance getters


def vgpu_fb_usage(session: NvmlSession, gpu: str, vgpu: int) -> int | None:
    """Framebuffer bytes in use by the VM, without the wrapper's 32-bit wrap."""
    if has_raw(session):
        out = ctypes.c_ulonglong(0)
        ok = session.call_raw(
            gpu, "nvmlVgpuInstanceGetFbUsage", ctypes.c_uint(vgpu), ctypes.byref(out), no_data=GONE
        )
        return int(out.value) if ok else None
    return as_int(session.call(gpu, "nvmlVgpuInstanceGetFbUsage", vgpu, no_data=GONE))


def vgpu_accounting_pids(session: NvmlSession, gpu: str, vgpu: int) -> list[int] | None:
    """Guest PIDs in the vGPU's accounting buffer; ``[]`` when there are none (no crash)."""
    if has_raw(session):
        count = ctypes.c_uint(MAX_ACCOUNTING_PIDS)
        buf = (ctypes.c_uint * MAX_ACCOUNTING_PIDS)()
        ok = session.call_raw(
            gpu,
            "nvmlVgpuInstanceGetAccountingPids",
            ctypes.c_uint(vgpu),
            ctypes.byref(count),
            buf,
            no_data=GONE,
        )
        if not ok:
            return None
        return [int(buf[i]) for i in range(min(count.value, MAX_ACCOUNTING_PIDS))]
    return pid_list(session.call(gpu, "nvmlVgpuInstanceGetAccountingPids", vgpu, no_data=GONE))


def pid_list(value: Any) -> list[int] | None:
    """A PID list from a module's Python function: a list, or pynvml's ``(c_uint, array)`` pair."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2 and as_int(value[0]) is not None:
        count = as_int(value[0]) or 0
        array = value[1]
        return [int(as_int(array[i]) or 0) for i in range(count)]
    if isinstance(value, (list, tuple)):
        pids = [as_int(v) for v in value]
        return [p for p in pids if p is not None]
    return None


def vm_id(value: Any) -> tuple[str | None, str | None]:
    """``nvmlVgpuInstanceGetVmID`` -> (VM id text, id type name); the id comes back as ``bytes``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        return None, None
    kind = as_int(value[1])
    return nvml_text(value[0]), VM_ID_TYPES.get(kind) if kind is not None else None


VM_ID_TYPES = {0: "domain_id", 1: "uuid"}


# --------------------------------------------------------------------------- utilization samples


def union_uint(value: Any) -> int | None:
    """A ``c_nvmlValue_t`` utilization field: NVML reports UNSIGNED_INT, so ``.uiVal``.

    pynvml drops the ``sampleValType`` it gets back, so the member cannot be chosen from it
    (docs/nvml-notes.md §6.4, quirk 15). Plain ints (the per-process structs) pass through.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    ui = getattr(value, "uiVal", None)
    return int(ui) if isinstance(ui, int) else None


# --------------------------------------------------------------------------- scheduler


@dataclass(frozen=True)
class SchedulerParams:
    """Decoded scheduler state, whichever call and union member it came from."""

    policy: int
    arr_mode: int | None  # None from the v2 call, which has no ARR mode field
    avg_factor: int | None
    timeslice_ns: int | None
    api: str  # "v1" | "v2"


@dataclass(frozen=True)
class LogEntry:
    timestamp_ns: int
    run_total_ns: int
    run_ns: int
    runlist: int
    target_slice_ns: int
    preemption_total_ns: int


@dataclass(frozen=True)
class SchedulerLog:
    params: SchedulerParams
    entries: tuple[LogEntry, ...]  # oldest first; only those at or after ``after_ns`` if given
    ring_full: bool
    # (oldest timestamp, newest timestamp, entries) of the whole read, decoded or not: what the
    # missed-entry estimate needs
    span: tuple[int, int, int] | None = None


def decode_union(
    arr_mode: int, params: Any, bounds: tuple[int, int] | None
) -> tuple[int | None, int | None]:
    """(avgFactor, timeslice ns) from a v1 ``c_nvmlVgpuSchedulerParams_t``.

    ENABLE uses the ARR member (timeslice at offset 4), DISABLE the plain one (offset 0). For
    DEFAULT the header does not say which member the driver writes; the one whose timeslice lies
    within the capability's [min, max] wins, and without bounds (or if both or neither fit) the
    timeslice is left unknown rather than guessed.
    """
    with_arr = params.vgpuSchedDataWithARR
    plain = params.vgpuSchedData
    arr_pair = (int(with_arr.avgFactor), int(with_arr.timeslice))
    plain_slice = int(plain.timeslice)
    if arr_mode == ARR_ENABLE:
        return arr_pair
    if arr_mode == ARR_DISABLE:
        return None, plain_slice
    if bounds is None:
        return None, None
    lo, hi = bounds
    arr_fits = lo <= arr_pair[1] <= hi
    plain_fits = lo <= plain_slice <= hi
    if arr_fits and not plain_fits:
        return arr_pair
    if plain_fits and not arr_fits:
        return None, plain_slice
    return None, None


def newer_then_older(
    session: NvmlSession,
    gpu: str,
    newer: str,
    older: str,
    newer_args: Iterable[Any] | None,
    older_args: Iterable[Any] | None,
    key: Hashable = (),
    no_data: Iterable[int] = (),
) -> tuple[Any, bool]:
    """Call ``newer``; once it is known to be absent, call ``older``. Returns (value, used newer).

    A newer call is missing because the *driver* lacks the symbol (FUNCTION_NOT_FOUND on R580 for
    the ``_v2`` scheduler calls, on pre-R550 drivers for the ``…UtilizationInfo`` calls), which is
    the same for every GPU: its absence is recorded once for the library (``SYSTEM``), so a host
    with 16 GPUs pays, and counts, one failed call, not 16.
    """
    no_data = tuple(no_data)
    if newer_args is not None:
        got = session.attempt(SYSTEM, newer, *newer_args, key=key, no_data=no_data)
        if got.status != "absent":
            return got.value, True
    if older_args is None:
        return None, False
    return session.call(gpu, older, *older_args, key=key, no_data=no_data), False


def newer_and_older_absent(
    session: NvmlSession, gpu: str, newer: str, older: str, key: Hashable = ()
) -> bool:
    """Whether both calls of a :func:`newer_then_older` pair are known to be absent for ``gpu``.

    The newer call's absence is recorded for the library (``SYSTEM``), the older one's per GPU.
    """
    return session.is_absent(SYSTEM, newer, key) and session.is_absent(gpu, older, key)


def _struct(session: NvmlSession, name: str, **fields: int) -> Any:
    cls = getattr(session.module, name, None)
    if cls is None:
        return None
    obj = cls()
    for field_name, value in fields.items():
        setattr(obj, field_name, value)
    return obj


def _module_const(session: NvmlSession, name: str, default: int) -> int:
    value = getattr(session.module, name, default)
    return value if isinstance(value, int) else default


class _SchedulerNames(NamedTuple):
    """pynvml names of one scheduler getter ("State" or "Log") and its structs.

    Built once: the poller calls these several times a second per GPU, and a fresh name string per
    call would only churn the interpreter's attribute caches.
    """

    v2_struct: str
    v1_struct: str
    v1_version_const: str
    device_v1: str
    device_v2: str
    gpu_instance_v1: str
    gpu_instance_v2: str


_SCHEDULER_NAMES = {
    what: _SchedulerNames(
        v2_struct=f"c_nvmlVgpuScheduler{what}Info_v2_t",
        v1_struct=f"c_nvmlVgpuScheduler{what}Info_v1_t",
        v1_version_const=f"nvmlVgpuScheduler{what}Info_v1",
        device_v1=f"nvmlDeviceGetVgpuScheduler{what}",
        device_v2=f"nvmlDeviceGetVgpuScheduler{what}_v2",
        gpu_instance_v1=f"nvmlGpuInstanceGetVgpuScheduler{what}",
        gpu_instance_v2=f"nvmlGpuInstanceGetVgpuScheduler{what}_v2",
    )
    for what in ("State", "Log")
}


def _scheduler_info(
    session: NvmlSession,
    gpu: str,
    target: Any,
    what: str,
    v1_version: int,
    *,
    gpu_instance: bool,
    engine: int = ENGINE_GRAPHICS,
) -> tuple[Any, str]:
    """``nvml{Device,GpuInstance}GetVgpuScheduler<what>``: ``_v2`` (R595+) first, v1 where the
    driver lacks it. Returns (the info struct or None, "v2" | "v1").

    ``what`` is "State" or "Log": the two getters take the same arguments and structs of the same
    naming. The device v1 call allocates its own struct; the GPU-instance v1 call takes a versioned
    one (``v1_version`` where the module has no ``nvmlVgpuScheduler<what>Info_v1`` constant).
    ``engine``: an encoder engine's log instead of the graphics engine's; the device v1 call has
    no engine input, so an encoder engine of a GPU is read through ``_v2`` only, and its support
    is cached apart from the graphics engine's.
    """
    names = _SCHEDULER_NAMES[what]
    v2_struct = _struct(session, names.v2_struct, engineId=engine)
    v2_args = (target, v2_struct) if v2_struct is not None else None
    v1_args: tuple[Any, ...] | None
    key: Hashable
    if gpu_instance:
        v1_struct = _struct(
            session,
            names.v1_struct,
            version=_module_const(session, names.v1_version_const, v1_version),
            engineId=engine,
        )
        v1_args = (target, v1_struct) if v1_struct is not None else None
        v1, v2, key = names.gpu_instance_v1, names.gpu_instance_v2, "gpu_instance"
    else:
        v1_args = (target,) if engine == ENGINE_GRAPHICS else None
        v1, v2, key = names.device_v1, names.device_v2, ()
    if engine != ENGINE_GRAPHICS:
        key = (key, engine)
    value, newer = newer_then_older(session, gpu, v2, v1, v2_args, v1_args, key)
    return value, "v2" if newer else "v1"


def scheduler_state(
    session: NvmlSession,
    gpu: str,
    target: Any,
    *,
    gpu_instance: bool = False,
    bounds: tuple[int, int] | None = None,
) -> SchedulerParams | None:
    """Scheduler policy and parameters of a GPU (``target`` = device handle) or GPU instance."""
    value, api = _scheduler_info(
        session, gpu, target, "State", STATE_INFO_V1, gpu_instance=gpu_instance
    )
    if value is None:
        return None
    return _params(value, api, bounds)


def _params(value: Any, api: str, bounds: tuple[int, int] | None) -> SchedulerParams:
    policy = int(value.schedulerPolicy)
    if api == "v2":
        avg = int(value.avgFactor)
        return SchedulerParams(
            policy=policy,
            arr_mode=None,
            avg_factor=avg,
            timeslice_ns=int(value.timeslice),
            api="v2",
        )
    arr_mode = int(value.arrMode)
    avg_factor, timeslice = decode_union(arr_mode, value.schedulerParams, bounds)
    return SchedulerParams(
        policy=policy, arr_mode=arr_mode, avg_factor=avg_factor, timeslice_ns=timeslice, api="v1"
    )


# Log entries as laid out in memory (docs/nvml-notes.md §7.2): v1 48 bytes, v2 56 (+ weight).
_ENTRY_V1 = struct.Struct("<QQQI4xQQ")
_ENTRY_V2 = struct.Struct("<QQQI4xQQI4x")


def decode_entries(
    array: Any, count: int, after_ns: int | None = None
) -> tuple[list[LogEntry], tuple[int, int, int] | None]:
    """The first ``count`` entries of a ``logEntries`` array, and the span of all of them.

    A poller reads the 200-entry ring several times a second per GPU; going through pynvml's
    ``_PrintableStructure`` attribute hooks for 1,200 fields each time costs more than the NVML
    call, so a ctypes array is unpacked from its bytes (the layouts are the header's). With
    ``after_ns`` only entries at or after it become objects (the consumer has seen the older
    ones); the span (oldest, newest, count) still covers the whole read.
    """
    if count <= 0:
        return [], None
    if isinstance(array, ctypes.Array) and count <= len(array):
        size = ctypes.sizeof(array._type_)
        layout = {_ENTRY_V1.size: _ENTRY_V1, _ENTRY_V2.size: _ENTRY_V2}.get(size)
        if layout is not None:
            raw = ctypes.string_at(ctypes.addressof(array), size * count)
            rows = list(layout.iter_unpack(raw))
            stamps = [row[0] for row in rows]
            span = (min(stamps), max(stamps), len(rows))
            if after_ns is not None:
                rows = [row for row in rows if row[0] >= after_ns]
            return [LogEntry(*row[:6]) for row in rows], span
    entries = [
        LogEntry(
            timestamp_ns=int(e.timestamp),
            run_total_ns=int(e.timeRunTotal),
            run_ns=int(e.timeRun),
            runlist=int(e.swRunlistId),
            target_slice_ns=int(e.targetTimeSlice),
            preemption_total_ns=int(e.cumulativePreemptionTime),
        )
        for e in (array[i] for i in range(count))
    ]
    stamps = [e.timestamp_ns for e in entries]
    span = (min(stamps), max(stamps), len(entries))
    if after_ns is not None:
        entries = [e for e in entries if e.timestamp_ns >= after_ns]
    return entries, span


def scheduler_log(
    session: NvmlSession,
    gpu: str,
    target: Any,
    *,
    gpu_instance: bool = False,
    bounds: tuple[int, int] | None = None,
    after_ns: int | None = None,
    engine: int = ENGINE_GRAPHICS,
) -> SchedulerLog | None:
    """One read of the scheduler's 200-entry ring for a GPU or GPU instance (of one engine).

    ``after_ns``: decode only entries at or after this timestamp (the rest were consumed).
    """
    value, api = _scheduler_info(
        session, gpu, target, "Log", LOG_INFO_V1, gpu_instance=gpu_instance, engine=engine
    )
    if value is None:
        return None
    count = max(0, min(int(value.entriesCount), RING_ENTRIES))
    entries, span = decode_entries(value.logEntries, count, after_ns)
    entries.sort(key=lambda e: (e.timestamp_ns, e.runlist))
    return SchedulerLog(
        params=_params(value, api, bounds),
        entries=tuple(entries),
        ring_full=count >= RING_ENTRIES,
        span=span,
    )
