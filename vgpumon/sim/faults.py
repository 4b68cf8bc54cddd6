"""Injected failures: error codes, hanging calls, lost GPUs and failing re-initialisation.

These are what the exporter's robustness rules are tested against (classify every error, sample
GPUs concurrently under a deadline, re-init with backoff), so they act at the one choke point every
simulated call passes through (:meth:`FaultEngine.before_call`), before any function body runs.

Hangs block on a :class:`threading.Event` in wall time: a hung call returns when the hang's
``duration`` has elapsed since the first call it caught, or when a test calls ``release_hangs()``,
which also disarms every hang fault so worker threads drain and stay free.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pynvml
import yaml

from vgpumon.sim.schema import (
    TOP_LEVEL,
    Ctx,
    Enum,
    Int,
    Key,
    Map,
    Seq,
    Str,
    Unit,
    join,
)


def _error_codes() -> dict[str, int]:
    codes = {
        name[len("NVML_ERROR_") :].lower(): value
        for name, value in vars(pynvml).items()
        if name.startswith("NVML_ERROR_") and isinstance(value, int)
    }
    codes["success"] = 0
    return codes


ERROR_CODES: dict[str, int] = _error_codes()

# Identity the driver keeps after a GPU falls off the bus: a lost GPU still has a handle, a UUID and
# a bus id (nvidia-smi prints "GPU 00000000:3B:00.0: GPU is lost"), so a collector can say *which*
# GPU is down.
LOST_GPU_STILL_ANSWERS = frozenset(
    {
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetHandleByPciBusId",
        "nvmlDeviceGetHandleBySerial",
        "nvmlDeviceGetIndex",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMinorNumber",
    }
)

FAULT_KINDS = ("error", "hang", "gpu_lost", "init_failure")

# kind -> keys it requires, keys it accepts (besides "kind")
_KIND_KEYS: dict[str, tuple[set[str], set[str]]] = {
    "error": ({"function", "code"}, {"function", "except", "code", "gpus", "from", "until"}),
    "hang": ({"function"}, {"function", "except", "gpus", "from", "until", "duration"}),
    "gpu_lost": ({"gpus"}, {"gpus", "except", "from", "until"}),
    "init_failure": ({"count", "code"}, {"count", "code", "from"}),
}


@dataclass(frozen=True)
class FaultSpec:
    kind: str  # error | hang | gpu_lost | init_failure
    path: str
    functions: frozenset[str] | None = None  # None: every function ("*")
    excluded: frozenset[str] = frozenset()
    gpus: frozenset[int] | None = None  # None: every GPU and the GPU-less calls
    start: float = 0.0
    end: float | None = None
    code: int = 0
    duration: float | None = None  # hang length in wall seconds; None: until released
    count: int = 0

    def active(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)

    def covers(self, name: str, gpu: int | None) -> bool:
        if name in self.excluded:
            return False
        if self.functions is not None and name not in self.functions:
            return False
        if self.gpus is not None:
            return gpu is not None and gpu in self.gpus
        return True


class _Code(Enum):
    """An NVML error by name ("timeout", "gpu_is_lost") or by number."""

    def __init__(self) -> None:
        super().__init__(
            {k: v for k, v in ERROR_CODES.items() if k != "success"}, allow_values=True
        )
        self.expected = 'an NVML error name like "timeout" or "unknown", or its number'


def _check_fault(d: dict[str, Any], node: yaml.Node, path: str, ctx: Ctx) -> None:
    kind = d["kind"]
    required, allowed = _KIND_KEYS[kind]
    for key in d:
        if key != "kind" and key not in allowed:
            raise ctx.error_at(join(path, key), f"not used by a {kind!r} fault")
    for key in sorted(required):
        if key not in d:
            raise ctx.error(node, join(path, key), f"a {kind!r} fault needs this key")
    if "until" in d and d["until"] <= d.get("from", 0.0):
        raise ctx.error_at(join(path, "until"), "must be later than 'from'")


FAULT = Map(
    {
        "kind": Key(
            Enum({k: k for k in FAULT_KINDS}),
            "error, hang, gpu_lost or init_failure",
            required=True,
        ),
        "function": Key(
            Seq(Str('a pynvml function name or "*"'), min_len=1, one_or_many=True),
            'function name(s) the fault applies to; "*" is every function',
        ),
        "except": Key(Seq(Str(), one_or_many=True), "function names the fault spares"),
        "code": Key(
            _Code(), "NVML error to raise (error: every matching call; init_failure: nvmlInit)"
        ),
        "gpus": Key(
            Seq(Int(lo=0), min_len=1, one_or_many=True),
            "GPU indexes; omitted: every GPU and GPU-less calls",
        ),
        "from": Key(Unit("duration", lo=0), "scenario time the fault starts", "0s"),
        "until": Key(Unit("duration", lo=0), "scenario time it ends (exclusive)", "never"),
        "duration": Key(
            Unit("duration", lo=0),
            "hang: wall time a hang lasts from the first call it catches",
            "until released",
        ),
        "count": Key(Int(lo=1), "init_failure: how many nvmlInit calls fail"),
    },
    expected="a fault mapping",
    check=_check_fault,
)

TOP_LEVEL.register(
    "faults",
    Key(Seq(FAULT), "injected failures, see below", "none"),
)


def build_faults(raw: list[dict[str, Any]], gpu_count: int, ctx: Ctx) -> list[FaultSpec]:
    from vgpumon.sim.registry import is_pynvml_function

    out = []
    for i, d in enumerate(raw):
        path = f"faults[{i}]"
        functions: frozenset[str] | None = None
        names = d.get("function", ["*"])
        for j, name in enumerate(names + d.get("except", [])):
            if name != "*" and not is_pynvml_function(name):
                sub = "function" if j < len(names) else "except"
                raise ctx.error_at(join(path, sub), f"{name!r} is not a pynvml function")
        if "*" not in names:
            functions = frozenset(names)
        gpus = d.get("gpus")
        if gpus is not None:
            for g in gpus:
                if g >= gpu_count:
                    raise ctx.error_at(
                        join(path, "gpus"),
                        f"GPU index {g} does not exist (the scenario has {gpu_count})",
                    )
        excluded = frozenset(d.get("except", []))
        if d["kind"] == "gpu_lost":
            excluded = excluded | LOST_GPU_STILL_ANSWERS
        out.append(
            FaultSpec(
                kind=d["kind"],
                path=path,
                functions=functions,
                excluded=excluded,
                gpus=frozenset(gpus) if gpus is not None else None,
                start=d.get("from", 0.0),
                end=d.get("until"),
                code=int(d.get("code", 0)),
                duration=d.get("duration"),
                count=int(d.get("count", 0)),
            )
        )
    return out


class FaultEngine:
    """Decides, per call, whether to hang, report a lost GPU, or fail with an injected code."""

    def __init__(self, faults: list[FaultSpec]) -> None:
        self.faults = faults
        self._released = threading.Event()
        self._lock = threading.Lock()
        self._hang_started: dict[
            int, float
        ] = {}  # fault index -> monotonic time of the first catch
        self._init_failures_left = {
            i: f.count for i, f in enumerate(faults) if f.kind == "init_failure"
        }

    def before_call(self, name: str, gpu: int | None, t: float) -> None:
        for i, f in enumerate(self.faults):
            if f.kind == "hang" and f.active(t) and f.covers(name, gpu):
                self._hang(i, f)
        for f in self.faults:
            if f.kind == "gpu_lost" and f.active(t) and f.covers(name, gpu):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        for f in self.faults:
            if f.kind == "error" and f.active(t) and f.covers(name, gpu):
                raise pynvml.NVMLError(f.code)

    def gpu_lost(self, gpu: int, t: float) -> bool:
        return any(
            f.kind == "gpu_lost" and f.active(t) and f.gpus is not None and gpu in f.gpus
            for f in self.faults
        )

    def take_init_failure(self, t: float) -> int | None:
        """The error the next nvmlInit must fail with, if an init_failure fault has one left."""
        with self._lock:
            for i, f in enumerate(self.faults):
                if (
                    f.kind == "init_failure"
                    and f.start <= t
                    and self._init_failures_left.get(i, 0) > 0
                ):
                    self._init_failures_left[i] -= 1
                    return f.code
        return None

    def _hang(self, index: int, fault: FaultSpec) -> None:
        if self._released.is_set():
            return
        timeout: float | None = None
        if fault.duration is not None:
            with self._lock:
                started = self._hang_started.setdefault(index, time.monotonic())
            timeout = started + fault.duration - time.monotonic()
            if timeout <= 0:
                return
        self._released.wait(timeout)

    def release(self) -> None:
        self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()
