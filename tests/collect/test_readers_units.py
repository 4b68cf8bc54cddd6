"""Reader edge cases driven by a tiny NVML double: the cases a scenario cannot pin down exactly.

Each test builds a module with just the functions the reader under test calls, so a wrong call,
a missing None check or a bad unit conversion shows up as a precise failure. The simulator-driven
end-to-end checks are in test_snapshot_cmd.py and test_sampler_faults.py.
"""

from __future__ import annotations

import ctypes
import math
import time
import types
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from vgpumon.collect import clocks, gpm, health, memory, processes, temperature
from vgpumon.collect import xid as xid_reader
from vgpumon.collect.base import NEEDS_INTERVAL, GpuBuilder, GpuContext, SamplerConfig
from vgpumon.nvml.session import NvmlSession

UUID = "GPU-00000000-0000-0000-0000-000000000001"


def make_module(**functions: Callable[..., Any]) -> types.SimpleNamespace:
    """A module with pynvml's classes and constants and only the given functions."""
    ns = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError,
        nvmlMemory_v2=pynvml.nvmlMemory_v2,
        c_nvmlGpmMetricsGet_t=pynvml.c_nvmlGpmMetricsGet_t,
        NVML_GPM_METRICS_GET_VERSION=pynvml.NVML_GPM_METRICS_GET_VERSION,
        NVML_FI_DEV_MEMORY_TEMP=pynvml.NVML_FI_DEV_MEMORY_TEMP,
    )
    for name, fn in functions.items():
        setattr(ns, name, fn)
    return ns


def raises(code: int) -> Callable[..., Any]:
    def fn(*_args: Any, **_kwargs: Any) -> Any:
        raise pynvml.NVMLError(code)

    return fn


class Gpu:
    """One GPU's reader context over a module, kept across cycles like the sampler does."""

    def __init__(self, module: Any, now: float = 1_700_000_000.0) -> None:
        self.session = NvmlSession(module, "test")
        self.state: dict[str, Any] = {}
        self.now = now

    def read(self, fn: Callable[[GpuContext, GpuBuilder], None], **preset: Any) -> GpuBuilder:
        self.state.pop(NEEDS_INTERVAL, None)
        ctx = GpuContext(
            session=self.session,
            handle=object(),
            index=0,
            uuid=UUID,
            config=SamplerConfig(),
            state=self.state,
            previous=None,
            now=self.now,
        )
        out = GpuBuilder(0, UUID)
        out.set(**preset)
        fn(ctx, out)
        return out

    def errors(self) -> dict[tuple[str, str], int]:
        return {(e.function, e.error): e.count for e in self.session.error_counts()}


# --------------------------------------------------------------------------- processes


def _proc(pid: int, used: int | None = 1 << 30) -> Any:
    return types.SimpleNamespace(
        pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF
    )


def _util(pid: int, stamp: int, sm: int, mem: int = 0) -> Any:
    sample = pynvml.c_nvmlProcessUtilizationSample_t()
    sample.pid, sample.timeStamp, sample.smUtil, sample.memUtil = pid, stamp, sm, mem
    return sample


