"""An NVML stand-in: the simulator's answers at a real GPU's cost per call, spent as ctypes would.

    PYTHONPATH=bench/shim VGPUMON_STANDIN_SCENARIO=bench/scenarios/vgpu-16x48.yaml \\
        vgpumon serve --nvml-module nvml_standin

Why: under ``--sim`` the simulated driver is Python. Each of a 16 GPU x 48 vGPU host's ~5,900
calls per cycle is tens of microseconds of Python holding the interpreter, where
libnvidia-ml holds it for none (pynvml calls it through ctypes, which lets the interpreter go for
the call) and spends its time in the kernel instead. A benchmark on the simulator alone measures
the wrong sampler; this module gives vgpumon's sampler the real shape of its calls:

* each NVML function costs what ``bench/nvml_call_costs.py`` measured on a real GPU, its median
  wall time (``VGPUMON_STANDIN_COSTS``: such a results JSON; default the committed H100 run).
  Functions that run did not time (the vGPU host calls: a pass-through GPU does not support them)
  cost the median of the functions it timed. The cost is spent with the interpreter released,
  busy in a small C function (``spin.c``, built with the host's C compiler), as the driver is busy
  in its ioctl; without a compiler, asleep (:data:`MODE` says which);
* the answers are the simulator's, asked once and then reused :data:`REUSE` times
  (``VGPUMON_STANDIN_REUSE``, default 8) before the simulator is asked again: values keep changing,
  at a slower pace, and the simulator's own Python stays a small part of a cycle. What identifies
  an answer is the function and its arguments, without the timestamps of "samples since" getters;
* functions with effects (initialisation, events, GPM samples and metrics) go to the simulator
  every time, at their measured cost.

Every other name (constants, structures, exception classes) is the simulator's, which are
pynvml's.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from vgpumon import sim  # noqa: E402

DEFAULT_COSTS = ROOT / "bench/results/device-2026-11-26/nvml-call-costs-h100.json"
SCENARIO = os.environ.get("VGPUMON_STANDIN_SCENARIO", str(ROOT / "bench/scenarios/vgpu-16x48.yaml"))
REUSE = int(os.environ.get("VGPUMON_STANDIN_REUSE", "8"))
# Names that have effects or hand out live objects: never answered from the memo.
EFFECTS = ("Init", "Shutdown", "Event", "Gpm", "Alloc", "Free", "Set", "Register", "Clear")
# An integer argument this large is a timestamp (microseconds since 1970), not an identity.
TIMESTAMP_FLOOR = 1 << 40


def _costs() -> tuple[dict[str, float], float]:
    path = Path(os.environ.get("VGPUMON_STANDIN_COSTS") or DEFAULT_COSTS)
    calls = json.loads(path.read_text())["calls"]
    seconds = {name: row["wall_us_median"] / 1e6 for name, row in calls.items()}
    return seconds, statistics.median(seconds.values())


def _spinner() -> tuple[Any, str]:
    """A function spending N nanoseconds with the interpreter released, and how it spends them."""
    source = HERE / "spin.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    built = Path(tempfile.gettempdir()) / f"vgpumon-standin-spin-{digest}.so"
    if not built.exists():
        partial = built.with_suffix(f".{os.getpid()}.tmp")
        try:
            subprocess.run(
                ["cc", "-O2", "-shared", "-fPIC", "-o", str(partial), str(source)],
                check=True,
                capture_output=True,
                timeout=60,
            )
            os.replace(partial, built)
        except (OSError, subprocess.SubprocessError):
            return (lambda ns: time.sleep(ns / 1e9)), "asleep (no C compiler)"
    spin = ctypes.CDLL(str(built)).vgpumon_spin_ns  # CDLL: the interpreter is released
    spin.argtypes = [ctypes.c_long]
    spin.restype = None
    # A measured cost already holds pynvml's own ctypes call: spend only the rest of it.
    times = []
    for _ in range(200):
        began = time.perf_counter_ns()
        spin(0)
        times.append(time.perf_counter_ns() - began)
    overhead = int(statistics.median(times))
    return (lambda ns: spin(max(0, ns - overhead))), f"busy in C ({overhead / 1000:.1f} us a call)"


_simulated = sim.create(SCENARIO)
_spend, MODE = _spinner()
_cost, _default_cost = _costs()


def _key(value: Any) -> Any:
    kind = type(value)
    if kind is int:
        return None if value >= TIMESTAMP_FLOOR else value
    if kind is str or kind is float or value is None or kind is bool:
        return value
    if kind is list or kind is tuple:
        return tuple(map(_key, value))
    # handles and other objects: the same object each cycle (the sampler keeps its handles)
    return id(value)


def _wrap(name: str, function: Any) -> Any:
    nanoseconds = int(_cost.get(name, _default_cost) * 1e9)
    if any(word in name for word in EFFECTS):

        def direct(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            finally:
                _spend(nanoseconds)

        return direct
    memo: dict[Any, list[Any]] = {}

    def reused(*args: Any, **kwargs: Any) -> Any:
        key = tuple(map(_key, args)) if not kwargs else (_key(args), _key(sorted(kwargs.items())))
        entry = memo.get(key)
        if entry is None or entry[2] >= REUSE:
            try:
                entry = [function(*args, **kwargs), None, 0]
            except Exception as exc:  # noqa: BLE001 - an error is an answer too
                entry = [None, exc, 0]
            memo[key] = entry
        entry[2] += 1
        _spend(nanoseconds)
        if entry[1] is not None:
            raise entry[1].with_traceback(None)  # the same error, without last time's frames
        return entry[0]

    return reused


def __getattr__(name: str) -> Any:
    value = getattr(_simulated, name)
    if name.startswith("nvml") and callable(value):
        value = _wrap(name, value)
        globals()[name] = value  # wrapped once
    return value
