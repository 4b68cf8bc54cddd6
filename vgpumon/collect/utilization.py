"""NVML's classic utilization: kernel-busy time, memory-controller time, encoder, decoder.

The whole family answers NOT_SUPPORTED on a MIG-enabled GPU, parent and MIG handles alike
(docs/nvml-notes.md §4.3), so it is not asked there; GPM gives per-instance activity instead.
"""

from __future__ import annotations

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, ratio
from vgpumon.model import Utilization


def read_utilization(ctx: GpuContext, out: GpuBuilder) -> None:
    if out.get("mig_mode_current"):
        return
    h = ctx.handle
    rates = ctx.call("nvmlDeviceGetUtilizationRates", h)
    encoder = ctx.call("nvmlDeviceGetEncoderUtilization", h)
    decoder = ctx.call("nvmlDeviceGetDecoderUtilization", h)
    out.set(
        utilization=Utilization(
            gpu=ratio(getattr(rates, "gpu", None)) if rates is not None else None,
            memory=ratio(getattr(rates, "memory", None)) if rates is not None else None,
            # [percent, sampling period in µs]
            encoder=ratio(encoder[0]) if encoder else None,
            decoder=ratio(decoder[0]) if decoder else None,
        )
    )


READERS = [FunctionReader("utilization", read_utilization)]
