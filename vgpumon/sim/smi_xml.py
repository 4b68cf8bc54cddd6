"""What ``nvidia-smi -q -x`` and ``nvidia-smi vgpu -q -x`` would print on a simulated host.

nvidia-smi is itself an NVML client, so this module plays nvidia-smi against the simulated NVML:
it calls the same functions (a call that fails prints ``N/A``) and prints their answers the way
nvidia-smi does - integer MiB, MHz, percent and degrees, watts with two decimals, latencies in
microseconds. Any scenario can then be served agentlessly (a fake ``nvidia-smi`` over SSH, see the
tests) and compared field by field with the NVML readers.

Element layout follows the real reports (see ``tests/fixtures/smi``): the R535+ names for
``-q -x``, and for ``vgpu -q -x`` the names of the labels of the text report. Only the elements
vgpumon reads are printed.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import pynvml

NA = "N/A"
MIB = 1024 * 1024
BRANDS = {
    1: "Quadro", 2: "Tesla", 3: "NVS", 4: "GRID", 5: "GeForce", 6: "Titan",
    7: "NVIDIA Virtual Applications", 8: "NVIDIA Virtual PC", 9: "NVIDIA Virtual Compute Server",
    10: "NVIDIA RTX Virtual Workstation", 11: "NVIDIA Cloud Gaming", 12: "Quadro RTX",
    13: "NVIDIA RTX", 14: "NVIDIA", 15: "GeForce RTX", 16: "Titan RTX",
}  # fmt: skip
ARCHITECTURES = {
    2: "Kepler", 3: "Maxwell", 4: "Pascal", 5: "Volta", 6: "Turing", 7: "Ampere",
    8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell",
}  # fmt: skip
VIRTUALIZATION = ("None", "Pass-Through", "VGPU", "Host VGPU", "Host VSGA")
COMPUTE_MODES = ("Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process")
# (element suffix, NVML clocks event reason bit)
CLOCK_REASONS = (
    ("gpu_idle", 0x1),
    ("applications_clocks_setting", 0x2),
    ("sw_power_cap", 0x4),
    ("hw_slowdown", 0x8),
    ("sync_boost", 0x10),
    ("sw_thermal_slowdown", 0x20),
    ("hw_thermal_slowdown", 0x40),
    ("hw_power_brake_slowdown", 0x80),
    ("display_clocks_setting", 0x100),
)
MEMORY_TEMP_FIELD = 82  # NVML_FI_DEV_MEMORY_TEMP
DOCTYPE = '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'


class _Smi:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    def call(self, name: str, *args: Any) -> Any:
        function: Callable[..., Any] | None = getattr(self.nvml, name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except pynvml.NVMLError:
            return None


def _text(value: Any) -> str:
    if value is None:
        return NA
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _add(parent: ET.Element, tag: str, value: Any = None) -> ET.Element:
    node = ET.SubElement(parent, tag)
    node.text = _text(value)
    return node


def _unit(value: Any, unit: str, scale: float = 1.0, fmt: str = "{:d}") -> str | None:
    if value is None:
        return None
    scaled = value / scale
    return (fmt.format(int(scaled)) if fmt == "{:d}" else fmt.format(scaled)) + f" {unit}"


def _enabled(value: Any) -> str | None:
    return None if value is None else ("Enabled" if int(value) else "Disabled")


def _memory_block(
    parent: ET.Element, tag: str, info: Any, reserved: bool, prefix: str = ""
) -> None:
    """``prefix``: NVML's BAR1 structure names its fields ``bar1Total``, ``bar1Used``, ..."""

    def field(name: str) -> Any:
        key = prefix + name.capitalize() if prefix else name
        return _unit(getattr(info, key, None), "MiB", MIB)

    node = ET.SubElement(parent, tag)
    _add(node, "total", field("total"))
    if reserved:
        _add(node, "reserved", field("reserved"))
    _add(node, "used", field("used"))
    _add(node, "free", field("free"))


