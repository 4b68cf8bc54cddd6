"""Both nvidia-smi reports of one host -> one :class:`~vgpumon.model.Snapshot`.

The collector statuses say which report was read, under the reader names of the NVML path whose
areas they cover (``device``: ``nvidia-smi -q -x``; ``vgpu``: ``nvidia-smi vgpu -q -x``), so the
exposition's rules that depend on a reader having run (vGPU instance counts only where the vgpu
reader ran) hold for agentless hosts too.
"""

from __future__ import annotations

import dataclasses

from vgpumon.model import (
    CollectorStatus,
    Gpu,
    SamplerHealth,
    SchemaError,
    Snapshot,
    VgpuInstance,
    check_snapshot,
)
from vgpumon.smi.device import driver_info, parse_gpus
from vgpumon.smi.errors import SmiParseError
from vgpumon.smi.vgpu import parse_vgpus
from vgpumon.smi.xmlsafe import parse_report

SMI_COLLECTORS = ("device", "vgpu")
SOURCE_PREFIX = "nvidia-smi"


def _with_vgpus(gpu: Gpu, vgpus: dict[str, tuple[VgpuInstance, ...]] | None) -> Gpu:
    if vgpus is None or gpu.virtualization_mode != "host_vgpu":
        return gpu
    bus = (gpu.pci_bus_id or "").upper()
    return dataclasses.replace(gpu, vgpu_instances=vgpus.get(bus, ()))


def parse_reports(
    device_xml: bytes | str,
    vgpu_xml: bytes | str | None,
    *,
    timestamp: float,
    source: str = SOURCE_PREFIX,
    durations: tuple[float, float] = (0.0, 0.0),
) -> Snapshot:
    """The snapshot of ``nvidia-smi -q -x`` (required) and ``nvidia-smi vgpu -q -x`` (optional:
    None where the host has no vGPU manager; its instances are then left unread, not empty).
    """
    root = parse_report(device_xml, what="nvidia-smi -q -x output")
    vgpus = (
        parse_vgpus(parse_report(vgpu_xml, what="nvidia-smi vgpu -q -x output"))
        if (vgpu_xml is not None)
        else None
    )
    gpus = tuple(_with_vgpus(g, vgpus) for g in parse_gpus(root))
    collectors = [CollectorStatus("device", True, durations[0])]
    if vgpus is not None:
        collectors.append(CollectorStatus("vgpu", True, durations[1]))
    snapshot = Snapshot(
        timestamp=timestamp,
        driver=driver_info(root),
        gpus=gpus,
        collectors=tuple(collectors),
        health=SamplerHealth(up=True, cycles_total=1, last_cycle_duration_seconds=sum(durations)),
        source=source,
    )
    try:
        check_snapshot(snapshot)  # the same GPU twice in a report: nothing can show it
    except SchemaError as err:
        raise SmiParseError(f"nvidia-smi -q -x output: {err}") from None
    return snapshot
