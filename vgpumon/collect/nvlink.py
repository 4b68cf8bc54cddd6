"""NVLink per link: state, data counters and data-link-layer error counters.

Everything comes from one ``nvmlDeviceGetFieldValues`` call per read, asked per link with
``(field id, link)`` pairs. Value classes: the link count is static (read once); state and
counters are dynamic, read at their own cadence (``SamplerConfig.cadences["nvlink"]``, 30 s in
``serve``), the last values standing between reads. One call does not make them cheap: the
driver answers every per-link field on its own, so a GPU's links cost far more per read than the
rest of its cycle (docs/exporter.md, "NVLink"; docs/measurements.md). The counters are
cumulative, so ``rate()`` over a read interval loses nothing but resolution. A PCIe board
answers "not supported" for the link count and is not asked again (until the re-probe); a board
whose driver does not report the per-link state yields no links at all.
"""

from __future__ import annotations

from vgpumon.collect.base import GpuBuilder, GpuContext, cadence, nvml_int
from vgpumon.collect.field_values import read_fields
from vgpumon.model import NvLink

# The per-link fields cost 75 ms per GPU and read on an HGX board: every 30 s by default.
NVLINK = cadence("nvlink", 30.0)

FI_LINK_COUNT = 91  # NVML_FI_DEV_NVLINK_LINK_COUNT
FI_STATE = 165  # NVML_FI_DEV_NVLINK_GET_STATE, scopeId = link: 1 active
FI_TX, FI_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX, KiB, scopeId = link
FI_REPLAY, FI_RECOVERY, FI_CRC = 161, 162, 163  # NVML_FI_DEV_NVLINK_ERROR_DL_*, scopeId = link
PER_LINK = (FI_STATE, FI_TX, FI_RX, FI_REPLAY, FI_RECOVERY, FI_CRC)
KIB = 1024
MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def _link_count(ctx: GpuContext) -> int | None:
    count = nvml_int(read_fields(ctx, [FI_LINK_COUNT]).get(FI_LINK_COUNT))
    return count if count is not None and 0 < count <= MAX_LINKS else None


def read_nvlink(ctx: GpuContext, out: GpuBuilder) -> None:
    """Part of the ``pcie`` collector (the GPU's interconnects), not a collector of its own."""
    links = ctx.once("nvlink.links", lambda: _link_count(ctx))
    if not links:
        return
    if not ctx.due(NVLINK):  # the last read stands
        if ctx.previous is not None:
            out.set(nvlinks=ctx.previous.nvlinks)
        return
    wanted = [(fid, link) for link in range(links) for fid in PER_LINK]
    every_cycle = ctx.cadence(NVLINK) <= 0
    got = read_fields(ctx, wanted, every_cycle=every_cycle)
    if not any((FI_STATE, link) in got for link in range(links)):
        # No per-link state: a driver (or board) that does not report links one by one. Its
        # other per-link answers, if any, cannot be trusted to mean a link.
        return

    def value(fid: int, link: int) -> int | None:
        return nvml_int(got.get((fid, link)))

    nvlinks = []
    for link in range(links):
        state = value(FI_STATE, link)
        tx, rx = value(FI_TX, link), value(FI_RX, link)
        nvlinks.append(
            NvLink(
                link=link,
                up=bool(state) if state is not None else None,
                tx_bytes=tx * KIB if tx is not None else None,
                rx_bytes=rx * KIB if rx is not None else None,
                crc_errors=value(FI_CRC, link),
                replay_errors=value(FI_REPLAY, link),
                recovery_errors=value(FI_RECOVERY, link),
            )
        )
    out.set(nvlinks=tuple(nvlinks))
