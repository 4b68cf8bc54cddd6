"""The GPU's interconnects: PCIe link state, replay errors and (opt-in) throughput; NVLink.

NVLink per link is read here too (:mod:`vgpumon.collect.nvlink`), so the ``pcie`` collector
covers both links a GPU talks over.

``nvmlDeviceGetPcieThroughput`` samples a window inside the call (it blocks for the window, per
direction: docs/nvml-notes.md §14); it only runs with ``SamplerConfig.pcie_throughput``, and then at
its own cadence (``SamplerConfig.cadences["pcie_throughput"]``; the last value stands between).
Link generation and width are dynamic (they drop with power saving). The replay counter is a
field value at its own cadence (``SamplerConfig.cadences["pcie_replay"]``): that one field costs
many times what an ECC counter of the same batch costs (docs/nvml-notes.md §14), so it is asked
on its own when due rather than in every cycle's batch.
"""

from __future__ import annotations

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, cadence, nvml_int
from vgpumon.collect.field_values import read_fields
from vgpumon.collect.nvlink import read_nvlink
from vgpumon.model import Pcie

# PCIe throughput blocks for its sampling window, the replay counter's field costs 0.15 ms: each
# read every 10 s by default.
PCIE_THROUGHPUT = cadence("pcie_throughput", 10.0)
PCIE_REPLAY = cadence("pcie_replay", 10.0)

PCIE_UTIL_TX_BYTES, PCIE_UTIL_RX_BYTES = 0, 1
FI_DEV_PCIE_REPLAY_COUNTER = 94
KIB = 1024  # the throughput counters are in KB/s, NVML's KB being 1024 bytes


def _throughput(ctx: GpuContext, counter: int) -> float | None:
    # TX and RX share support: one not-supported answer covers both (no per-counter key).
    value = nvml_int(ctx.call("nvmlDeviceGetPcieThroughput", ctx.handle, counter))
    return float(value * KIB) if value is not None else None


def read_pcie(ctx: GpuContext, out: GpuBuilder) -> None:
    h = ctx.handle
    tx = rx = None
    if ctx.config.pcie_throughput:
        if ctx.due(PCIE_THROUGHPUT):
            tx = _throughput(ctx, PCIE_UTIL_TX_BYTES)
            rx = _throughput(ctx, PCIE_UTIL_RX_BYTES)
        elif ctx.previous is not None:
            tx = ctx.previous.pcie.tx_bytes_per_second
            rx = ctx.previous.pcie.rx_bytes_per_second
    if ctx.due(PCIE_REPLAY):
        # Read every cycle (no cadence), it rides in the cycle's batch; else it is asked alone.
        every_cycle = ctx.cadence(PCIE_REPLAY) <= 0
        got = read_fields(ctx, [FI_DEV_PCIE_REPLAY_COUNTER], every_cycle=every_cycle)
        replay = nvml_int(got.get(FI_DEV_PCIE_REPLAY_COUNTER))
        if replay is None:
            replay = nvml_int(ctx.call("nvmlDeviceGetPcieReplayCounter", h))
    else:  # the last count stands between reads
        replay = ctx.previous.pcie.replay_errors if ctx.previous is not None else None
    out.set(
        pcie=Pcie(
            link_generation=nvml_int(ctx.call("nvmlDeviceGetCurrPcieLinkGeneration", h)),
            link_width=nvml_int(ctx.call("nvmlDeviceGetCurrPcieLinkWidth", h)),
            tx_bytes_per_second=tx,
            rx_bytes_per_second=rx,
            replay_errors=replay,
        )
    )
    read_nvlink(ctx, out)


READERS = [FunctionReader("pcie", read_pcie)]