def test_process_utilization_cursor_and_average() -> None:
    seen: list[int] = []
    now_us = 1_700_000_000 * 1_000_000
    batches: list[Any] = [
        # first cycle: two samples for pid 10 newer than now-1s, one too old
        [_util(10, now_us - 500_000, 40, 4), _util(10, now_us - 100_000, 60, 6),
         _util(10, now_us - 2_000_000, 100)],
        pynvml.NVMLError(6),  # nothing newer: no busy process
        pynvml.NVMLError(0),  # pynvml's SUCCESS-raised-as-error: the same meaning
        pynvml.NVMLError(6),  # still nothing: the held sample has expired
        pynvml.NVMLError(10),  # a timeout: unknown, not idle
    ]  # fmt: skip

    def util(_h: Any, ts: int) -> Any:
        seen.append(ts)
        batch = batches[len(seen) - 1]
        if isinstance(batch, Exception):
            raise batch
        return batch

    module = make_module(
        nvmlDeviceGetComputeRunningProcesses=lambda h: [_proc(10), _proc(11, None)],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [_proc(10)],
        nvmlDeviceGetProcessUtilization=util,
        nvmlSystemGetProcessName=raises(6),
    )
    gpu = Gpu(module)
    procs = gpu.read(processes.read_processes).get("processes")
    assert seen[0] == now_us - 1_000_000
    assert [p.pid for p in procs] == [10, 11]
    p10, p11 = procs
    assert p10.kind == "compute" and p10.used_memory_bytes == 1 << 30
    assert p10.sm_utilization == pytest.approx(0.5)
    assert p10.memory_utilization == pytest.approx(0.05)
    assert p11.used_memory_bytes is None  # not available stays absent
    assert p11.sm_utilization == 0.0  # listed but no sample: idle, not unknown

    # NVML samples each process about once a second: a cycle that ends between two samples
    # keeps the last one for HOLD_CYCLES cycles instead of flapping to idle.
    for _ in range(processes.HOLD_CYCLES):  # NOT_FOUND, then SUCCESS-as-error
        procs = gpu.read(processes.read_processes).get("processes")
        assert seen[-1] == now_us - 100_000  # the cursor moved to the newest sample seen
        assert [p.sm_utilization for p in procs] == [pytest.approx(0.5), 0.0]
    procs = gpu.read(processes.read_processes).get("processes")
    assert [p.sm_utilization for p in procs] == [0.0, 0.0]

    procs = gpu.read(processes.read_processes).get("processes")
    assert [p.sm_utilization for p in procs] == [None, None]
    assert gpu.errors() == {("nvmlDeviceGetProcessUtilization", "timeout"): 1}


def test_process_utilization_absent_and_mig_skip() -> None:
    calls: list[str] = []

    def util(_h: Any, _ts: int) -> Any:
        calls.append("util")
        raise pynvml.NVMLError(3)

    module = make_module(
        nvmlDeviceGetComputeRunningProcesses=lambda h: [_proc(7)],
        nvmlDeviceGetGraphicsRunningProcesses=raises(3),
        nvmlDeviceGetProcessUtilization=util,
    )
    gpu = Gpu(module)
    for _ in range(3):
        procs = gpu.read(processes.read_processes).get("processes")
        assert procs[0].sm_utilization is None
    assert calls == ["util"]  # not supported: asked once
    gpu2 = Gpu(module)
    gpu2.read(processes.read_processes, mig_mode_current=True)
    assert calls == ["util"]  # never asked on a MIG-enabled GPU


def test_processes_none_when_lists_unreadable() -> None:
    module = make_module(
        nvmlDeviceGetComputeRunningProcesses=raises(4),
        nvmlDeviceGetGraphicsRunningProcesses=raises(4),
    )
    assert Gpu(module).read(processes.read_processes).get("processes") is None


# --------------------------------------------------------------------------- GPM


class GpmDouble:
    def __init__(self) -> None:
        self.allocated: list[Any] = []
        self.freed: list[int] = []
        self.values: dict[int, tuple[int, float]] = {
            1: (0, 80.0), 2: (0, 50.0), 3: (0, 12.5), 5: (0, 150.0), 10: (0, math.nan),
            11: (0, -3.0e16), 12: (3, 99.0), 13: (0, 0.0), 20: (0, 2.0), 21: (0, 0.5),
        }  # fmt: skip
        self.order: list[tuple[int, int]] = []

    def alloc(self) -> Any:
        sample = pynvml.c_nvmlGpmSample_t(pynvml.struct_c_nvmlGpmSample_t())
        self.allocated.append(sample)
        return sample

    def free(self, sample: Any) -> None:
        self.freed.append(ctypes.cast(sample, ctypes.c_void_p).value or 0)

    def get(self, _h: Any, sample: Any) -> Any:
        return sample

    def metrics(self, request: Any) -> Any:
        addr = lambda s: ctypes.cast(s, ctypes.c_void_p).value  # noqa: E731
        self.order.append((addr(request.sample1), addr(request.sample2)))
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.nvmlReturn, metric.value = self.values[metric.metricId]
        return request

    def module(self) -> Any:
        return make_module(
            nvmlGpmQueryDeviceSupport=lambda h: types.SimpleNamespace(isSupportedDevice=1),
            nvmlGpmSampleAlloc=self.alloc,
            nvmlGpmSampleFree=self.free,
            nvmlGpmSampleGet=self.get,
            nvmlGpmMetricsGet=self.metrics,
        )