def _clock_block(smi: _Smi, parent: ET.Element, tag: str, function: str, h: Any) -> None:
    node = ET.SubElement(parent, tag)
    for name, clock in (
        ("graphics_clock", pynvml.NVML_CLOCK_GRAPHICS),
        ("sm_clock", pynvml.NVML_CLOCK_SM),
        ("mem_clock", pynvml.NVML_CLOCK_MEM),
        ("video_clock", pynvml.NVML_CLOCK_VIDEO),
    ):
        _add(node, name, _unit(smi.call(function, h, clock), "MHz"))


def _memory_temp(smi: _Smi, h: Any) -> Any:
    got = smi.call("nvmlDeviceGetFieldValues", h, [MEMORY_TEMP_FIELD])
    if not got or int(getattr(got[0], "nvmlReturn", 1)) != 0:
        return None
    value = got[0].value
    kind = int(got[0].valueType)
    return {0: value.dVal, 1: value.uiVal, 2: value.ulVal, 3: value.ullVal, 4: value.sllVal}.get(
        kind, value.uiVal
    )


def _ecc(smi: _Smi, gpu: ET.Element, h: Any) -> None:
    mode = smi.call("nvmlDeviceGetEccMode", h)
    node = ET.SubElement(gpu, "ecc_mode")
    _add(node, "current_ecc", _enabled(mode[0]) if mode else None)
    _add(node, "pending_ecc", _enabled(mode[1]) if mode else None)
    errors = ET.SubElement(gpu, "ecc_errors")
    for counter, tag in ((pynvml.NVML_VOLATILE_ECC, "volatile"), (0x1, "aggregate")):
        block = ET.SubElement(errors, tag)
        for kind, bits in (
            (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, "single_bit"),
            (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, "double_bit"),
        ):
            _add(
                ET.SubElement(block, bits),
                "total",
                smi.call("nvmlDeviceGetTotalEccErrors", h, kind, counter),
            )


def _clock_events(smi: _Smi, gpu: ET.Element, h: Any) -> None:
    supported = smi.call("nvmlDeviceGetSupportedClocksEventReasons", h)
    active = smi.call("nvmlDeviceGetCurrentClocksEventReasons", h)
    node = ET.SubElement(gpu, "clocks_event_reasons")
    for suffix, bit in CLOCK_REASONS:
        state = None
        if supported is not None and active is not None and int(supported) & bit:
            state = "Active" if int(active) & bit else "Not Active"
        _add(node, "clocks_event_reason_" + suffix, state)


def _mig(smi: _Smi, gpu: ET.Element, h: Any) -> None:
    count = smi.call("nvmlDeviceGetMaxMigDeviceCount", h) or 0
    devices = ET.SubElement(gpu, "mig_devices")
    for i in range(int(count)):
        mh = smi.call("nvmlDeviceGetMigDeviceHandleByIndex", h, i)
        if mh is None:
            continue
        dev = ET.SubElement(devices, "mig_device")
        _add(dev, "index", i)
        _add(dev, "gpu_instance_id", smi.call("nvmlDeviceGetGpuInstanceId", mh))
        _add(dev, "compute_instance_id", smi.call("nvmlDeviceGetComputeInstanceId", mh))
        attrs = smi.call("nvmlDeviceGetAttributes", mh)
        shared = ET.SubElement(ET.SubElement(dev, "device_attributes"), "shared")
        _add(shared, "multiprocessor_count", getattr(attrs, "multiprocessorCount", None))
        _memory_block(dev, "fb_memory_usage", smi.call("nvmlDeviceGetMemoryInfo", mh), False)


