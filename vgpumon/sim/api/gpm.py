"""GPM (Hopper+): samples and two-sample metrics (docs/nvml-notes.md §9).

A GPM sample records what it measured (GPU, MIG device, or GPU instance) and when. ``MetricsGet``
averages each metric over the interval between its two samples, so a square-wave load reads as its
mean. The observed R580 semantics are kept: < 100 ms apart → every metric SUCCESS with 0.0; the same
sample twice, ``numMetrics`` 0 or a metric id 0 → the whole call fails with 2; ids at or above the
driver's maximum → per-metric 2 with no names; ids inside the range the driver has not named →
SUCCESS, 0.0, names ``None``; samples passed newest-first → SUCCESS with nonsense (negative) values.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.handles import Key
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.scenario_keys import MIB
from vgpumon.sim.state import Activity, GpuState

INVALID = pynvml.NVML_ERROR_INVALID_ARGUMENT
NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
MIN_INTERVAL = 0.1  # NVML wants >= 100 ms between samples; shorter reads as zero
AVERAGE_STEP = 0.05
MAX_POINTS = 200

METRIC_NAMES: dict[int, str] = {
    value: name[len("NVML_GPM_METRIC_") :]
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_GPM_METRIC_")
    and name != "NVML_GPM_METRIC_MAX"
    and isinstance(value, int)
}
UNNAMED_BEFORE_R595 = {pynvml.NVML_GPM_METRIC_DMMA_TENSOR_UTIL}


def _unit(name: str) -> bytes:
    if name.endswith("_PER_SEC"):
        return b"MiB/s"
    if "CYCLES" in name:
        return b"cycles"
    if name.endswith("_REQUESTS"):
        return b"count"
    if name.endswith(("_UTIL", "_OCCUPANCY", "_HIT", "_MISS", "_PCT")):
        return b"%"
    return b"bytes"


# id -> (shortName, longName, unit); bytes objects kept alive here because c_char_p fields point
# into them.
METRIC_INFO: dict[int, tuple[bytes, bytes, bytes]] = {
    i: (name.lower().replace("_", "").encode(), name.encode(), _unit(name))
    for i, name in METRIC_NAMES.items()
}

# id -> value (percent or MiB/s) from an instant's activity; every other named metric reads 0.
METRIC_VALUES: dict[int, Callable[[Activity], float]] = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: lambda a: a.graphics * 100,
    pynvml.NVML_GPM_METRIC_SM_UTIL: lambda a: a.sm * 100,
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: lambda a: a.occupancy * 100,
    pynvml.NVML_GPM_METRIC_INTEGER_UTIL: lambda a: a.integer * 100,
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: lambda a: a.tensor * 100,
    pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: lambda a: a.tensor * 100,
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: lambda a: a.dram * 100,
    pynvml.NVML_GPM_METRIC_FP64_UTIL: lambda a: a.fp64 * 100,
    pynvml.NVML_GPM_METRIC_FP32_UTIL: lambda a: a.fp32 * 100,
    pynvml.NVML_GPM_METRIC_FP16_UTIL: lambda a: a.fp16 * 100,
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: lambda a: a.pcie_tx / MIB,
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: lambda a: a.pcie_rx / MIB,
    pynvml.NVML_GPM_METRIC_NVDEC_0_UTIL: lambda a: a.decoder * 100,
    pynvml.NVML_GPM_METRIC_NVJPG_0_UTIL: lambda a: a.jpeg * 100,
    pynvml.NVML_GPM_METRIC_NVOFA_0_UTIL: lambda a: a.ofa * 100,
    pynvml.NVML_GPM_METRIC_NVENC_0_UTIL: lambda a: a.encoder * 100,
}


@dataclass
class GpmSample:
    target: Key | None = None  # ("gpu", i) | ("mig", i, gi, ci) | ("gi", i, gi)
    t: float = 0.0


def _address(handle: Any) -> int | None:
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return None


def _metrics_gpu(core: Any, arguments: dict[str, Any]) -> int | None:
    """The GPU a metrics request is about (its first sample's), so faults can aim at it."""
    mg = arguments.get("metricsGet")
    api = core.providers_by_type.get(GpmApi)
    if api is None or not isinstance(mg, pynvml.c_nvmlGpmMetricsGet_t):
        return None
    entry = core.handles.lookup(mg.sample1)
    sample = api.samples.get(entry[1][1]) if entry is not None and entry[1][0] == "gpm" else None
    return int(sample.target[1]) if sample is not None and sample.target is not None else None


@register_provider
class GpmApi(Provider):
    def __init__(self, core: Any) -> None:
        super().__init__(core)
        self.samples: dict[int, GpmSample] = {}

    def _sample(self, handle: Any) -> tuple[int, GpmSample]:
        key = self.core.resolve(handle, "gpm")
        sample = self.samples.get(key[1])
        if sample is None:
            raise nvml_error(INVALID)
        return key[1], sample

    def _supported(self, gpu: GpuState) -> None:
        if not gpu.spec.gpm_supported:
            raise nvml_error(NOT_SUPPORTED)

    def activity(self, target: Key, t: float) -> Activity:
        gpu = self.core.gpus[target[1]]
        if target[0] == "gpu":
            return gpu.activity(t)
        gi = gpu.gi_by_id[target[2]]
        if target[0] == "gi":
            return gi.activity(t)
        return next(c for c in gi.cis if c.id == target[3]).activity(t)

    @nvml_function()
    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        ref = self.core.device(device)
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(ref.gpu.spec.gpm_supported)
        return support

    @nvml_function()
    def nvmlGpmQueryIfStreamingEnabled(self, device: Any) -> int:
        self._supported(self.core.device(device).gpu)
        return 0

    @nvml_function()
    def nvmlGpmSampleAlloc(self) -> Any:
        serial = self.core.next_serial()
        self.samples[serial] = GpmSample()
        return self.core.issue(("gpm", serial), pynvml.c_nvmlGpmSample_t)

    @nvml_function()
    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        if gpmSample is None or _address(gpmSample) is None:
            return None  # freeing NULL succeeds
        serial, _ = self._sample(gpmSample)
        del self.samples[serial]
        self.core.handles.retire(gpmSample)
        return None

    @nvml_function()
    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        ref = self.core.device(device)
        self._supported(ref.gpu)
        _, sample = self._sample(gpmSample)
        if ref.ci is None:
            sample.target = ("gpu", ref.gpu.index)
        else:
            sample.target = ("mig", ref.gpu.index, ref.ci.gi.id, ref.ci.id)
        sample.t = self.core.t()
        return gpmSample

    @nvml_function()
    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any:
        gpu = self.core.physical(device, INVALID)
        self._supported(gpu)
        _, sample = self._sample(gpmSample)
        if not gpu.mig_enabled or gpuInstanceId not in gpu.gi_by_id:
            raise nvml_error(INVALID)
        sample.target = ("gi", gpu.index, gpuInstanceId)
        sample.t = self.core.t()
        return gpmSample

    @nvml_function(target=_metrics_gpu)
    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        mg = metricsGet
        if not isinstance(mg, pynvml.c_nvmlGpmMetricsGet_t):
            raise nvml_error(INVALID)
        if mg.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        n = mg.numMetrics
        if n == 0 or n > pynvml.NVML_GPM_METRIC_MAX:
            raise nvml_error(INVALID)
        if _address(mg.sample1) == _address(mg.sample2):
            raise nvml_error(INVALID)
        _, first = self._sample(mg.sample1)
        _, second = self._sample(mg.sample2)
        if first.target is None or first.target != second.target:
            raise nvml_error(INVALID)
        ids = [mg.metrics[i].metricId for i in range(n)]
        if any(i == 0 for i in ids):
            raise nvml_error(INVALID)
        max_id = self.core.scenario.driver.gpm_max_metric_id
        averages = self._averages(first.target, first.t, second.t)
        for i, metric_id in enumerate(ids):
            metric = mg.metrics[i]
            metric.value = 0.0
            metric.metricInfo.shortName = None
            metric.metricInfo.longName = None
            metric.metricInfo.unit = None
            if metric_id >= max_id:
                metric.nvmlReturn = INVALID
                continue
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            named = metric_id in METRIC_INFO and not (
                metric_id in UNNAMED_BEFORE_R595 and max_id <= 210
            )
            if not named:
                continue
            short, long, unit = METRIC_INFO[metric_id]
            metric.metricInfo.shortName = short
            metric.metricInfo.longName = long
            metric.metricInfo.unit = unit
            metric.value = averages.get(metric_id, 0.0)
        return mg

    def _averages(self, target: Key, t1: float, t2: float) -> dict[int, float]:
        """Mean of each modelled metric over [t1, t2]; zero under 100 ms, negated when reversed."""
        span = t2 - t1
        if abs(span) < MIN_INTERVAL:
            return {}
        lo, hi = min(t1, t2), max(t1, t2)
        points = max(1, min(MAX_POINTS, math.ceil((hi - lo) / AVERAGE_STEP)))
        step = (hi - lo) / points
        activities = [self.activity(target, lo + (k + 0.5) * step) for k in range(points)]
        sign = 1.0 if span > 0 else -1.0
        return {
            metric_id: sign * sum(fn(a) for a in activities) / points
            for metric_id, fn in METRIC_VALUES.items()
        }
