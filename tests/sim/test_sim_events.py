"""Xid delivery through event sets in the simulator."""

from __future__ import annotations

import ctypes
import time

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create, parse_scenario

SCENARIO = """
gpus:
  - model: h100-sxm-80gb
    xid_events: [{at: 5s, xid: 79}, {at: 1s, xid: 13}]
  - model: h100-sxm-80gb
    mig: {enabled: true, instances: [{profile: 7g.80gb}]}
    xid_events: [{at: 3s, xid: 43, gpu_instance: 1, compute_instance: 0}]
"""


@pytest.fixture
def sim() -> SimNvml:
    s = create(parse_scenario(SCENARIO), ManualClock())
    s.nvmlInit()
    return s


def test_wait_with_nothing_pending_times_out(sim: SimNvml) -> None:
    event_set = sim.nvmlEventSetCreate()
    assert isinstance(event_set, pynvml.c_nvmlEventSet_t)
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait(event_set, 0)  # nothing registered
    sim.nvmlDeviceRegisterEvents(
        sim.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeAll, event_set
    )
    started = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait_v2(event_set, 50)
    assert time.monotonic() - started >= 0.045
    sim.nvmlEventSetFree(event_set)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlEventSetWait(event_set, 0)


def test_xids_arrive_once_in_time_order(sim: SimNvml) -> None:
    event_set = sim.nvmlEventSetCreate()
    for i in range(2):
        h = sim.nvmlDeviceGetHandleByIndex(i)
        assert sim.nvmlDeviceGetSupportedEventTypes(h) == pynvml.nvmlEventTypeAll
        sim.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, event_set)
    sim.clock.advance(10.0)
    got = []
    for _ in range(3):
        data = sim.nvmlEventSetWait(event_set, 0)
        assert isinstance(data, pynvml.c_nvmlEventData_t)
        assert data.eventType == pynvml.nvmlEventTypeXidCriticalError
        got.append(
            (
                sim.nvmlDeviceGetIndex(data.device),
                data.eventData,
                data.gpuInstanceId,
                data.computeInstanceId,
            )
        )
    assert got == [(0, 13, 0xFFFFFFFF, 0xFFFFFFFF), (1, 43, 1, 0), (0, 79, 0xFFFFFFFF, 0xFFFFFFFF)]
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait(event_set, 0)
    other = sim.nvmlEventSetCreate()  # a second set registered now sees none of the past
    sim.nvmlDeviceRegisterEvents(sim.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeAll, other)
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait(other, 0)


def test_events_are_delivered_as_they_fall_due(sim: SimNvml) -> None:
    event_set = sim.nvmlEventSetCreate()
    sim.nvmlDeviceRegisterEvents(
        sim.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlEventTypeAll, event_set
    )
    sim.clock.advance(2.0)
    assert sim.nvmlEventSetWait(event_set, 0).eventData == 13
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlEventSetWait(event_set, 0)
    sim.clock.advance(3.0)
    assert sim.nvmlEventSetWait(event_set, 0).eventData == 79


def test_registration_limits(sim: SimNvml) -> None:
    event_set = sim.nvmlEventSetCreate()
    parent = sim.nvmlDeviceGetHandleByIndex(1)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceRegisterEvents(mig, pynvml.nvmlEventTypeXidCriticalError, event_set)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceRegisterEvents(
            parent, 1 << 40, event_set
        )  # unknown type: 3, set still usable
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceRegisterEvents(parent, pynvml.nvmlEventTypeAll, pynvml.c_nvmlEventSet_t())
    sim.nvmlDeviceRegisterEvents(parent, pynvml.nvmlEventTypeXidCriticalError, event_set)
    sim.clock.advance(4.0)
    data = sim.nvmlEventSetWait(event_set, 0)
    assert (
        ctypes.cast(data.device, ctypes.c_void_p).value
        == ctypes.cast(parent, ctypes.c_void_p).value
    )