def _processes(smi: _Smi, gpu: ET.Element, h: Any) -> None:
    node = ET.SubElement(gpu, "processes")
    seen: dict[int, str] = {}
    entries: dict[int, Any] = {}
    for function, kind in (
        ("nvmlDeviceGetComputeRunningProcesses", "C"),
        ("nvmlDeviceGetGraphicsRunningProcesses", "G"),
    ):
        for p in smi.call(function, h) or ():
            pid = int(p.pid)
            seen[pid] = "C+G" if pid in seen and seen[pid] != kind else kind
            entries.setdefault(pid, p)
    for pid, p in entries.items():
        info = ET.SubElement(node, "process_info")
        gi = getattr(p, "gpuInstanceId", None)
        ci = getattr(p, "computeInstanceId", None)
        _add(info, "gpu_instance_id", gi if gi is not None and gi < 0xFFFFFFFF else None)
        _add(info, "compute_instance_id", ci if ci is not None and ci < 0xFFFFFFFF else None)
        _add(info, "pid", pid)
        _add(info, "type", seen[pid])
        _add(info, "process_name", smi.call("nvmlSystemGetProcessName", pid))
        used = getattr(p, "usedGpuMemory", None)
        _add(info, "used_memory", _unit(used, "MiB", MIB) if used is not None else None)


def _gpu(smi: _Smi, root: ET.Element, h: Any) -> str:
    pci = smi.call("nvmlDeviceGetPciInfo", h)
    bus = _text(getattr(pci, "busId", None)).upper()
    gpu = ET.SubElement(root, "gpu", id=bus)
    _add(gpu, "product_name", smi.call("nvmlDeviceGetName", h))
    brand = smi.call("nvmlDeviceGetBrand", h)
    _add(gpu, "product_brand", BRANDS.get(brand) if brand is not None else None)
    arch = smi.call("nvmlDeviceGetArchitecture", h)
    _add(gpu, "product_architecture", ARCHITECTURES.get(arch) if arch is not None else None)
    _add(gpu, "persistence_mode", _enabled(smi.call("nvmlDeviceGetPersistenceMode", h)))
    mig = smi.call("nvmlDeviceGetMigMode", h)
    mig_node = ET.SubElement(gpu, "mig_mode")
    _add(mig_node, "current_mig", _enabled(mig[0]) if mig else None)
    _add(mig_node, "pending_mig", _enabled(mig[1]) if mig else None)
    if mig and int(mig[0]):
        _mig(smi, gpu, h)
    _guest_license(smi, gpu, h)
    _add(gpu, "serial", smi.call("nvmlDeviceGetSerial", h))
    _add(gpu, "uuid", smi.call("nvmlDeviceGetUUID", h))
    virt = smi.call("nvmlDeviceGetVirtualizationMode", h)
    vnode = ET.SubElement(gpu, "gpu_virtualization_mode")
    _add(vnode, "virtualization_mode", VIRTUALIZATION[virt] if virt is not None else None)
    host_mode = smi.call("nvmlDeviceGetHostVgpuMode", h) if virt == 3 else None
    _add(
        vnode,
        "host_vgpu_mode",
        {0: "Non SR-IOV", 1: "SR-IOV"}.get(host_mode) if host_mode is not None else None,
    )
    hetero = smi.call("nvmlDeviceGetVgpuHeterogeneousMode", h) if virt == 3 else None
    _add(vnode, "vgpu_heterogeneous_mode", _enabled(hetero))
    pci_node = ET.SubElement(gpu, "pci")
    _add(pci_node, "pci_bus_id", bus)
    link = ET.SubElement(pci_node, "pci_gpu_link_info")
    _add(
        ET.SubElement(link, "pcie_gen"),
        "current_link_gen",
        smi.call("nvmlDeviceGetCurrPcieLinkGeneration", h),
    )
    width = smi.call("nvmlDeviceGetCurrPcieLinkWidth", h)
    _add(
        ET.SubElement(link, "link_widths"),
        "current_link_width",
        f"{width}x" if width is not None else None,
    )
    _add(pci_node, "replay_counter", smi.call("nvmlDeviceGetPcieReplayCounter", h))
    fan = smi.call("nvmlDeviceGetFanSpeed", h)
    _add(gpu, "fan_speed", _unit(fan, "%"))
    pstate = smi.call("nvmlDeviceGetPerformanceState", h)
    _add(gpu, "performance_state", f"P{pstate}" if pstate is not None and pstate < 32 else None)
    _clock_events(smi, gpu, h)
    version = getattr(pynvml, "nvmlMemory_v2", None)
    memory = smi.call("nvmlDeviceGetMemoryInfo", h, version) if version is not None else None
    _memory_block(
        gpu, "fb_memory_usage", memory or smi.call("nvmlDeviceGetMemoryInfo", h), memory is not None
    )
    _memory_block(
        gpu, "bar1_memory_usage", smi.call("nvmlDeviceGetBAR1MemoryInfo", h), False, "bar1"
    )
    mode = smi.call("nvmlDeviceGetComputeMode", h)
    _add(
        gpu,
        "compute_mode",
        COMPUTE_MODES[mode] if mode is not None and not (mig and int(mig[0])) else None,
    )
    util = ET.SubElement(gpu, "utilization")
    rates = smi.call("nvmlDeviceGetUtilizationRates", h)
    enc = smi.call("nvmlDeviceGetEncoderUtilization", h)
    dec = smi.call("nvmlDeviceGetDecoderUtilization", h)
    _add(util, "gpu_util", _unit(getattr(rates, "gpu", None), "%"))
    _add(util, "memory_util", _unit(getattr(rates, "memory", None), "%"))
    _add(util, "encoder_util", _unit(enc[0], "%") if enc else None)
    _add(util, "decoder_util", _unit(dec[0], "%") if dec else None)
    _ecc(smi, gpu, h)
    rows = smi.call("nvmlDeviceGetRemappedRows", h)
    rnode = ET.SubElement(gpu, "remapped_rows")
    if rows is None:
        rnode.text = NA
    else:
        _add(rnode, "remapped_row_corr", rows[0])
        _add(rnode, "remapped_row_unc", rows[1])
        _add(rnode, "remapped_row_pending", "Yes" if rows[2] else "No")
        _add(rnode, "remapped_row_failure", "Yes" if rows[3] else "No")
    temp = ET.SubElement(gpu, "temperature")
    _add(
        temp,
        "gpu_temp",
        _unit(smi.call("nvmlDeviceGetTemperature", h, pynvml.NVML_TEMPERATURE_GPU), "C"),
    )
    _add(temp, "memory_temp", _unit(_memory_temp(smi, h), "C"))
    power = ET.SubElement(gpu, "gpu_power_readings")
    _add(power, "power_draw", _unit(smi.call("nvmlDeviceGetPowerUsage", h), "W", 1000, "{:.2f}"))
    _add(
        power,
        "current_power_limit",
        _unit(smi.call("nvmlDeviceGetEnforcedPowerLimit", h), "W", 1000, "{:.2f}"),
    )
    _clock_block(smi, gpu, "clocks", "nvmlDeviceGetClockInfo", h)
    _clock_block(smi, gpu, "max_clocks", "nvmlDeviceGetMaxClockInfo", h)
    _processes(smi, gpu, h)
    return bus


