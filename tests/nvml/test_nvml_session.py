"""NvmlSession outcomes: what a guarded call came to, and what it cached and counted on the way.

Readers decide between "nothing new", "not supported here" and "failed this time" from
``CallOutcome.status``; these tests pin each status to the error class that produces it, and the
counters and absence cache that go with it, for Python calls and raw C symbols alike.
"""

from __future__ import annotations

import ctypes
import threading
import types
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from vgpumon.nvml.session import SYSTEM, CallOutcome, GpuDown, NvmlSession

GPU = "GPU-session-test"
OTHER = "GPU-session-other"


class Counted:
    """A module function that counts its calls and answers from a script."""

    def __init__(self, answer: Callable[..., Any]) -> None:
        self.answer = answer
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.answer(*args, **kwargs)


def raising(code: int) -> Callable[..., Any]:
    def fn(*_args: Any, **_kwargs: Any) -> Any:
        raise pynvml.NVMLError(code)

    return fn


def session_with(**functions: Any) -> NvmlSession:
    module = types.SimpleNamespace(NVMLError=pynvml.NVMLError, **functions)
    return NvmlSession(module, "test")


def errors(session: NvmlSession) -> dict[tuple[str, str], int]:
    return {(e.function, e.error): e.count for e in session.error_counts()}


# --------------------------------------------------------------------------- Python calls


def test_ok_returns_the_value_and_passes_arguments() -> None:
    fn = Counted(lambda a, b, *, c: (a, b, c))
    session = session_with(nvmlThing=fn)
    got = session.attempt(GPU, "nvmlThing", 1, 2, c=3)
    assert got == CallOutcome((1, 2, 3), "ok", None)
    assert got.ok
    assert session.call(GPU, "nvmlThing", 4, 5, c=6) == (4, 5, 6)
    assert session.error_counts() == ()
    assert session.call_stats()["nvmlThing"].calls == 2


def test_ok_with_a_none_value_is_still_ok() -> None:
    session = session_with(nvmlSetSomething=lambda: None)
    got = session.attempt(GPU, "nvmlSetSomething")
    assert got.status == "ok" and got.value is None


def test_not_supported_is_absent_cached_per_gpu_and_key_and_counted_once() -> None:
    fn = Counted(raising(pynvml.NVML_ERROR_NOT_SUPPORTED))
    session = session_with(nvmlThing=fn)
    first = session.attempt(GPU, "nvmlThing", key="a")
    assert first == CallOutcome(None, "absent", "not_supported")
    assert session.is_absent(GPU, "nvmlThing", "a")
    # Cached: the function is not called again, and the cached outcome keeps the reason.
    assert session.attempt(GPU, "nvmlThing", key="a") == first
    assert session.call(GPU, "nvmlThing", key="a") is None
    assert fn.calls == 1
    assert errors(session) == {("nvmlThing", "not_supported"): 1}
    # Another key and another GPU are asked on their own.
    assert session.attempt(GPU, "nvmlThing", key="b").status == "absent"
    assert session.attempt(OTHER, "nvmlThing", key="a").status == "absent"
    assert fn.calls == 3
    assert errors(session) == {("nvmlThing", "not_supported"): 3}


def test_no_permission_is_absent_with_its_reason() -> None:
    session = session_with(nvmlThing=raising(pynvml.NVML_ERROR_NO_PERMISSION))
    assert session.attempt(GPU, "nvmlThing") == CallOutcome(None, "absent", "no_permission")


def test_reset_gpu_forgets_that_gpus_absences_only() -> None:
    fn = Counted(raising(pynvml.NVML_ERROR_NOT_SUPPORTED))
    session = session_with(nvmlThing=fn)
    session.attempt(GPU, "nvmlThing")
    session.attempt(OTHER, "nvmlThing")
    session.reset_gpu(GPU)
    assert not session.is_absent(GPU, "nvmlThing")
    assert session.is_absent(OTHER, "nvmlThing")
    fn.answer = lambda: 42
    assert session.attempt(GPU, "nvmlThing").value == 42
    assert session.attempt(OTHER, "nvmlThing").status == "absent"


def test_no_data_codes_are_neither_counted_nor_cached() -> None:
    fn = Counted(raising(pynvml.NVML_ERROR_NOT_FOUND))
    session = session_with(nvmlGetSamples=fn)
    got = session.attempt(GPU, "nvmlGetSamples", no_data=(pynvml.NVML_ERROR_NOT_FOUND,))
    assert got == CallOutcome(None, "no_data", "not_found")
    assert session.call(GPU, "nvmlGetSamples", no_data=[pynvml.NVML_ERROR_NOT_FOUND]) is None
    assert fn.calls == 2  # not cached: asked again every time
    assert session.error_counts() == ()
    assert not session.is_absent(GPU, "nvmlGetSamples")