def test_gpm_two_samples_units_and_rejection() -> None:
    double = GpmDouble()
    gpu = Gpu(double.module())
    assert gpu.read(gpm.read_gpm).get("gpm") is None
    assert gpu.state[NEEDS_INTERVAL] is True  # a one-shot snapshot must take a second cycle
    gpu.now += 0.05
    assert gpu.read(gpm.read_gpm).get("gpm") is None  # under 0.1 s: no values
    gpu.now += 0.95
    result = gpu.read(gpm.read_gpm).get("gpm")
    assert NEEDS_INTERVAL not in gpu.state
    assert result.interval_seconds == pytest.approx(1.0)  # measured from the kept baseline
    assert result.graphics_active == pytest.approx(0.8)
    assert result.sm_active == pytest.approx(0.5)
    assert result.sm_occupancy == pytest.approx(0.125)
    assert result.tensor_active == 1.0  # clamped to a ratio
    assert result.dram_active is None  # NaN rejected
    assert result.fp64_active is None  # negative garbage rejected
    assert result.fp32_active is None  # per-metric error
    assert result.fp16_active == 0.0
    assert result.pcie_tx_bytes_per_second == 2 * 1024 * 1024
    assert result.pcie_rx_bytes_per_second == 512 * 1024
    gpu.now += 1.0
    gpu.read(gpm.read_gpm)
    # Always older -> newer, and the buffers alternate.
    (a1, b1), (a2, b2) = double.order
    assert a1 != b1 and (a2, b2) == (b1, a1)
    assert len(double.allocated) == 2  # allocated once, reused
    gpu.state[gpm.STATE_KEY].close()
    assert len(double.freed) == 2


def test_gpm_unsupported_device_asks_once() -> None:
    asked: list[int] = []

    def support(_h: Any) -> Any:
        asked.append(1)
        return types.SimpleNamespace(isSupportedDevice=0)

    gpu = Gpu(make_module(nvmlGpmQueryDeviceSupport=support))
    for _ in range(3):
        assert gpu.read(gpm.read_gpm).get("gpm") is None
    assert asked == [1]
    assert NEEDS_INTERVAL not in gpu.state


# --------------------------------------------------------------------------- fields, clocks, ...


def _field_entry(ret: int, value_type: int, value: Any) -> Any:
    entry = pynvml.c_nvmlFieldValue_t()
    entry.nvmlReturn, entry.valueType = ret, value_type
    if value_type == 1:
        entry.value.uiVal = value
    return entry


def test_memory_temperature_per_entry_result() -> None:
    asked: list[list[int]] = []
    answers = [[_field_entry(0, 1, 42)], [_field_entry(3, 0, 0)]]

    def fields(_h: Any, ids: list[int]) -> Any:
        asked.append(list(ids))
        return answers[len(asked) - 1]

    module = make_module(nvmlDeviceGetTemperature=lambda h, s: 55, nvmlDeviceGetFieldValues=fields)
    gpu = Gpu(module)
    temps = gpu.read(temperature.read_temperature).get("temperatures")
    assert (temps.gpu_celsius, temps.memory_celsius) == (55.0, 42.0)
    temps = gpu.read(temperature.read_temperature).get("temperatures")
    assert temps.memory_celsius is None
    gpu.read(temperature.read_temperature)
    assert asked == [[82], [82]]  # not supported per entry: not asked again