def _expiry_text(expiry: Any) -> str | None:
    """``Expiry: Permanent`` / ``Expiry: 2026-7-7 16:1:44 GMT`` (unpadded, as the driver prints)."""
    status = int(expiry.status)
    if status == 4:  # NVML_GRID_LICENSE_EXPIRY_PERMANENT
        return "Expiry: Permanent"
    if status != 2:  # only a VALID expiry carries a date
        return None
    return (
        f"Expiry: {expiry.year}-{expiry.month}-{expiry.day} "
        f"{expiry.hour}:{expiry.min}:{expiry.sec} GMT"
    )


def _license(info: Any) -> str | None:
    if info is None:
        return None
    if not int(info.isLicensed):
        state = int(info.currentState)
        return {
            0: "Unlicensed (Unknown)",
            1: "Unlicensed (Uninitialized)",
            2: "Unlicensed (Unrestricted)",
            3: "Unlicensed (Restricted)",
        }.get(state, "Unlicensed")
    when = _expiry_text(info.licenseExpiry)
    return f"Licensed ({when})" if when else "Licensed"


def _guest_license(smi: _Smi, gpu: ET.Element, h: Any) -> None:
    """Inside a vGPU guest: the licensed product, the block nvidia-smi prints for the enabled
    licensable feature (none where licensing does not apply)."""
    got = smi.call("nvmlDeviceGetGridLicensableFeatures", h)
    if got is None or not int(got.isGridLicenseSupported):
        return
    for i in range(min(int(got.licensableFeaturesCount), 3)):
        f = got.gridLicensableFeatures[i]
        if not int(f.featureEnabled):
            continue
        node = ET.SubElement(gpu, "vgpu_software_licensed_product")
        _add(node, "licensed_product_name", f.productName or None)
        when = _expiry_text(f.licenseExpiry) if int(f.featureState) else None
        status = ("Licensed" if int(f.featureState) else "Unlicensed") + (
            f" ({when})" if when else ""
        )
        _add(node, "license_status", status)
        return