def test_a_code_not_listed_as_no_data_is_a_counted_error() -> None:
    session = session_with(nvmlGetSamples=raising(pynvml.NVML_ERROR_NOT_FOUND))
    got = session.attempt(GPU, "nvmlGetSamples", no_data=(pynvml.NVML_ERROR_NO_DATA,))
    assert got == CallOutcome(None, "error", "not_found")
    assert errors(session) == {("nvmlGetSamples", "not_found"): 1}


def test_success_raised_as_an_error_is_no_data() -> None:
    # pynvml raises NVMLError(SUCCESS) when a sizing call finds no samples (docs/nvml-notes.md
    # §1.6).
    session = session_with(nvmlGetSamples=raising(pynvml.NVML_SUCCESS))
    assert session.attempt(GPU, "nvmlGetSamples").status == "no_data"
    assert session.error_counts() == ()


def test_counted_errors_are_counted_every_time_and_not_cached() -> None:
    fn = Counted(raising(pynvml.NVML_ERROR_TIMEOUT))
    session = session_with(nvmlThing=fn)
    assert session.attempt(GPU, "nvmlThing") == CallOutcome(None, "error", "timeout")
    assert session.call(GPU, "nvmlThing") is None
    assert fn.calls == 2
    assert errors(session) == {("nvmlThing", "timeout"): 2}
    assert not session.is_absent(GPU, "nvmlThing")


def test_python_exceptions_are_counted_errors_by_type() -> None:
    def broken() -> Any:
        raise UnboundLocalError("pynvml bug")

    session = session_with(nvmlThing=broken)
    assert session.attempt(GPU, "nvmlThing") == CallOutcome(
        None, "error", "python_unboundlocalerror"
    )
    assert errors(session) == {("nvmlThing", "python_unboundlocalerror"): 1}


def test_attribute_error_from_a_wrapper_counts_as_absent() -> None:
    def stale_wrapper() -> Any:
        raise AttributeError("no such struct")

    session = session_with(nvmlThing=stale_wrapper)
    got = session.attempt(GPU, "nvmlThing")
    assert got.status == "absent" and got.error == "python_attributeerror"
    assert session.is_absent(GPU, "nvmlThing")


@pytest.mark.parametrize(
    ("code", "error", "library"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, "gpu_is_lost", False),
        (pynvml.NVML_ERROR_UNINITIALIZED, "uninitialized", True),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded", True),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "lib_rm_version_mismatch", True),
    ],
)
def test_lifecycle_errors_raise_gpu_down_and_are_counted(
    code: int, error: str, library: bool
) -> None:
    session = session_with(nvmlThing=raising(code))
    with pytest.raises(GpuDown) as raised:
        session.attempt(GPU, "nvmlThing")
    assert (raised.value.gpu, raised.value.function) == (GPU, "nvmlThing")
    assert raised.value.error == error and raised.value.library is library
    with pytest.raises(GpuDown):
        session.call(GPU, "nvmlThing")
    assert errors(session) == {("nvmlThing", error): 2}
    assert not session.is_absent(GPU, "nvmlThing")


