"""Sample buffers and per-process utilization (docs/nvml-notes.md §4.12, §4.13).

The driver keeps ring buffers: utilization every 200 ms × 72 entries, power every 20 ms × 120.
Samples sit on fixed grids from scenario t = 0, so a ``lastSeenTimeStamp`` cursor behaves as on real
hardware: only samples strictly newer are returned, NOT_FOUND (6) when there is none, and a cursor
older than the ring gets the whole ring. Per-process samples exist only for processes with non-zero
use, one (the latest) per process, and linger 1.5 s after the process exits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider
from vgpumon.sim.state import (
    POWER_DEPTH,
    POWER_PERIOD,
    PROCESS_SAMPLE_LINGER,
    UTIL_DEPTH,
    UTIL_PERIOD,
    GpuState,
    ProcessState,
    percent,
)

NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NOT_FOUND = pynvml.NVML_ERROR_NOT_FOUND
_UTIL_TYPES = {
    pynvml.NVML_GPU_UTILIZATION_SAMPLES: "graphics",
    pynvml.NVML_MEMORY_UTILIZATION_SAMPLES: "dram",
    pynvml.NVML_ENC_UTILIZATION_SAMPLES: "encoder",
    pynvml.NVML_DEC_UTILIZATION_SAMPLES: "decoder",
    pynvml.NVML_JPG_UTILIZATION_SAMPLES: "jpeg",
    pynvml.NVML_OFA_UTILIZATION_SAMPLES: "ofa",
}


def ring(t: float, period: float, depth: int) -> list[float]:
    """Sample times (scenario seconds) held in a ring of ``depth`` filled every ``period``."""
    newest = math.floor(t / period + 1e-9)
    return [k * period for k in range(max(1, newest - depth + 1), newest + 1)]


@register_provider
class SampleApi(Provider):
    @nvml_function()
    def nvmlDeviceGetSamples(
        self, device: Any, sampling_type: int, timeStamp: int
    ) -> tuple[int, list[Any]]:
        ref = self.core.device(device)
        gpu = ref.gpu
        if ref.ci is not None:
            raise nvml_error(NOT_SUPPORTED)
        value: Callable[[float], int]
        if sampling_type == pynvml.NVML_TOTAL_POWER_SAMPLES:
            period, depth = POWER_PERIOD, POWER_DEPTH

            def value(s: float) -> int:
                return round(gpu.power_watts(s) * 1000)

        elif sampling_type in _UTIL_TYPES:
            if gpu.mig_enabled:
                raise nvml_error(NOT_SUPPORTED)
            period, depth = UTIL_PERIOD, UTIL_DEPTH
            attr = _UTIL_TYPES[sampling_type]

            def value(s: float) -> int:
                return percent(getattr(gpu.activity(s), attr))

        elif sampling_type in (pynvml.NVML_PROCESSOR_CLK_SAMPLES, pynvml.NVML_MEMORY_CLK_SAMPLES):
            raise nvml_error(NOT_FOUND)  # real drivers keep no clock samples (nvml-notes §4.13)
        else:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # incl. module power off Grace
        samples = []
        for s in ring(self.core.t(), period, depth):
            stamp = self.core.timestamp_us(s)
            if stamp <= timeStamp:
                continue
            sample = pynvml.c_nvmlSample_t()
            sample.timeStamp = stamp
            sample.sampleValue.uiVal = value(s)
            samples.append(sample)
        if not samples:
            raise nvml_error(NOT_FOUND)
        return (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, samples)

    def process_samples(
        self, handle: Any, timeStamp: int
    ) -> list[tuple[ProcessState, int, dict[str, int]]]:
        """(process, timestamp µs, percentages) for each process with a sample after the cursor."""
        ref = self.core.device(handle)
        gpu: GpuState = ref.gpu
        if ref.ci is not None or gpu.mig_enabled:
            raise nvml_error(NOT_SUPPORTED)
        t = self.core.t()
        newest = gpu.grid(t, UTIL_PERIOD)
        out = []
        for p in gpu.processes:
            stop = p.spec.stop
            if stop is not None and t - stop > PROCESS_SAMPLE_LINGER:
                continue
            s = newest if stop is None or newest < stop else gpu.grid(stop - 1e-6, UTIL_PERIOD)
            if s <= 0 or s < p.spec.start:
                continue
            stamp = self.core.timestamp_us(s)
            if stamp <= timeStamp:
                continue
            util = {k: percent(v) for k, v in gpu.process_utilization(p, s).items()}
            if not any(util.values()):
                continue
            out.append((p, stamp, util))
        if not out:
            raise nvml_error(NOT_FOUND)
        return out

    @nvml_function()
    def nvmlDeviceGetProcessUtilization(self, handle: Any, timeStamp: int) -> list[Any]:
        out = []
        for p, stamp, util in self.process_samples(handle, timeStamp):
            sample = pynvml.c_nvmlProcessUtilizationSample_t()
            sample.pid = p.pid
            sample.timeStamp = stamp
            sample.smUtil, sample.memUtil = util["sm"], util["memory"]
            sample.encUtil, sample.decUtil = util["encoder"], util["decoder"]
            out.append(sample)
        return out

    @nvml_function()
    def nvmlDeviceGetProcessesUtilizationInfo(self, handle: Any, timeStamp: int) -> list[Any]:
        out = []
        for p, stamp, util in self.process_samples(handle, timeStamp):
            info = pynvml.c_nvmlProcessUtilizationInfo_v1_t()
            info.timeStamp = stamp
            info.pid = p.pid
            info.smUtil, info.memUtil = util["sm"], util["memory"]
            info.encUtil, info.decUtil = util["encoder"], util["decoder"]
            out.append(info)
        return out