def _vgpu(smi: _Smi, parent: ET.Element, vi: int, util: dict[int, Any]) -> None:
    node = ET.SubElement(parent, "vgpu", id=str(vi))
    vm = smi.call("nvmlVgpuInstanceGetVmID", vi)
    if vm is not None:
        _add(node, "vm_uuid" if int(vm[1]) == pynvml.NVML_VGPU_VM_ID_UUID else "vm_id", vm[0])
    type_id = smi.call("nvmlVgpuInstanceGetType", vi)
    _add(
        node, "vgpu_name", smi.call("nvmlVgpuTypeGetName", type_id) if type_id is not None else None
    )
    _add(node, "vgpu_type", type_id)
    _add(node, "vgpu_uuid", smi.call("nvmlVgpuInstanceGetUUID", vi))
    _add(node, "mdev_uuid", smi.call("nvmlVgpuInstanceGetMdevUUID", vi))
    _add(node, "guest_driver_version", smi.call("nvmlVgpuInstanceGetVmDriverVersion", vi))
    _add(node, "license_status", _license(smi.call("nvmlVgpuInstanceGetLicenseInfo_v2", vi)))
    gi = smi.call("nvmlVgpuInstanceGetGpuInstanceId", vi)
    _add(node, "gpu_instance_id", gi if gi is not None and gi < 0xFFFFFFFF else None)
    placement = smi.call("nvmlVgpuInstanceGetPlacementId", vi)
    _add(
        node,
        "placement_id",
        placement if placement is not None and placement < 0xFFFF else None,
    )
    _add(node, "accounting_mode", _enabled(smi.call("nvmlVgpuInstanceGetAccountingMode", vi)))
    _add(node, "ecc_mode", _enabled(smi.call("nvmlVgpuInstanceGetEccMode", vi)))
    frl = smi.call("nvmlVgpuInstanceGetFrameRateLimit", vi)
    _add(node, "frame_rate_limit", f"{frl} FPS" if frl else None)
    fb = ET.SubElement(node, "fb_memory_usage")
    total = smi.call("nvmlVgpuTypeGetFramebufferSize", type_id) if type_id is not None else None
    used = smi.call("nvmlVgpuInstanceGetFbUsage", vi)
    _add(fb, "total", _unit(total, "MiB", MIB))
    _add(fb, "used", _unit(used, "MiB", MIB))
    _add(
        fb,
        "free",
        _unit(total - used, "MiB", MIB) if total is not None and used is not None else None,
    )
    unode = ET.SubElement(node, "utilization")
    sample = util.get(vi)
    for tag, attr in (
        ("gpu_util", "smUtil"),
        ("memory_util", "memUtil"),
        ("encoder_util", "encUtil"),
        ("decoder_util", "decUtil"),
    ):
        value = getattr(sample, attr, None) if sample is not None else None
        _add(unode, tag, _unit(value.uiVal, "%") if value is not None else None)
    enc = smi.call("nvmlVgpuInstanceGetEncoderStats", vi)
    enode = ET.SubElement(node, "encoder_stats")
    _add(enode, "session_count", enc[0] if enc else None)
    _add(enode, "average_fps", enc[1] if enc else None)
    _add(enode, "average_latency", enc[2] if enc else None)
    fbc = smi.call("nvmlVgpuInstanceGetFBCStats", vi)
    fnode = ET.SubElement(node, "fbc_stats")
    _add(fnode, "session_count", getattr(fbc, "sessionsCount", None))
    _add(fnode, "average_fps", getattr(fbc, "averageFPS", None))
    _add(fnode, "average_latency", getattr(fbc, "averageLatency", None))


