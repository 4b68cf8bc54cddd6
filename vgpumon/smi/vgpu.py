"""``nvidia-smi vgpu -q -x`` -> the :class:`~vgpumon.model.VgpuInstance` list of each GPU.

The report has one ``<gpu id="PCI BUS ID">`` per physical GPU and one ``<vgpu id="N">`` per active
vGPU instance, its elements named after the labels of the text report (``VM UUID`` ->
``vm_uuid``, ``FB Memory Usage`` -> ``fb_memory_usage``, ...). KVM hosts identify the VM by UUID
(``vm_uuid``), others by a domain id (``vm_id``; on ESXi the VM's world ID, the pid the device
report's process list gives the VM); both are read, and ``VM Name`` (``vm_name``) names the VM.
``N/A`` where a subtree belongs (``<utilization>N/A</utilization>``) leaves its values absent.

License text, as printed by the vGPU manager: ``Licensed (Expiry: 2026-7-7 16:1:44 GMT)``,
``Licensed (Expiry: Permanent)``, ``Licensed``, ``Unlicensed (Restricted)``, ``Unlicensed
(Unrestricted)``, ``Unlicensed (Uninitialized)``, ``Unlicensed``. The expiry is UTC (the NVML
path reads the same calendar fields as UTC).
"""

from __future__ import annotations

import datetime as dt
import re
import xml.etree.ElementTree as ET

from vgpumon.model import VgpuInstance, VgpuLicense, VgpuUtilization, VirtualMachine
from vgpumon.smi import values as v

_LICENSE = re.compile(r"^(?P<word>Licensed|Unlicensed)\s*(?:\((?P<detail>[^)]*)\))?\s*$", re.I)
_EXPIRY = re.compile(r"^Expiry:\s*(\d+)-(\d+)-(\d+)\s+(\d+):(\d+):(\d+)\s*(?:GMT|UTC)$", re.I)


def parse_license(value: str | None) -> VgpuLicense:
    if value is None:
        return VgpuLicense()
    match = _LICENSE.match(value.strip())
    if match is None:
        return VgpuLicense()
    licensed = match.group("word").lower() == "licensed"
    detail = (match.group("detail") or "").strip()
    if not licensed:
        lowered = detail.lower()
        state = {
            "restricted": "unlicensed_restricted",
            "unrestricted": "unlicensed_unrestricted",
            "uninitialized": "uninitialized",
            "unknown": "unknown",
        }
        return VgpuLicense(licensed=False, state=state.get(lowered, "unlicensed"))
    if detail.lower() in ("expiry: permanent", "permanent"):
        return VgpuLicense(licensed=True, state="licensed", expiry_status="permanent")
    expiry = _EXPIRY.match(detail)
    if expiry is None:
        return VgpuLicense(licensed=True, state="licensed")
    try:
        year, month, day, hour, minute, second = (int(x) for x in expiry.groups())
        when = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.timezone.utc)
    except ValueError:
        return VgpuLicense(licensed=True, state="licensed", expiry_status="invalid")
    return VgpuLicense(
        licensed=True,
        state="licensed",
        expiry_status="valid",
        expiry_timestamp_seconds=when.timestamp(),
    )


def _frame_rate_limit(node: ET.Element) -> int | None:
    # "60 FPS"; "N/A"/"Disabled" when the limiter is off
    value = v.element_text(node, "frame_rate_limit")
    if value is None:
        return None
    head = value.split()[0]
    return int(head) if head.isdigit() else None


def parse_instance(node: ET.Element) -> VgpuInstance | None:
    vgpu_id = node.get("id")
    if vgpu_id is None or not vgpu_id.strip().isdigit():
        return None
    vm_uuid = v.element_text(node, "vm_uuid")
    vm_id = vm_uuid if vm_uuid is not None else v.element_text(node, "vm_id")
    id_type = "uuid" if vm_uuid is not None else ("domain_id" if vm_id is not None else None)
    enc = v.subtree(node, "encoder_stats")
    fbc = v.subtree(node, "fbc_stats")
    utilization = v.subtree(node, "utilization")
    vm_name = v.element_text(node, "vm_name")
    enc_n = v.integer(enc, "session_count")
    fbc_n = v.integer(fbc, "session_count")
    return VgpuInstance(
        vgpu_id=int(vgpu_id),
        uuid=v.element_text(node, "vgpu_uuid"),
        vm_id=vm_id,
        vm_id_type=id_type,
        vm=VirtualMachine(name=vm_name) if vm_name is not None else None,
        type_id=v.integer(node, "vgpu_type"),
        type_name=v.element_text(node, "vgpu_name"),
        mdev_uuid=v.element_text(node, "mdev_uuid"),
        guest_driver_version=v.element_text(node, "guest_driver_version"),
        gpu_instance_id=v.integer(node, "gpu_instance_id"),
        placement_id=v.integer(node, "placement_id"),
        framebuffer_total_bytes=v.size_bytes(node, "fb_memory_usage/total"),
        framebuffer_used_bytes=v.size_bytes(node, "fb_memory_usage/used"),
        frame_rate_limit=_frame_rate_limit(node),
        ecc_enabled=v.enabled(node, "ecc_mode"),
        accounting_enabled=v.enabled(node, "accounting_mode"),
        # An average over no sessions is no value (nvidia-smi prints 0; NVML's reader says absent).
        encoder_sessions=enc_n,
        encoder_average_fps=v.number(enc, "average_fps") if enc_n else None,
        encoder_average_latency_seconds=v.seconds_from_us(enc, "average_latency")
        if enc_n
        else None,
        fbc_sessions=fbc_n,
        fbc_average_fps=v.number(fbc, "average_fps") if fbc_n else None,
        fbc_average_latency_seconds=v.seconds_from_us(fbc, "average_latency") if fbc_n else None,
        utilization=VgpuUtilization(
            sm=v.ratio(utilization, "gpu_util"),
            memory=v.ratio(utilization, "memory_util"),
            encoder=v.ratio(utilization, "encoder_util"),
            decoder=v.ratio(utilization, "decoder_util"),
            samples=1 if utilization is not None else 0,
        ),
        license=parse_license(v.element_text(node, "license_status")),
    )


def parse_vgpus(root: ET.Element) -> dict[str, tuple[VgpuInstance, ...]]:
    """PCI bus id (upper case) -> the vGPU instances of that GPU."""
    out: dict[str, tuple[VgpuInstance, ...]] = {}
    for gpu in root.findall("gpu"):
        bus = (gpu.get("id") or "").upper()
        instances = (parse_instance(n) for n in gpu.findall("vgpu"))
        out[bus] = tuple(i for i in instances if i is not None)
    return out
