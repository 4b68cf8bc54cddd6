"""GPM (Hopper+): SM, tensor and DRAM activity for the whole GPU and for each MIG GPU instance.

GPM metrics are rates between two counter snapshots (docs/nvml-notes.md §9.2). Each GPU and each GPU
instance keeps two sample buffers, allocated once and kept in the GPU's state: every cycle fills
the older one and computes (previous → current), then the roles swap. Intervals under 0.1 s
silently give zeros on real drivers, so they give no values here; samples in the wrong order give
garbage (NaN, negative), which is rejected per metric. Buffers are freed when the GPU is lost, a
GPU instance disappears, or the sampler closes.

Per-GPU-instance numbers are what MIG users cannot get elsewhere: NVML has no utilization for
MIG devices at all.

One thread at a time in GPM: a process whose GPU workers read GPM at the same moment crashed inside
``nvmlGpmMetricsGet``, while the same process reading its GPUs one after the other ran clean
(docs/validation.md, "GPM from two threads"). So GPM calls take a process-wide lock. A GPU stuck
inside a GPM call must not stall the others' cycles (one hung GPU is isolated, docs/design.md), so
the lock is waited for at most :data:`LOCK_WAIT_SECONDS`; a GPU that does not get it keeps its last
averages this cycle and reads across the longer interval next time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, cadence, ratio
from vgpumon.model import Gpm, MigGpuInstance
from vgpumon.nvml.errors import SUCCESS

# GPM metrics cost 1.3-1.8 ms of driver time per GPU: every 5 s by default, the averages then
# covering the time since the last read.
GPM = cadence("gpm", 5.0)

STATE_KEY = "gpm"
MIN_INTERVAL_SECONDS = 0.1
MIB = 1024 * 1024
# Many times what a GPM read of every GPU of a large host takes (docs/nvml-notes.md §14), and
# short enough that a GPU stuck in GPM cannot hold the others' cycles.
LOCK_WAIT_SECONDS = 0.2
_ONE_READER = threading.Lock()

# NVML_GPM_METRIC_* id -> (Gpm field, converter from NVML's unit)
PERCENT_METRICS = {
    1: "graphics_active",  # GRAPHICS_UTIL
    2: "sm_active",  # SM_UTIL
    3: "sm_occupancy",  # SM_OCCUPANCY
    5: "tensor_active",  # ANY_TENSOR_UTIL
    10: "dram_active",  # DRAM_BW_UTIL
    11: "fp64_active",  # FP64_UTIL
    12: "fp32_active",  # FP32_UTIL
    13: "fp16_active",  # FP16_UTIL
}
MIB_PER_SECOND_METRICS = {
    20: "pcie_tx_bytes_per_second",  # PCIE_TX_PER_SEC
    21: "pcie_rx_bytes_per_second",  # PCIE_RX_PER_SEC
}
METRIC_IDS = tuple(PERCENT_METRICS) + tuple(MIB_PER_SECOND_METRICS)


@dataclass
class _Pair:
    """Two sample buffers and the time the newer valid one was taken."""

    samples: list[Any] | None = None
    newer: int = 0  # index of the buffer holding the last good sample
    taken_at: float | None = None


@dataclass
class GpmState:
    """Per-GPU GPM state; ``close()`` frees every sample buffer (called by the sampler)."""

    module: Any
    supported: bool | None = None
    whole: _Pair = field(default_factory=_Pair)
    instances: dict[int, _Pair] = field(default_factory=dict)

    def free(self, pair: _Pair) -> None:
        free = getattr(self.module, "nvmlGpmSampleFree", None)
        for sample in pair.samples or ():
            if callable(free):
                # After a lost GPU or library the free itself may fail; the buffer is then lost.
                with contextlib.suppress(Exception):
                    free(sample)
        pair.samples = None
        pair.taken_at = None

    def close(self) -> None:
        self.free(self.whole)
        for pair in self.instances.values():
            self.free(pair)
        self.instances.clear()


def _metrics(ctx: GpuContext, older: Any, newer: Any, interval: float, scope: str) -> Gpm | None:
    metrics_type = ctx.module_attr("c_nvmlGpmMetricsGet_t")
    if metrics_type is None:
        return None
    request = metrics_type()
    request.version = int(ctx.module_attr("NVML_GPM_METRICS_GET_VERSION", 1))
    request.numMetrics = len(METRIC_IDS)
    request.sample1 = older
    request.sample2 = newer
    for i, metric_id in enumerate(METRIC_IDS):
        request.metrics[i].metricId = metric_id
    result = ctx.call("nvmlGpmMetricsGet", request, key=scope)
    if result is None:
        return None
    values: dict[str, float | None] = {}
    for i, metric_id in enumerate(METRIC_IDS):
        metric = result.metrics[i]
        value = getattr(metric, "value", None)
        if (
            int(getattr(metric, "nvmlReturn", -1)) != SUCCESS
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            continue
        if metric_id in PERCENT_METRICS:
            values[PERCENT_METRICS[metric_id]] = ratio(value)
        else:
            values[MIB_PER_SECOND_METRICS[metric_id]] = float(value) * MIB
    return Gpm(interval_seconds=interval, **values)


def _sample(
    ctx: GpuContext,
    state: GpmState,
    pair: _Pair,
    get: Callable[[Any], Any],
    scope: str,
) -> Gpm | None:
    if pair.samples is None:
        samples = [ctx.call("nvmlGpmSampleAlloc", key=scope) for _ in range(2)]
        if any(s is None for s in samples):
            pair.samples = [s for s in samples if s is not None]
            state.free(pair)
            return None
        pair.samples = samples
    older_index = 1 - pair.newer
    target = pair.samples[older_index]
    if get(target) is None:
        return None  # keep the last good sample as the baseline
    now = ctx.now
    if pair.taken_at is None:
        pair.newer, pair.taken_at = older_index, now
        ctx.want_interval()
        return None
    interval = now - pair.taken_at
    if interval < MIN_INTERVAL_SECONDS:
        # Too close to the baseline to mean anything: drop this sample, keep the baseline.
        ctx.want_interval()
        return None
    gpm = _metrics(ctx, pair.samples[pair.newer], target, interval, scope)
    pair.newer, pair.taken_at = older_index, now
    return gpm


def read_gpm(ctx: GpuContext, out: GpuBuilder) -> None:
    state = ctx.state.get(STATE_KEY)
    if not isinstance(state, GpmState):
        state = ctx.state[STATE_KEY] = GpmState(ctx.session.module)
    if state.supported is False:
        return
    if state.supported and not ctx.due(GPM):
        _keep_previous(ctx, out)
        return
    if not _ONE_READER.acquire(timeout=LOCK_WAIT_SECONDS):
        _keep_previous(ctx, out)
        return
    try:
        if state.supported is None and (not _supported(ctx, state) or not ctx.due(GPM)):
            return
        _read_now(ctx, state, out)
    finally:
        _ONE_READER.release()


def _supported(ctx: GpuContext, state: GpmState) -> bool:
    """Ask once whether the GPU has GPM; an error other than "absent" asks again next cycle."""
    support = ctx.attempt("nvmlGpmQueryDeviceSupport", ctx.handle)
    if support.value is None:
        if support.status == "absent":
            state.supported = False
        return False
    state.supported = bool(getattr(support.value, "isSupportedDevice", 0))
    return state.supported


def _read_now(ctx: GpuContext, state: GpmState, out: GpuBuilder) -> None:
    h = ctx.handle
    out.set(
        gpm=_sample(ctx, state, state.whole, lambda s: ctx.call("nvmlGpmSampleGet", h, s), "gpu")
    )
    instances: tuple[MigGpuInstance, ...] = out.get("mig_instances") or ()
    live = {gi.id for gi in instances} if out.get("mig_mode_current") else set()
    for gi_id in [g for g in state.instances if g not in live]:
        state.free(state.instances.pop(gi_id))
    if not live:
        return
    updated = []
    for gi in instances:

        def get(sample: Any, gi_id: int = gi.id) -> Any:
            return ctx.call("nvmlGpmMigSampleGet", h, gi_id, sample, key="gi")

        pair = state.instances.setdefault(gi.id, _Pair())
        updated.append(dataclasses.replace(gi, gpm=_sample(ctx, state, pair, get, "gi")))
    out.set(mig_instances=tuple(updated))


def _keep_previous(ctx: GpuContext, out: GpuBuilder) -> None:
    """Between cadenced reads (``SamplerConfig.cadences["gpm"]``) the last averages stand.

    For the GPU and for each GPU instance that still exists (by id); an instance created since
    the last read has no average yet (its first sample is taken at the next read).
    """
    previous = ctx.previous
    if previous is None:
        return
    out.set(gpm=previous.gpm)
    instances: tuple[MigGpuInstance, ...] = out.get("mig_instances") or ()
    if not instances or not out.get("mig_mode_current"):
        return
    last = {gi.id: gi.gpm for gi in previous.mig_instances}
    out.set(
        mig_instances=tuple(
            dataclasses.replace(gi, gpm=last[gi.id]) if gi.id in last else gi for gi in instances
        )
    )


READERS = [FunctionReader("gpm", read_gpm)]
