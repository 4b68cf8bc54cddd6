"""The simulated NVML's library lifecycle and module surface behave like pynvml's."""

from __future__ import annotations

import ctypes
import types

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create


@pytest.fixture
def sim() -> SimNvml:
    return create("baremetal-8xh100", ManualClock())


def test_calls_before_init_raise_uninitialized(sim: SimNvml) -> None:
    with pytest.raises(pynvml.NVMLError_Uninitialized) as exc:
        sim.nvmlDeviceGetCount()
    assert exc.value.value == pynvml.NVML_ERROR_UNINITIALIZED
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlErrorString(3)  # the library is not even loaded yet


def test_init_is_refcounted_and_extra_shutdown_raises(sim: SimNvml) -> None:
    sim.nvmlInit()
    sim.nvmlInitWithFlags(0)
    sim.nvmlShutdown()
    assert sim.nvmlDeviceGetCount() == 8  # one reference left
    sim.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlDeviceGetCount()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlShutdown()
    assert sim.nvmlErrorString(15) == "GPU is lost"  # the library stays loaded after shutdown


def test_handles_go_stale_after_reinit(sim: SimNvml) -> None:
    sim.nvmlInit()
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    sim.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.nvmlDeviceGetName(handle)
    sim.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetName(handle)
    fresh = sim.nvmlDeviceGetHandleByIndex(0)
    assert sim.nvmlDeviceGetName(fresh) == "NVIDIA H100 80GB HBM3"


def test_handles_survive_while_a_reference_remains(sim: SimNvml) -> None:
    sim.nvmlInit()
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    sim.nvmlInit()
    sim.nvmlShutdown()
    assert sim.nvmlDeviceGetIndex(handle) == 1


def test_errors_are_pynvml_classes(sim: SimNvml) -> None:
    sim.nvmlInit()
    with pytest.raises(pynvml.NVMLError) as exc:
        sim.nvmlDeviceGetHandleByIndex(8)
    assert type(exc.value) is pynvml.NVMLError_InvalidArgument
    assert exc.value.value == 2
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetHandleByUUID("GPU-nope")
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetHandleByPciBusId("0000:99:00.0")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetHandleByPciBusId("garbage")
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetName(None)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetName(pynvml.c_nvmlDevice_t())


def test_handles_are_ctypes_pointers_that_resolve_by_identity(sim: SimNvml) -> None:
    sim.nvmlInit()
    a = sim.nvmlDeviceGetHandleByIndex(2)
    b = sim.nvmlDeviceGetHandleByIndex(2)
    assert isinstance(a, pynvml.c_nvmlDevice_t) and bool(a)
    assert ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value
    uuid = sim.nvmlDeviceGetUUID(a)
    by_uuid = sim.nvmlDeviceGetHandleByUUID(uuid.encode())  # bytes are accepted like pynvml's
    by_bus = sim.nvmlDeviceGetHandleByPciBusId("0000:3a:00.0")
    assert sim.nvmlDeviceGetIndex(by_uuid) == sim.nvmlDeviceGetIndex(by_bus) == 2


def test_module_surface(sim: SimNvml) -> None:
    assert isinstance(sim, types.ModuleType)
    assert sim.__name__ == "vgpumon.sim:baremetal-8xh100"
    assert sim.scenario.name == "baremetal-8xh100"
    assert isinstance(sim.clock, ManualClock)
    # non-function attributes of pynvml fall through to pynvml itself
    assert sim.NVML_ERROR_GPU_IS_LOST == 15
    assert sim.c_nvmlMemory_t is pynvml.c_nvmlMemory_t
    assert sim.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    assert sim.nvmlFriendlyObject is pynvml.nvmlFriendlyObject
    assert sim.nvmlMemory_v2 == pynvml.nvmlMemory_v2
    # pynvml functions the simulator does not implement are absent
    assert not hasattr(sim, "nvmlUnitGetCount")
    assert not hasattr(sim, "nvmlDeviceSetPersistenceMode")
    assert not hasattr(sim, "_nvmlGetFunctionPointer")
    with pytest.raises(AttributeError):
        sim.nvmlDoesNotExist  # noqa: B018
    assert "nvmlDeviceGetName" in dir(sim) and "NVML_SUCCESS" in dir(sim)


def test_driver_queries(sim: SimNvml) -> None:
    sim.nvmlInit()
    assert sim.nvmlSystemGetDriverVersion() == "580.159.04"
    assert sim.nvmlSystemGetNVMLVersion() == "13.580.159.04"
    assert sim.nvmlSystemGetCudaDriverVersion() == 13000
    assert sim.nvmlSystemGetCudaDriverVersion_v2() == 13000
    branch = sim.nvmlSystemGetDriverBranch()
    assert isinstance(branch, pynvml.c_nvmlSystemDriverBranchInfo_v1_t)
    assert branch.branch == "r582_49"
    assert sim.nvmlSystemGetProcessName(4103) == "python3"
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlSystemGetProcessName(1)
    assert sim.nvmlErrorString(999) == "Unknown Error"