def test_clock_event_reasons_fall_back_to_throttle_names() -> None:
    module = make_module(
        nvmlDeviceGetCurrentClocksEventReasons=raises(13),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x1 | 0x4 | 0x400,
        nvmlDeviceGetSupportedClocksThrottleReasons=lambda h: 0x1FF,
    )
    events_ = Gpu(module).read(clocks.read_clock_events).get("clock_events")
    assert events_.active == ("idle", "sw_power_cap")  # bit 0x400 has no name in the model
    assert len(events_.supported) == 9


def test_clock_event_reasons_absent_when_active_mask_fails() -> None:
    # A failed active mask must not turn every supported reason into "not active" (0).
    module = make_module(
        nvmlDeviceGetCurrentClocksEventReasons=raises(10),
        nvmlDeviceGetSupportedClocksEventReasons=lambda h: 0x1FF,
    )
    events_ = Gpu(module).read(clocks.read_clock_events).get("clock_events")
    assert events_ is None or (events_.supported == () and events_.active == ())


def test_clocks_are_hertz_and_absent_per_type() -> None:
    def info(_h: Any, clock_type: int) -> int:
        if clock_type == 3:
            raise pynvml.NVMLError(3)
        return [1980, 1980, 3201][clock_type]

    module = make_module(nvmlDeviceGetClockInfo=info, nvmlDeviceGetMaxClockInfo=info)
    out = Gpu(module).read(clocks.read_clocks)
    assert out.get("clocks").sm_hertz == 1980e6
    assert out.get("clocks").memory_hertz == 3201e6
    assert out.get("clocks").video_hertz is None
    assert out.get("max_clocks").graphics_hertz == 1980e6


def test_memory_v2_then_v1_fallback() -> None:
    v1 = types.SimpleNamespace(total=100, used=60, free=40)
    v2 = types.SimpleNamespace(total=100, used=50, free=40, reserved=10)

    def info_v2(_h: Any, version: Any = None) -> Any:
        assert version == pynvml.nvmlMemory_v2
        return v2

    def info_old_driver(_h: Any, version: Any = None) -> Any:
        if version:
            raise pynvml.NVMLError(13)
        return v1

    got = Gpu(make_module(nvmlDeviceGetMemoryInfo=info_v2)).read(memory.read_memory)
    assert got.get("memory").reserved_bytes == 10 and got.get("memory").used_bytes == 50
    gpu = Gpu(make_module(nvmlDeviceGetMemoryInfo=info_old_driver))
    for _ in range(2):
        got = gpu.read(memory.read_memory).get("memory")
        assert (got.total_bytes, got.used_bytes, got.reserved_bytes) == (100, 60, None)
    assert gpu.errors()[("nvmlDeviceGetMemoryInfo", "function_not_found")] == 1


def test_fans() -> None:
    fanless = make_module(nvmlDeviceGetNumFans=lambda h: 0)
    assert Gpu(fanless).read(health.read_fan).get("fan_speed") is None
    two = make_module(
        nvmlDeviceGetNumFans=lambda h: 2, nvmlDeviceGetFanSpeed_v2=lambda h, i: [30, 50][i]
    )
    assert Gpu(two).read(health.read_fan).get("fan_speed") == pytest.approx(0.4)


def test_ecc_counters_only_when_enabled() -> None:
    asked: list[tuple[int, int]] = []

    def total(_h: Any, error_type: int, counter: int) -> int:
        asked.append((error_type, counter))
        return 10 * error_type + counter + 1

    on = make_module(nvmlDeviceGetEccMode=lambda h: [1, 0], nvmlDeviceGetTotalEccErrors=total)
    ecc = Gpu(on).read(health.read_ecc).get("ecc")
    assert (ecc.mode_current, ecc.mode_pending) == (True, False)
    assert (ecc.corrected_volatile, ecc.corrected_aggregate) == (1, 2)
    assert (ecc.uncorrected_volatile, ecc.uncorrected_aggregate) == (11, 12)
    off = make_module(nvmlDeviceGetEccMode=lambda h: [0, 0], nvmlDeviceGetTotalEccErrors=total)
    asked.clear()
    ecc = Gpu(off).read(health.read_ecc).get("ecc")
    assert ecc.corrected_volatile is None and asked == []


