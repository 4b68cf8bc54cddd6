"""Guarded NVML calls: the only way readers touch the NVML module.

Every call goes through :meth:`NvmlSession.call`, which

* resolves the function on the injected module (pynvml, the simulator, or any compatible module);
  a module that lacks it costs exactly the values that function gives (design rule 6);
* times the call, per function, for the self-metrics and ``bench/``;
* classifies failures (:mod:`vgpumon.nvml.errors`): absent values are cached per GPU and call so
  that an unsupported call is paid for once, lifecycle errors abort the GPU's read with
  :class:`GpuDown`, and the rest are counted by function and error name.

Readers run in worker threads, several GPUs at once, so all shared state here is under one lock.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from vgpumon.model import NvmlErrorCount
from vgpumon.nvml.errors import LIBRARY_CODES, ErrorClass, classify, error_code, error_name


class GpuDown(Exception):
    """A lifecycle error: this GPU (or, with ``library=True``, all of NVML) must be re-acquired."""

    def __init__(self, gpu: str, function: str, error: str, *, library: bool) -> None:
        super().__init__(f"{function} on {gpu or 'NVML'}: {error}")
        self.gpu = gpu
        self.function = function
        self.error = error
        self.library = library


@dataclass
class CallStats:
    calls: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0


SYSTEM = ""  # the gpu key for calls that are not about one GPU


class NvmlSession:
    """One NVML module plus the bookkeeping that keeps reading it honest."""

    def __init__(self, module: Any, source: str) -> None:
        self.module = module
        self.source = source
        self._lock = threading.Lock()
        self._absent: set[tuple[str, str, Hashable]] = set()
        self._errors: dict[tuple[str, str], int] = {}
        self._stats: dict[str, CallStats] = {}

    # ------------------------------------------------------------------ lifecycle

    def init(self) -> None:
        """nvmlInit; raises the module's exception unchanged (the caller decides on backoff)."""
        self.module.nvmlInit()

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.module.nvmlShutdown()

    def reset_gpu(self, gpu: str) -> None:
        """Forget cached absences for a GPU that was re-acquired (its support may differ now)."""
        with self._lock:
            self._absent = {k for k in self._absent if k[0] != gpu}

    # ------------------------------------------------------------------ calls

    def has(self, function: str) -> bool:
        return callable(getattr(self.module, function, None))

    def is_absent(self, gpu: str, function: str, key: Hashable = ()) -> bool:
        with self._lock:
            return (gpu, function, key) in self._absent

    def call(
        self,
        gpu: str,
        function: str,
        *args: Any,
        key: Hashable = (),
        no_data: Iterable[int] = (),
        **kwargs: Any,
    ) -> Any:
        """Call ``module.<function>(*args)``; return its value or None when there is none.

        ``gpu`` is the GPU's UUID (or :data:`SYSTEM`); ``key`` distinguishes calls of the same
        function whose support differs by argument (clock type, sensor, cap id). ``no_data`` lists
        return codes that are a normal "nothing new" answer for this call (e.g. NOT_FOUND from the
        sample APIs): they return None without being counted or cached.
        """
        cache_key = (gpu, function, key)
        with self._lock:
            if cache_key in self._absent:
                return None
        fn: Callable[..., Any] | None = getattr(self.module, function, None)
        if not callable(fn):
            self._mark_absent(cache_key, function, "function_not_found")
            return None
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            return self._failed(exc, cache_key, set(no_data))
        finally:
            self._time(function, time.perf_counter() - start)

    def raw_function(self, symbol: str) -> Any:
        """A C function pointer from the loaded library, for calls pynvml wraps wrongly.

        Only real pynvml has ``_nvmlGetFunctionPointer``; for other modules this returns None and
        the caller uses the module's Python function (the simulator returns true values there).
        """
        getter = getattr(self.module, "_nvmlGetFunctionPointer", None)
        if getter is None:
            return None
        return getter(symbol)

    def call_raw(
        self,
        gpu: str,
        symbol: str,
        *args: Any,
        key: Hashable = (),
    ) -> bool | None:
        """Call a raw C symbol with ctypes arguments; True on success, None when absent/failed.

        Errors are classified exactly like :meth:`call`.
        """
        cache_key = (gpu, symbol, key)
        with self._lock:
            if cache_key in self._absent:
                return None
        start = time.perf_counter()
        try:
            fn = self.raw_function(symbol)
            if fn is None:
                self._mark_absent(cache_key, symbol, "function_not_found")
                return None
            ret = fn(*args)
            if ret != 0:
                raise self.module.NVMLError(ret)
            return True
        except Exception as exc:  # noqa: BLE001
            self._failed(exc, cache_key, set())
            return None
        finally:
            self._time(symbol, time.perf_counter() - start)

    # ------------------------------------------------------------------ bookkeeping

    def _failed(
        self, exc: Exception, cache_key: tuple[str, str, Hashable], no_data: set[int]
    ) -> None:
        gpu, function, _key = cache_key
        code = error_code(exc)
        if code == 0 or (code is not None and code in no_data):
            # code 0: pynvml raises NVMLError(SUCCESS) when a sizing call finds no samples.
            return None
        name = error_name(exc)
        kind = classify(exc)
        if kind is ErrorClass.ABSENT:
            self._mark_absent(cache_key, function, name)
            return None
        self._count(function, name)
        if kind is ErrorClass.LIFECYCLE:
            raise GpuDown(gpu, function, name, library=code in LIBRARY_CODES) from exc
        return None

    def _mark_absent(self, cache_key: tuple[str, str, Hashable], function: str, name: str) -> None:
        with self._lock:
            if cache_key in self._absent:
                return
            self._absent.add(cache_key)
        self._count(function, name)

    def _count(self, function: str, name: str) -> None:
        with self._lock:
            self._errors[(function, name)] = self._errors.get((function, name), 0) + 1

    def _time(self, function: str, seconds: float) -> None:
        with self._lock:
            st = self._stats.setdefault(function, CallStats())
            st.calls += 1
            st.seconds += seconds
            st.max_seconds = max(st.max_seconds, seconds)

    def error_counts(self) -> tuple[NvmlErrorCount, ...]:
        with self._lock:
            items = sorted(self._errors.items())
        return tuple(NvmlErrorCount(function=f, error=e, count=n) for (f, e), n in items)

    def call_stats(self) -> dict[str, CallStats]:
        with self._lock:
            return {k: CallStats(v.calls, v.seconds, v.max_seconds) for k, v in self._stats.items()}


def c_ulonglong_out() -> ctypes.c_ulonglong:
    """An out-parameter for raw calls returning 64-bit values."""
    return ctypes.c_ulonglong(0)