def test_a_lifecycle_code_listed_as_no_data_is_no_data() -> None:
    # DRIVER_NOT_LOADED from a vGPU instance getter means the *guest* driver is not running.
    session = session_with(nvmlThing=raising(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    got = session.attempt(GPU, "nvmlThing", no_data=(pynvml.NVML_ERROR_DRIVER_NOT_LOADED,))
    assert got.status == "no_data"
    assert session.error_counts() == ()


def test_a_missing_function_is_absent_counted_once_and_not_timed() -> None:
    session = session_with()
    got = session.attempt(GPU, "nvmlNotInThisModule")
    assert got == CallOutcome(None, "absent", "function_not_found")
    assert session.call(GPU, "nvmlNotInThisModule") is None
    assert errors(session) == {("nvmlNotInThisModule", "function_not_found"): 1}
    assert "nvmlNotInThisModule" not in session.call_stats()
    assert not session.has("nvmlNotInThisModule")


def test_a_non_callable_attribute_is_a_missing_function() -> None:
    session = session_with(nvmlThing=3)
    assert session.attempt(GPU, "nvmlThing").error == "function_not_found"


def test_concurrent_absences_are_counted_once() -> None:
    barrier = threading.Barrier(8)

    def slow_not_supported() -> Any:
        barrier.wait(timeout=5)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    session = session_with(nvmlThing=slow_not_supported)
    outcomes: list[CallOutcome] = []
    lock = threading.Lock()

    def worker() -> None:
        got = session.attempt(GPU, "nvmlThing")
        with lock:
            outcomes.append(got)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert [o.status for o in outcomes] == ["absent"] * 8
    assert errors(session) == {("nvmlThing", "not_supported"): 1}


# --------------------------------------------------------------------------- raw C symbols


@pytest.fixture
def raw_symbols(monkeypatch: pytest.MonkeyPatch) -> Callable[[dict[str, Any]], NvmlSession]:
    """pynvml with ``_nvmlGetFunctionPointer`` answering from a table (else FUNCTION_NOT_FOUND)."""

    def install(symbols: dict[str, Any]) -> NvmlSession:
        def lookup(name: str) -> Any:
            if name in symbols:
                return symbols[name]
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup, raising=False)
        return NvmlSession(pynvml, "pynvml")

    return install


def test_raw_success_writes_the_out_parameter(raw_symbols: Any) -> None:
    def fb_usage(vgpu: Any, out: Any) -> int:
        out._obj.value = 5 * 2**30
        return pynvml.NVML_SUCCESS

    session = raw_symbols({"nvmlVgpuInstanceGetFbUsage": fb_usage})
    out = ctypes.c_ulonglong(0)
    got = session.attempt_raw(
        GPU, "nvmlVgpuInstanceGetFbUsage", ctypes.c_uint(7), ctypes.byref(out)
    )
    assert got == CallOutcome(True, "ok", None)
    assert out.value == 5 * 2**30
    assert session.call_raw(GPU, "nvmlVgpuInstanceGetFbUsage", 7, ctypes.byref(out)) is True
    assert session.call_stats()["nvmlVgpuInstanceGetFbUsage"].calls == 2


def test_raw_not_found_listed_as_no_data_is_not_counted(raw_symbols: Any) -> None:
    # A vGPU destroyed between listing and reading its framebuffer: nothing to read, no error.
    fn = Counted(lambda *_args: pynvml.NVML_ERROR_NOT_FOUND)
    session = raw_symbols({"nvmlVgpuInstanceGetFbUsage": fn})
    args = (ctypes.c_uint(7), ctypes.byref(ctypes.c_ulonglong(0)))
    got = session.attempt_raw(GPU, "nvmlVgpuInstanceGetFbUsage", *args, no_data=(6,))
    assert got == CallOutcome(None, "no_data", "not_found")
    assert session.call_raw(GPU, "nvmlVgpuInstanceGetFbUsage", *args, no_data=(6,)) is None
    assert fn.calls == 2
    assert session.error_counts() == ()
    # Without no_data the same answer is a counted error.
    assert session.attempt_raw(GPU, "nvmlVgpuInstanceGetFbUsage", *args).status == "error"
    assert errors(session) == {("nvmlVgpuInstanceGetFbUsage", "not_found"): 1}


def test_raw_not_supported_is_absent_and_cached(raw_symbols: Any) -> None:
    fn = Counted(lambda *_args: pynvml.NVML_ERROR_NOT_SUPPORTED)
    session = raw_symbols({"nvmlVgpuInstanceGetAccountingPids": fn})
    got = session.attempt_raw(GPU, "nvmlVgpuInstanceGetAccountingPids", 7)
    assert got == CallOutcome(None, "absent", "not_supported")
    assert session.call_raw(GPU, "nvmlVgpuInstanceGetAccountingPids", 7) is None
    assert fn.calls == 1
    assert errors(session) == {("nvmlVgpuInstanceGetAccountingPids", "not_supported"): 1}


def test_raw_symbol_missing_from_the_library_is_absent(raw_symbols: Any) -> None:
    session = raw_symbols({})
    got = session.attempt_raw(GPU, "nvmlVgpuInstanceGetFbUsage", 7)
    assert got == CallOutcome(None, "absent", "function_not_found")
    assert session.is_absent(GPU, "nvmlVgpuInstanceGetFbUsage")
    assert errors(session) == {("nvmlVgpuInstanceGetFbUsage", "function_not_found"): 1}


def test_raw_lookup_returning_none_is_a_missing_function() -> None:
    # A module without ``_nvmlGetFunctionPointer`` (the simulator) has no raw symbols at all.
    session = session_with()
    assert session.raw_function("nvmlVgpuInstanceGetFbUsage") is None
    got = session.attempt_raw(GPU, "nvmlVgpuInstanceGetFbUsage", 7)
    assert got == CallOutcome(None, "absent", "function_not_found")


def test_raw_lifecycle_error_raises_gpu_down(raw_symbols: Any) -> None:
    session = raw_symbols({"nvmlVgpuInstanceGetFbUsage": lambda *_a: pynvml.NVML_ERROR_GPU_IS_LOST})
    with pytest.raises(GpuDown) as raised:
        session.call_raw(GPU, "nvmlVgpuInstanceGetFbUsage", 7)
    assert raised.value.error == "gpu_is_lost" and not raised.value.library
    assert errors(session) == {("nvmlVgpuInstanceGetFbUsage", "gpu_is_lost"): 1}


def test_system_calls_use_their_own_cache_key() -> None:
    fn = Counted(raising(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND))
    session = session_with(nvmlNewer_v2=fn)
    assert session.attempt(SYSTEM, "nvmlNewer_v2").error == "function_not_found"
    assert session.is_absent(SYSTEM, "nvmlNewer_v2")
    assert not session.is_absent(GPU, "nvmlNewer_v2")
    assert session.attempt(SYSTEM, "nvmlNewer_v2").status == "absent"
    assert fn.calls == 1