# --------------------------------------------------------------------------- Xid watcher


class EventDouble:
    """Event-set functions; ``wait`` returns at once (the case that must not spin)."""

    def __init__(self, events_: list[Any]) -> None:
        self.events = events_
        self.waits = 0
        self.registered: list[int] = []
        self.freed = 0

    def module(self) -> Any:
        return make_module(
            nvmlEventSetCreate=lambda: object(),
            nvmlDeviceRegisterEvents=lambda h, types_, s: self.registered.append(types_),
            nvmlEventSetWait=self.wait,
            nvmlEventSetFree=self.free,
        )

    def wait(self, _set: Any, _timeout_ms: int) -> Any:
        self.waits += 1
        if self.events:
            event = self.events.pop(0)
            if isinstance(event, Exception):
                raise event
            return event
        raise pynvml.NVMLError(10)

    def free(self, _set: Any) -> None:
        self.freed += 1


def _register(watcher: xid_reader.XidWatcher, session: NvmlSession, handle: Any) -> None:
    ctx = GpuContext(
        session=session,
        handle=handle,
        index=0,
        uuid=UUID,
        config=SamplerConfig(),
        state={},
        previous=None,
        now=0.0,
    )
    watcher.register(ctx)


def test_xid_watcher_counts_and_never_spins() -> None:
    handle = pynvml.c_nvmlDevice_t(pynvml.struct_c_nvmlDevice_t())
    xid = lambda n: types.SimpleNamespace(device=handle, eventType=0x8, eventData=n)  # noqa: E731
    double = EventDouble([xid(79), xid(79), xid(48)])
    session = NvmlSession(double.module(), "test")
    watcher = xid_reader.XidWatcher(session, poll_ms=100)
    watcher.gpu_acquired(UUID, handle)
    _register(watcher, session, handle)
    _register(watcher, session, handle)  # registered once per set
    deadline = time.monotonic() + 2.0
    while watcher.counts(UUID) != {79: 2, 48: 1} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert watcher.counts(UUID) == {79: 2, 48: 1}
    waits_before = double.waits
    time.sleep(0.5)
    # The double's wait returns at once; the watcher must still wait one period per poll.
    assert double.waits - waits_before <= 7
    assert double.registered == [0x8]  # Xid only, never the 100 ms clock events
    watcher.close()
    assert double.freed == 1
    assert watcher._thread is not None and not watcher._thread.is_alive()


def test_xid_watcher_lifecycle_error_drops_the_set() -> None:
    handle = pynvml.c_nvmlDevice_t(pynvml.struct_c_nvmlDevice_t())
    double = EventDouble([pynvml.NVMLError(1)])  # the library went away under the wait
    session = NvmlSession(double.module(), "test")
    watcher = xid_reader.XidWatcher(session, poll_ms=50)
    _register(watcher, session, handle)
    time.sleep(0.2)
    assert watcher._set is None  # dropped; the next read registers into a new set
    _register(watcher, session, handle)
    assert watcher._set is not None
    watcher.close()


def test_xid_watcher_without_event_support_is_quiet() -> None:
    double = EventDouble([])
    module = double.module()
    module.nvmlDeviceRegisterEvents = raises(3)
    session = NvmlSession(module, "test")
    watcher = xid_reader.XidWatcher(session, poll_ms=50)
    for _ in range(3):
        _register(watcher, session, object())
    time.sleep(0.2)
    watcher.close()
    assert double.waits == 0  # nothing registered: nothing to wait on
    assert watcher._thread is None
    assert {(e.function, e.error, e.count) for e in session.error_counts()} == {
        ("nvmlDeviceRegisterEvents", "not_supported", 1)
    }
