"""The pynvml vGPU wrapper traps (docs/nvml-notes.md §11, §12.1), each pinned against real pynvml.

Real pynvml is driven with stub "C functions" installed through ``_nvmlGetFunctionPointer``: the
stubs write what the driver would write into the buffers the wrapper (or vgpumon's raw call)
passes, byte for byte, so each test shows the wrapper's wrong answer next to vgpumon's right one.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from typing import Any

import pynvml
import pytest

from vgpumon.collect.base import GpuContext, SamplerConfig
from vgpumon.collect.licensing import expiry, vgpu_license
from vgpumon.collect.vgpu_raw import (
    decode_union,
    scheduler_log,
    scheduler_state,
    union_uint,
    vgpu_accounting_pids,
    vgpu_fb_usage,
    vm_id,
)
from vgpumon.nvml.session import NvmlSession

GIB = 2**30
GPU = "GPU-stub"


def target(arg: Any) -> Any:
    """The ctypes object behind an argument: ``byref(x)`` carries it in ``_obj``."""
    return getattr(arg, "_obj", arg)


def write_u64(arg: Any, value: int) -> None:
    """What C does with an ``unsigned long long *``: write 8 bytes, whatever the caller allocated.

    ctypes keeps scalars of up to 16 bytes inline in the object, so 8 bytes into a ``c_uint`` stay
    inside its storage, exactly as on a real host with the real library.
    """
    ctypes.memmove(ctypes.addressof(target(arg)), ctypes.byref(ctypes.c_ulonglong(value)), 8)


@pytest.fixture
def stub_c(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[dict[str, Any]], NvmlSession]]:
    """Install stub symbols; anything not stubbed is FUNCTION_NOT_FOUND, as on an older driver."""

    def install(symbols: dict[str, Any]) -> NvmlSession:
        def lookup(name: str) -> Any:
            if name in symbols:
                return symbols[name]
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lookup)
        return NvmlSession(pynvml, "pynvml")

    yield install


def test_fb_usage_wrapper_wraps_at_4gib_raw_call_does_not(stub_c: Any) -> None:
    used = 5 * GIB + 123

    def fb_usage(vgpu: Any, out: Any) -> int:
        write_u64(out, used)
        return 0

    session = stub_c({"nvmlVgpuInstanceGetFbUsage": fb_usage})
    assert pynvml.nvmlVgpuInstanceGetFbUsage(7) == used % 2**32  # the trap: 5 GiB reads as 1 GiB
    assert vgpu_fb_usage(session, GPU, 7) == used


def test_raw_reads_of_a_destroyed_vgpu_are_no_data_not_errors(stub_c: Any) -> None:
    # Destroyed between listing and reading: NOT_FOUND, which is churn, not a failure to count.
    def gone(*_args: Any) -> int:
        return pynvml.NVML_ERROR_NOT_FOUND

    session = stub_c(
        {"nvmlVgpuInstanceGetFbUsage": gone, "nvmlVgpuInstanceGetAccountingPids": gone}
    )
    assert vgpu_fb_usage(session, GPU, 7) is None
    assert vgpu_accounting_pids(session, GPU, 7) is None
    assert session.error_counts() == ()


def _accounting(pids: list[int]) -> Callable[..., int]:
    def get_pids(vgpu: Any, count: Any, buf: Any) -> int:
        n = target(count)
        if buf is None or n.value < len(pids):
            n.value = len(pids)
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE if pids else pynvml.NVML_SUCCESS
        array = target(buf)
        for i, pid in enumerate(pids):
            array[i] = pid
        n.value = len(pids)
        return pynvml.NVML_SUCCESS

    return get_pids


def test_accounting_pids_empty_list_crashes_wrapper_not_vgpumon(stub_c: Any) -> None:
    session = stub_c({"nvmlVgpuInstanceGetAccountingPids": _accounting([])})
    with pytest.raises(UnboundLocalError):
        pynvml.nvmlVgpuInstanceGetAccountingPids(7)
    assert vgpu_accounting_pids(session, GPU, 7) == []
    assert session.error_counts() == ()


def test_accounting_pids_come_back_as_a_list(stub_c: Any) -> None:
    session = stub_c({"nvmlVgpuInstanceGetAccountingPids": _accounting([101, 202, 303])})
    count, array = pynvml.nvmlVgpuInstanceGetAccountingPids(7)  # ctypes objects, not a list
    assert isinstance(count, ctypes.c_uint) and list(array) == [101, 202, 303]
    assert vgpu_accounting_pids(session, GPU, 7) == [101, 202, 303]


def test_vm_id_is_bytes_from_the_wrapper_and_text_in_the_snapshot(stub_c: Any) -> None:
    def get_vm_id(vgpu: Any, buf: Any, size: Any, kind: Any) -> int:
        ctypes.memmove(ctypes.addressof(target(buf)), b"4f2c9e1a-vm\x00", 12)
        target(kind).value = pynvml.NVML_VGPU_VM_ID_UUID
        return 0

    stub_c({"nvmlVgpuInstanceGetVmID": get_vm_id})
    raw = pynvml.nvmlVgpuInstanceGetVmID(7)
    assert raw == (b"4f2c9e1a-vm", 1)  # bytes, although every other vGPU string is str
    assert vm_id(raw) == ("4f2c9e1a-vm", "uuid")


def _state_v1(arr_mode: int, avg: int, timeslice_ns: int) -> Callable[..., int]:
    def get_state(handle: Any, out: Any) -> int:
        st = target(out)
        st.schedulerPolicy = pynvml.NVML_VGPU_SCHEDULER_POLICY_EQUAL_SHARE
        st.arrMode = arr_mode
        if arr_mode == pynvml.NVML_VGPU_SCHEDULER_ARR_ENABLE:
            st.schedulerParams.vgpuSchedDataWithARR.avgFactor = avg
            st.schedulerParams.vgpuSchedDataWithARR.timeslice = timeslice_ns
        else:
            st.schedulerParams.vgpuSchedData.timeslice = timeslice_ns
        return 0

    return get_state


def test_v2_scheduler_call_missing_on_r580_falls_back_to_v1_once(stub_c: Any) -> None:
    arr = pynvml.NVML_VGPU_SCHEDULER_ARR_ENABLE
    session = stub_c({"nvmlDeviceGetVgpuSchedulerState": _state_v1(arr, 33, 2_000_000)})
    st = pynvml.c_nvmlVgpuSchedulerStateInfo_v2_t()
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetVgpuSchedulerState_v2(None, st)
    for _ in range(3):
        params = scheduler_state(session, GPU, None)
        assert params is not None
        assert (params.api, params.avg_factor, params.timeslice_ns) == ("v1", 33, 2_000_000)
    counts = {(e.function, e.error): e.count for e in session.error_counts()}
    assert counts == {("nvmlDeviceGetVgpuSchedulerState_v2", "function_not_found"): 1}


def test_v2_scheduler_call_is_preferred_where_the_driver_has_it(stub_c: Any) -> None:
    def get_state_v2(handle: Any, out: Any) -> int:
        st = target(out)
        assert st.engineId == pynvml.NVML_VGPU_SCHEDULER_ENGINE_TYPE_GRAPHICS
        st.schedulerPolicy = pynvml.NVML_VGPU_SCHEDULER_POLICY_FIXED_SHARE
        st.avgFactor, st.timeslice = 20, 1_500_000
        return 0

    session = stub_c(
        {
            "nvmlDeviceGetVgpuSchedulerState_v2": get_state_v2,
            "nvmlDeviceGetVgpuSchedulerState": _state_v1(1, 0, 9),
        }
    )
    params = scheduler_state(session, GPU, None)
    assert params is not None
    assert (params.api, params.policy, params.timeslice_ns) == ("v2", 3, 1_500_000)


def test_scheduler_union_member_follows_arr_mode(stub_c: Any) -> None:
    arr = pynvml.NVML_VGPU_SCHEDULER_ARR_DISABLE
    stub_c({"nvmlDeviceGetVgpuSchedulerState": _state_v1(arr, 0, 1_000_000)})
    raw = pynvml.nvmlDeviceGetVgpuSchedulerState(None)
    # The ARR member's timeslice sits at offset 4: reading it for a non-ARR state is wrong.
    assert raw.schedulerParams.vgpuSchedDataWithARR.timeslice == 0
    assert raw.schedulerParams.vgpuSchedDataWithARR.avgFactor == 1_000_000
    session = NvmlSession(pynvml, "pynvml")
    params = scheduler_state(session, GPU, None)
    assert params is not None and (params.avg_factor, params.timeslice_ns) == (None, 1_000_000)


def test_scheduler_union_default_mode_is_decoded_by_plausibility(stub_c: Any) -> None:
    arr = pynvml.NVML_VGPU_SCHEDULER_ARR_ENABLE
    stub_c({"nvmlDeviceGetVgpuSchedulerState": _state_v1(arr, 33, 2_000_000)})
    raw = pynvml.nvmlDeviceGetVgpuSchedulerState(None)
    raw.arrMode = pynvml.NVML_VGPU_SCHEDULER_ARR_DEFAULT
    # The ARR member's 2 ms lies within [1 ms, 30 ms]; the plain member would read 33 ns.
    assert decode_union(0, raw.schedulerParams, (1_000_000, 30_000_000)) == (33, 2_000_000)
    assert decode_union(0, raw.schedulerParams, None) == (None, None)


def test_scheduler_log_v1_entries_are_decoded_oldest_first(stub_c: Any) -> None:
    def get_log(handle: Any, out: Any) -> int:
        log = target(out)
        log.schedulerPolicy = pynvml.NVML_VGPU_SCHEDULER_POLICY_BEST_EFFORT
        log.entriesCount = 3
        for i, ts in enumerate((3000, 1000, 2000)):
            e = log.logEntries[i]
            e.timestamp, e.timeRun, e.timeRunTotal, e.swRunlistId = ts, 10, ts * 2, i
        return 0

    session = stub_c({"nvmlDeviceGetVgpuSchedulerLog": get_log})
    got = scheduler_log(session, GPU, None)
    assert got is not None and not got.ring_full
    assert [e.timestamp_ns for e in got.entries] == [1000, 2000, 3000]
    assert [e.runlist for e in got.entries] == [1, 2, 0]


def test_vgpu_utilization_values_are_unions_read_as_uival(stub_c: Any) -> None:
    def util_info(handle: Any, info_arg: Any) -> int:
        info = target(info_arg)
        if not info.vgpuUtilArray:
            info.vgpuInstanceCount = 1
            return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
        s = info.vgpuUtilArray[0]
        s.vgpuInstance, s.timeStamp = 7, 1_000_000
        s.smUtil.uiVal, s.memUtil.uiVal = 42, 17
        info.sampleValType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
        return 0

    stub_c({"nvmlDeviceGetVgpuInstancesUtilizationInfo": util_info})
    (sample,) = pynvml.nvmlDeviceGetVgpuInstancesUtilizationInfo(None, 0)
    assert sample.smUtil.dVal != 42  # the wrong member is reinterpreted bits
    assert (union_uint(sample.smUtil), union_uint(sample.memUtil)) == (42, 17)


def test_license_info_driver_not_loaded_is_no_data_not_a_dead_gpu(stub_c: Any) -> None:
    def license_info(vgpu: Any, out: Any) -> int:
        return pynvml.NVML_ERROR_DRIVER_NOT_LOADED  # the guest driver is not running

    session = stub_c({"nvmlVgpuInstanceGetLicenseInfo_v2": license_info})
    ctx = GpuContext(session, None, 0, GPU, SamplerConfig(), {}, None, 0.0)
    lic = vgpu_license(ctx, 7)  # must not raise GpuDown (DRIVER_NOT_LOADED is a lifecycle code)
    assert lic.licensed is None and lic.state is None
    assert session.error_counts() == ()


def test_license_expiry_constants_are_tuples_in_pynvml() -> None:
    raw = pynvml.c_nvmlVgpuLicenseExpiry_t()
    raw.year, raw.month, raw.day, raw.hour, raw.min, raw.sec = 2026, 3, 1, 12, 0, 0
    raw.status = 2
    # The trap: the struct holds an int, the pynvml constant is a 1-tuple, they never compare equal.
    assert pynvml.NVML_GRID_LICENSE_EXPIRY_VALID == (2,)
    assert raw.status != pynvml.NVML_GRID_LICENSE_EXPIRY_VALID
    assert expiry(raw) == ("valid", 1772366400.0)  # 2026-03-01T12:00:00Z
    raw.status = 4
    assert expiry(raw) == ("permanent", None)
