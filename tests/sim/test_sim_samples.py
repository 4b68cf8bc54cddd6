"""Sample buffers and per-process utilization follow NVML's lastSeenTimeStamp semantics."""

from __future__ import annotations

import itertools

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create, parse_scenario

SCENARIO = """
gpus:
  - model: h100-sxm-80gb
    load:
      duty: {pattern: steps, steps: [[0s, 0.25], [5s, 0.75]]}
    power: {draw: {pattern: steps, steps: [[0s, 100W], [5s, 300W]]}}
    processes:
      - {pid: 100, name: busy, memory: 1GiB, utilization: {sm: 0.6, memory: 0.05}}
      - {pid: 200, name: idle, memory: 1GiB, utilization: {sm: 0.0}}
      - {pid: 300, name: short, memory: 1GiB, start: 2s, stop: 4s, utilization: {sm: 0.3}}
"""


START = 1_767_225_600.0


@pytest.fixture
def sim() -> SimNvml:
    s = create(parse_scenario(SCENARIO), ManualClock(START))
    s.nvmlInit()
    return s


def us(t: float) -> int:
    """NVML timestamp (µs since the epoch) of scenario time t."""
    return round((START + t) * 1e6)


def test_utilization_ring_cadence_depth_and_order(sim: SimNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)  # nothing sampled yet
    sim.clock.advance(1.0)
    value_type, samples = sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert value_type == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    assert isinstance(samples, list) and all(isinstance(s, pynvml.c_nvmlSample_t) for s in samples)
    stamps = [s.timeStamp for s in samples]
    assert stamps == sorted(stamps) and len(stamps) == 5
    assert [b - a for a, b in itertools.pairwise(stamps)] == [200_000] * 4
    assert {s.sampleValue.uiVal for s in samples} == {25}
    sim.clock.advance(60.0)
    _, samples = sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert len(samples) == 72  # the ring keeps about 14 s
    assert samples[-1].sampleValue.uiVal == 75
    _, power = sim.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    assert len(power) == 120 and power[1].timeStamp - power[0].timeStamp == 20_000
    assert power[-1].sampleValue.uiVal == 300_000


def test_last_seen_timestamp_is_strict(sim: SimNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.clock.advance(4.9)
    _, samples = sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    newest = samples[-1].timeStamp
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, newest)
    sim.clock.advance(0.5)  # t = 5.4: samples at 5.0, 5.2, 5.4 are newer
    _, fresh = sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, newest)
    assert [s.timeStamp - newest for s in fresh] == [200_000, 400_000, 600_000]
    assert [s.sampleValue.uiVal for s in fresh] == [75, 75, 75]
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 2**63)  # future cursor


def test_sample_types_the_h200_lacks(sim: SimNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.clock.advance(1.0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetSamples(h, pynvml.NVML_PROCESSOR_CLK_SAMPLES, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlDeviceGetSamples(h, pynvml.NVML_MODULE_POWER_SAMPLES, 0)


def test_process_utilization_only_for_busy_processes(sim: SimNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.clock.advance(3.0)
    samples = sim.nvmlDeviceGetProcessUtilization(h, 0)
    assert all(isinstance(s, pynvml.c_nvmlProcessUtilizationSample_t) for s in samples)
    by_pid = {s.pid: s for s in samples}
    assert set(by_pid) == {100, 300}  # pid 200 has zero use
    assert (by_pid[100].smUtil, by_pid[100].memUtil, by_pid[300].smUtil) == (60, 5, 30)
    _, util = sim.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
    assert by_pid[100].timeStamp == util[-1].timeStamp  # stamped like the newest GPU sample
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetProcessUtilization(h, by_pid[100].timeStamp)
    info = sim.nvmlDeviceGetProcessesUtilizationInfo(h, 0)
    assert all(isinstance(s, pynvml.c_nvmlProcessUtilizationInfo_v1_t) for s in info)
    assert sorted((s.pid, s.smUtil) for s in info) == [(100, 60), (300, 30)]


def test_exited_process_samples_linger_then_vanish(sim: SimNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(0)
    sim.clock.advance(5.0)  # pid 300 stopped at 4 s; its last sample (3.8 s) is still there
    pids = {s.pid: s for s in sim.nvmlDeviceGetProcessUtilization(h, 0)}
    assert 300 in pids and pids[300].timeStamp == us(3.8)
    assert [p.pid for p in sim.nvmlDeviceGetComputeRunningProcesses(h)] == [100, 200]
    sim.clock.advance(1.0)  # 2 s after the exit
    assert {s.pid for s in sim.nvmlDeviceGetProcessUtilization(h, 0)} == {100}


def test_no_process_ever_busy_is_not_found() -> None:
    sim = create("passthrough-guest", ManualClock())
    sim.nvmlInit()
    sim.clock.advance(2.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.nvmlDeviceGetProcessUtilization(h, 0)


def test_processes_without_their_own_utilization_share_the_gpus() -> None:
    sim = create(
        parse_scenario(
            """
gpus:
  - model: h100-sxm-80gb
    load: {duty: 0.8}
    processes:
      - {pid: 1, memory: 1GiB}
      - {pid: 2, memory: 1GiB}
      - {pid: 3, memory: 1GiB, utilization: {sm: 0.2}}
"""
        ),
        ManualClock(),
    )
    sim.nvmlInit()
    sim.clock.advance(1.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    util = {s.pid: s.smUtil for s in sim.nvmlDeviceGetProcessUtilization(h, 0)}
    assert util == {1: 30, 2: 30, 3: 20}


def test_utilization_family_not_supported_with_mig() -> None:
    sim = create("h100-mig-gpm", ManualClock())
    sim.nvmlInit()
    sim.clock.advance(1.0)
    h = sim.nvmlDeviceGetHandleByIndex(0)
    for sampling in (1, 2, 3, 4):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            sim.nvmlDeviceGetSamples(h, sampling, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.nvmlDeviceGetProcessUtilization(h, 0)
    _, power = sim.nvmlDeviceGetSamples(h, pynvml.NVML_TOTAL_POWER_SAMPLES, 0)
    assert len(power) == 50
