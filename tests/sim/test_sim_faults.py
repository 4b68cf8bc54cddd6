"""Injected faults: lost GPUs, failing re-init, hangs (released by release_hangs), error codes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create, parse_scenario, registry
from vgpumon.sim.registry import Provider, nvml_function


def started(name_or_text: str) -> SimNvml:
    scenario = parse_scenario(name_or_text) if "\n" in name_or_text else name_or_text
    sim = create(scenario, ManualClock())
    sim.nvmlInit()
    return sim


class Call:
    """Run one simulated call in a worker thread, as the sampler does."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: list[Any] = []
        self.thread = threading.Thread(target=lambda: self.result.append(fn()), daemon=True)
        self.thread.start()

    def blocked_for(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return self.thread.is_alive()


def test_gpu_lost_window_and_failing_reinit() -> None:
    sim = started("fault-gpu-lost")
    lost = sim.nvmlDeviceGetHandleByIndex(2)
    assert sim.nvmlDeviceGetPowerUsage(lost) > 0
    sim.clock.advance(10.0)
    for call in (
        lambda: sim.nvmlDeviceGetPowerUsage(lost),
        lambda: sim.nvmlDeviceGetMemoryInfo(lost),
        lambda: sim.nvmlDeviceGetUtilizationRates(lost),
        lambda: sim.nvmlDeviceGetTotalEnergyConsumption(lost),
    ):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert sim.nvmlDeviceGetUUID(lost).startswith("GPU-")  # identity still answers
    assert sim.nvmlDeviceGetIndex(sim.nvmlDeviceGetHandleByIndex(2)) == 2
    assert sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(1)) > 0  # the others work
    sim.nvmlShutdown()
    for _ in range(2):
        with pytest.raises(pynvml.NVMLError_Unknown):
            sim.nvmlInit()
    sim.nvmlInit()
    sim.clock.advance(30.0)  # t = 40: back
    assert sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(2)) > 0


def test_one_gpu_hangs_until_released() -> None:
    sim = started("fault-hang")
    hung = sim.nvmlDeviceGetHandleByIndex(1)
    uuid = sim.nvmlDeviceGetUUID(hung)  # spared by the fault
    call = Call(lambda: sim.nvmlDeviceGetPowerUsage(hung))
    assert call.blocked_for(0.2)
    assert sim.nvmlDeviceGetPowerUsage(sim.nvmlDeviceGetHandleByIndex(0)) > 0  # others answer
    sim.release_hangs()
    assert not call.blocked_for(2.0)
    assert call.result and call.result[0] > 0  # a released call returns its normal result
    assert sim.nvmlDeviceGetUUID(sim.nvmlDeviceGetHandleByUUID(uuid)) == uuid
    assert sim.nvmlDeviceGetPowerUsage(hung) > 0  # disarmed: no longer hangs


def test_everything_hangs_after_two_seconds() -> None:
    sim = started("fault-all-hang-after-start")
    assert sim.nvmlDeviceGetCount() == 2
    sim.clock.advance(2.5)
    calls = [
        Call(sim.nvmlDeviceGetCount),
        Call(lambda: sim.nvmlDeviceGetHandleByIndex(0)),
        Call(sim.nvmlSystemGetDriverVersion),
    ]
    assert all(c.blocked_for(0.1) for c in calls)
    sim.release_hangs()
    assert not any(c.blocked_for(2.0) for c in calls)
    assert calls[0].result == [2]


def test_hang_with_a_duration_ends_by_itself() -> None:
    sim = started(
        """
gpus: [{model: h100-sxm-80gb}]
faults:
  - {kind: hang, function: nvmlDeviceGetTemperature, duration: 200ms}
"""
    )
    h = sim.nvmlDeviceGetHandleByIndex(0)
    began = time.monotonic()
    assert sim.nvmlDeviceGetTemperature(h, 0) > 0
    assert 0.15 <= time.monotonic() - began < 2.0
    began = time.monotonic()
    sim.nvmlDeviceGetTemperature(h, 0)
    assert time.monotonic() - began < 0.1  # the hang is over for good


def test_error_faults_and_unsupported_functions() -> None:
    sim = started("fault-nvml-errors")
    h = [sim.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlDeviceGetTotalEnergyConsumption(h[0])
    assert sim.nvmlDeviceGetTotalEnergyConsumption(h[1]) >= 0
    assert sim.nvmlDeviceGetPowerUsage(h[1]) > 0  # window starts at 5 s
    sim.clock.advance(5.0)
    with pytest.raises(pynvml.NVMLError_Unknown):
        sim.nvmlDeviceGetPowerUsage(h[1])
    with pytest.raises(pynvml.NVMLError_Unknown):
        sim.nvmlDeviceGetComputeRunningProcesses(h[2])
    assert [p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(h[1])] == [7001]
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetFanSpeed(h[3])
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetPcieThroughput(h[3], 0)
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.nvmlGpmSampleGet(h[3], sim.nvmlGpmSampleAlloc())
    sim.clock.advance(10.0)  # t = 15: the power window has closed
    assert sim.nvmlDeviceGetPowerUsage(h[1]) > 0


def test_latency_is_added_in_wall_time() -> None:
    sim = started("latency: {nvmlDeviceGetPowerUsage: 60ms}\ngpus: [{model: l40s}]\n")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    began = time.monotonic()
    sim.nvmlDeviceGetPowerUsage(h)
    assert time.monotonic() - began >= 0.055
    began = time.monotonic()
    sim.nvmlDeviceGetTemperature(h, 0)
    assert time.monotonic() - began < 0.05


class _HostOnlyApi(Provider):
    """Stands in for the vGPU module: a host call whose body answers whenever it is reached."""

    @nvml_function(replaces=True)
    def nvmlDeviceGetActiveVgpus(self, handle: Any) -> list[int]:
        self.core.device(handle)
        return [7]


def test_vgpu_host_calls_answer_not_supported_off_a_vgpu_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "PROVIDERS", [*registry.PROVIDERS, _HostOnlyApi])
    sim = started(
        """
gpus:
  - {model: h200-nvl-141gb, virtualization_mode: passthrough}
  - {model: h200-nvl-141gb, virtualization_mode: host_vgpu}
"""
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetActiveVgpus(sim.nvmlDeviceGetHandleByIndex(0))
    assert sim.nvmlDeviceGetActiveVgpus(sim.nvmlDeviceGetHandleByIndex(1)) == [7]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetActiveVgpus(pynvml.c_nvmlDevice_t())


def test_passthrough_guest_has_no_vgpu_host_answers() -> None:
    sim = started("passthrough-guest")
    h = sim.nvmlDeviceGetHandleByIndex(0)
    for name in sorted(registry.HOST_VGPU_FUNCTIONS):
        fn = getattr(sim, name, None)
        if fn is None:
            continue  # not simulated by this build: absent, as the collector expects
        args: list[Any] = [h] if name != "nvmlGetVgpuDriverCapabilities" else [0]
        if name in ("nvmlVgpuTypeGetMaxInstances",):
            args.append(1)
        elif name in ("nvmlDeviceGetVgpuUtilization", "nvmlDeviceGetVgpuProcessUtilization"):
            args.append(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            fn(*args)