def _latest_vgpu_samples(smi: _Smi, h: Any) -> dict[int, Any]:
    latest: dict[int, Any] = {}
    for s in smi.call("nvmlDeviceGetVgpuUtilization", h, 0) or ():
        if s.vgpuInstance not in latest or s.timeStamp >= latest[s.vgpuInstance].timeStamp:
            latest[s.vgpuInstance] = s
    return latest


def _header(smi: _Smi, root: ET.Element) -> None:
    _add(root, "driver_version", smi.call("nvmlSystemGetDriverVersion"))
    cuda = smi.call("nvmlSystemGetCudaDriverVersion")
    _add(root, "cuda_version", f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None)


def _serialize(root: ET.Element) -> str:
    ET.indent(root, space="\t")
    return DOCTYPE + ET.tostring(root, encoding="unicode") + "\n"


def device_report(nvml: Any) -> str:
    """``nvidia-smi -q -x`` of the simulated host (NVML must be initialised)."""
    smi = _Smi(nvml)
    root = ET.Element("nvidia_smi_log")
    _header(smi, root)
    count = smi.call("nvmlDeviceGetCount") or 0
    _add(root, "attached_gpus", count)
    for i in range(int(count)):
        h = smi.call("nvmlDeviceGetHandleByIndex", i)
        if h is not None:
            _gpu(smi, root, h)
    return _serialize(root)


def vgpu_report(nvml: Any) -> str:
    """``nvidia-smi vgpu -q -x`` of the simulated host: the vGPU host GPUs and their vGPUs."""
    smi = _Smi(nvml)
    root = ET.Element("nvidia_smi_log")
    _header(smi, root)
    count = smi.call("nvmlDeviceGetCount") or 0
    _add(root, "attached_gpus", count)
    for i in range(int(count)):
        h = smi.call("nvmlDeviceGetHandleByIndex", i)
        if h is None or smi.call("nvmlDeviceGetVirtualizationMode", h) != 3:
            continue
        pci = smi.call("nvmlDeviceGetPciInfo", h)
        gpu = ET.SubElement(root, "gpu", id=_text(getattr(pci, "busId", None)).upper())
        active = smi.call("nvmlDeviceGetActiveVgpus", h) or []
        _add(gpu, "active_vgpus", len(active))
        util = _latest_vgpu_samples(smi, h)
        for vi in active:
            _vgpu(smi, gpu, int(vi), util)
    return _serialize(root)


def main(argv: list[str] | None = None) -> int:
    """A stand-in ``nvidia-smi`` for a test host: ``python -m vgpumon.sim.smi_xml --sim NAME -q -x``
    (or ``... vgpu -q -x``) prints what nvidia-smi would print on that simulated host, so a real
    sshd can serve any scenario to ``vgpumon serve --ssh.targets`` (install it as ``nvidia-smi``).
    """
    import argparse
    import sys

    from vgpumon import sim
    from vgpumon.errors import VgpumonError

    parser = argparse.ArgumentParser(prog="nvidia-smi (simulated)")
    parser.add_argument("--sim", required=True, metavar="SCENARIO")
    parser.add_argument("command", nargs="?", choices=("vgpu",))
    parser.add_argument("-q", action="store_true", required=True)
    parser.add_argument("-x", action="store_true", required=True)
    args = parser.parse_args(argv)
    try:
        nvml = sim.create(args.sim)
    except VgpumonError as err:
        sys.stderr.write(f"{err}\n")
        return 2
    nvml.nvmlInit()
    try:
        sys.stdout.write(vgpu_report(nvml) if args.command == "vgpu" else device_report(nvml))
    finally:
        nvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
