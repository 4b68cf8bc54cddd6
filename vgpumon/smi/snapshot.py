"""Both nvidia-smi reports of one host -> one :class:`~vgpumon.model.Snapshot`.

The collector statuses say which report was read, under the reader names of the NVML path whose
areas they cover (``device``: ``nvidia-smi -q -x``; ``vgpu``: ``nvidia-smi vgpu -q -x``), so the
exposition's rules that depend on a reader having run (vGPU instance counts only where the vgpu
reader ran) hold for agentless hosts too. The vGPU report is optional: when it fails in any way
(empty, an error, a non-zero exit, no answer in time) the host is served from its device report
with the vgpu collector failed and the reason, never as a host that is down.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from vgpumon.collect.memory_in_use import memory_decided
from vgpumon.model import (
    CollectorStatus,
    Gpu,
    SamplerHealth,
    SchemaError,
    Snapshot,
    VgpuInstance,
    VirtualMachine,
    check_snapshot,
)
from vgpumon.smi.device import driver_info, parse_gpus
from vgpumon.smi.errors import SmiParseError
from vgpumon.smi.vgpu import parse_vgpus
from vgpumon.smi.xmlsafe import parse_report

SMI_COLLECTORS = ("device", "vgpu")
SOURCE_PREFIX = "nvidia-smi"
VGPU_REPORT = "nvidia-smi vgpu -q -x output"


@dataclass(frozen=True)
class ReportFailure:
    """The optional vGPU report could not be had (the transport says why): the host is still
    read from its device report. ``failure`` is one of ``vgpumon.model.COLLECTOR_FAILURES``."""

    failure: str
    detail: str


def _named_vm(vgpu: VgpuInstance, vms: dict[int, str]) -> VgpuInstance:
    """A vGPU whose report gives no VM name, named from the process list: on ESXi the VM's
    world ID is its ``vm_id`` and, in the device report, the pid of the VM's entry."""
    if vgpu.vm is not None or vgpu.vm_id_type != "domain_id" or not (vgpu.vm_id or "").isdigit():
        return vgpu
    name = vms.get(int(vgpu.vm_id or 0))
    return vgpu if name is None else dataclasses.replace(vgpu, vm=VirtualMachine(name=name))


def _with_vgpus(gpu: Gpu, vgpus: dict[str, tuple[VgpuInstance, ...]] | None) -> Gpu:
    if vgpus is None or gpu.virtualization_mode != "host_vgpu":
        return gpu
    bus = (gpu.pci_bus_id or "").upper()
    vms = {p.pid: p.name for p in gpu.processes or () if p.kind == "vm" and p.name}
    instances = tuple(_named_vm(v, vms) for v in vgpus.get(bus, ()))
    return dataclasses.replace(gpu, vgpu_instances=instances)


def _vgpu_status(
    vgpu_xml: bytes | str | ReportFailure | None, duration: float
) -> tuple[dict[str, tuple[VgpuInstance, ...]] | None, CollectorStatus | None]:
    """The vGPU instances by bus id and the vgpu collector's status; a report that failed in
    any way leaves the instances unread and says why (the device report stands)."""
    if vgpu_xml is None:
        return None, None
    if isinstance(vgpu_xml, ReportFailure):
        failure, detail = vgpu_xml.failure, vgpu_xml.detail
    else:
        try:
            parsed = parse_vgpus(parse_report(vgpu_xml, what=VGPU_REPORT))
        except SmiParseError as err:
            failure, detail = err.failure, str(err)
        else:
            return parsed, CollectorStatus("vgpu", True, duration)
    return None, CollectorStatus("vgpu", False, duration, failure=failure, detail=detail)


def parse_reports(
    device_xml: bytes | str,
    vgpu_xml: bytes | str | ReportFailure | None,
    *,
    timestamp: float,
    source: str = SOURCE_PREFIX,
    durations: tuple[float, float] = (0.0, 0.0),
) -> Snapshot:
    """The snapshot of ``nvidia-smi -q -x`` (required: :class:`SmiParseError` when it cannot be
    read) and ``nvidia-smi vgpu -q -x`` (optional: None where the host has no vGPU manager, its
    instances then left unread, not empty; a :class:`ReportFailure` or a report that cannot be
    read leaves them unread too, with the vgpu collector failed and the reason).
    """
    root = parse_report(device_xml, what="nvidia-smi -q -x output")
    vgpus, vgpu_status = _vgpu_status(vgpu_xml, durations[1])
    gpus = tuple(memory_decided(_with_vgpus(g, vgpus)) for g in parse_gpus(root))
    collectors = [CollectorStatus("device", True, durations[0])]
    if vgpu_status is not None:
        collectors.append(vgpu_status)
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
        raise SmiParseError(f"nvidia-smi reports: {err}") from None
    return snapshot
