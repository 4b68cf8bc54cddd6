"""GPM two-sample math in the simulator, against the loads in the scenario files."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from vgpumon.sim import ManualClock, SimNvml, create, parse_scenario

GRAPHICS, SM, OCCUPANCY, TENSOR, DRAM = 1, 2, 3, 5, 10


@pytest.fixture
def sim() -> SimNvml:
    s = create("h100-mig-gpm", ManualClock())
    s.nvmlInit()
    return s


def request(sample1: Any, sample2: Any, ids: list[int]) -> Any:
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(ids)
    mg.sample1, mg.sample2 = sample1, sample2
    for i, metric_id in enumerate(ids):
        mg.metrics[i].metricId = metric_id
    return mg


def values(sim: SimNvml, sample1: Any, sample2: Any, ids: list[int]) -> list[float]:
    mg = sim.nvmlGpmMetricsGet(request(sample1, sample2, ids))
    assert all(mg.metrics[i].nvmlReturn == pynvml.NVML_SUCCESS for i in range(len(ids)))
    return [round(mg.metrics[i].value, 6) for i in range(len(ids))]


def measure_gi(sim: SimNvml, gi: int, seconds: float) -> list[float]:
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    a, b = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmMigSampleGet(parent, gi, a)
    sim.clock.advance(seconds)
    assert sim.nvmlGpmMigSampleGet(parent, gi, b) is b
    try:
        return values(sim, a, b, [GRAPHICS, SM, OCCUPANCY, TENSOR, DRAM])
    finally:
        sim.nvmlGpmSampleFree(a)
        sim.nvmlGpmSampleFree(b)


def test_gpu_instances_read_their_loads(sim: SimNvml) -> None:
    assert measure_gi(sim, 1, 1.0) == [100.0, 100.0, 50.0, 80.0, 60.0]
    assert measure_gi(sim, 2, 1.0) == [50.0, 25.0, 6.25, 0.0, 10.0]
    assert measure_gi(sim, 4, 1.0) == [0.0, 0.0, 0.0, 0.0, 0.0]


def test_values_are_averages_over_the_interval(sim: SimNvml) -> None:
    # GPU instance 3 runs a 2 s square wave at 0/100 %: whole periods average 50 %.
    assert measure_gi(sim, 3, 4.0)[:2] == [50.0, 50.0]
    sim.clock.advance(1.0)  # now at t = 5, in the low half of the period
    assert measure_gi(sim, 3, 1.0)[:2] == [0.0, 0.0]


def test_whole_gpu_and_mig_device_samples(sim: SimNvml) -> None:
    plain = sim.nvmlDeviceGetHandleByIndex(1)
    a, b = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(plain, a)
    sim.clock.advance(0.5)
    sim.nvmlGpmSampleGet(plain, b)
    assert values(sim, a, b, [GRAPHICS, SM, OCCUPANCY]) == [75.0, 37.5, 7.5]  # duty × SM fraction
    parent = sim.nvmlDeviceGetHandleByIndex(0)
    mig = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)  # the 2g.20gb instance
    assert sim.nvmlGpmQueryDeviceSupport(mig).isSupportedDevice == 1
    sim.nvmlGpmSampleGet(mig, a)
    sim.clock.advance(0.5)
    sim.nvmlGpmSampleGet(mig, b)
    assert values(sim, a, b, [SM]) == [25.0]
    sim.nvmlGpmSampleGet(parent, a)
    sim.clock.advance(2.0)
    sim.nvmlGpmSampleGet(parent, b)
    # SM-weighted over the GPU instances: 60 SMs at 100 %, 32 at 25 %, 16 at 50 %, 16 idle.
    expected = (60 * 100 + 32 * 25 + 16 * 50) / 132
    assert values(sim, a, b, [SM]) == [pytest.approx(expected, abs=1e-6)]


def test_observed_r580_semantics(sim: SimNvml) -> None:
    h = sim.nvmlDeviceGetHandleByIndex(1)
    a, b = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(h, a)
    sim.clock.advance(0.05)
    sim.nvmlGpmSampleGet(h, b)
    assert values(sim, a, b, [GRAPHICS, SM]) == [0.0, 0.0]  # < 100 ms apart: zeros, success
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlGpmMetricsGet(request(a, a, [SM]))  # same sample twice
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlGpmMetricsGet(request(a, b, []))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlGpmMetricsGet(request(a, b, [SM, 0]))
    bad_version = request(a, b, [SM])
    bad_version.version = 2
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        sim.nvmlGpmMetricsGet(bad_version)
    sim.clock.advance(1.0)
    sim.nvmlGpmSampleGet(h, b)
    mg = sim.nvmlGpmMetricsGet(request(a, b, [SM, 8, 14, 209, 210, 476]))
    results = [
        (
            mg.metrics[i].nvmlReturn,
            mg.metrics[i].metricInfo.shortName,
            mg.metrics[i].metricInfo.longName,
        )
        for i in range(6)
    ]
    assert results == [
        (0, b"smutil", b"SM_UTIL"),
        (0, None, None),  # DMMA: not named by R580
        (0, None, None),  # unused id inside the range
        (0, b"gr7ctxswactivepct", b"GR7_CTXSW_ACTIVE_PCT"),
        (2, None, None),  # at/above the driver's maximum
        (2, None, None),
    ]
    assert mg.metrics[0].metricInfo.unit == b"%"
    swapped = sim.nvmlGpmMetricsGet(request(b, a, [SM]))
    assert swapped.metrics[0].nvmlReturn == 0 and swapped.metrics[0].value < 0  # garbage, as seen


def test_mig_sample_requires_mig_and_gpm_requires_hopper(sim: SimNvml) -> None:
    a = sim.nvmlGpmSampleAlloc()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlGpmMigSampleGet(sim.nvmlDeviceGetHandleByIndex(1), 1, a)  # MIG disabled
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlGpmMigSampleGet(sim.nvmlDeviceGetHandleByIndex(0), 9, a)  # no such GPU instance
    sim.nvmlGpmSampleFree(None)  # freeing NULL succeeds
    sim.nvmlGpmSampleFree(a)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.nvmlGpmSampleGet(sim.nvmlDeviceGetHandleByIndex(1), a)  # freed
    a100 = create("a100-mig-mixed", ManualClock())
    a100.nvmlInit()
    h = a100.nvmlDeviceGetHandleByIndex(1)
    support = a100.nvmlGpmQueryDeviceSupport(h)
    assert isinstance(support, pynvml.c_nvmlGpmSupport_t) and support.isSupportedDevice == 0
    with pytest.raises(pynvml.NVMLError_NotSupported):
        a100.nvmlGpmSampleGet(h, a100.nvmlGpmSampleAlloc())


def test_driver_metric_maximum_is_configurable() -> None:
    sim = create(
        parse_scenario(
            "driver: {gpm_max_metric_id: 98}\ngpus: [{model: h100-sxm-80gb, load: {duty: 1}}]"
        ),
        ManualClock(),
    )
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    a, b = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(h, a)
    sim.clock.advance(1.0)
    sim.nvmlGpmSampleGet(h, b)
    mg = sim.nvmlGpmMetricsGet(request(a, b, [GRAPHICS, 100]))
    assert [mg.metrics[i].nvmlReturn for i in range(2)] == [0, 2]
    assert mg.metrics[0].value == 100.0
