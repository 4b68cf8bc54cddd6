"""``nvidia-smi -q -x`` -> driver versions and one :class:`~vgpumon.model.Gpu` per ``<gpu>``.

Element names changed across drivers (``clocks_throttle_reasons`` became ``clocks_event_reasons``
in R535, ``power_readings`` became ``gpu_power_readings``, ECC counters moved from
``single_bit``/``double_bit`` totals to ``sram_*``/``dram_*``), so each field tries the newer
name first and falls back to the older one. The GPU index is the ``<gpu>`` element's position:
nvidia-smi lists GPUs in PCI bus order, as NVML numbers them by default.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from vgpumon.model import (
    ClockEvents,
    Clocks,
    DriverInfo,
    Ecc,
    Gpu,
    GuestLicenseFeature,
    Memory,
    MigComputeInstance,
    MigGpuInstance,
    Pcie,
    Process,
    RemappedRows,
    Temperatures,
    Utilization,
)
from vgpumon.smi import values as v
from vgpumon.smi.vgpu import parse_license

VIRTUALIZATION = {
    "none": "none",
    "pass-through": "passthrough",
    "vgpu": "vgpu",
    "host vgpu": "host_vgpu",
    "host vsga": "host_vsga",
}
HOST_VGPU_MODES = {"sr-iov": "sriov", "non sr-iov": "non_sriov"}
COMPUTE_MODES = {
    "default": "default",
    "exclusive_thread": "exclusive_thread",
    "prohibited": "prohibited",
    "exclusive_process": "exclusive_process",
}
# nvidia-smi's brand words -> the names the NVML reader uses (collect/device.py BRANDS).
BRANDS = {
    "nvidia virtual applications": "nvidia_vapps",
    "nvidia virtual pc": "nvidia_vpc",
    "nvidia virtual compute server": "nvidia_vcs",
    "nvidia rtx virtual workstation": "nvidia_vws",
}
# clock event reason element suffix -> model name (CLOCK_EVENT_REASONS)
CLOCK_REASONS = {
    "gpu_idle": "idle",
    "applications_clocks_setting": "applications_clocks_setting",
    "sw_power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal_slowdown": "sw_thermal",
    "hw_thermal_slowdown": "hw_thermal",
    "hw_power_brake_slowdown": "power_brake",
    "display_clocks_setting": "display_clock_setting",
}
# Licensed product names (current and GRID-era) -> the licensable feature the NVML reader names.
GUEST_FEATURES = {
    "nvidia rtx virtual workstation": "nvidia_rtx",
    "quadro virtual data center workstation": "nvidia_rtx",
    "nvidia virtual pc": "vgpu",
    "nvidia virtual applications": "vgpu",
    "grid virtual pc": "vgpu",
    "grid virtual applications": "vgpu",
    "nvidia virtual compute server": "compute",
    "nvidia cloud gaming": "gaming",
}
# nvidia-smi's process type letters -> model.PROCESS_KINDS
SMI_PROCESS_TYPES = {"C": "compute", "G": "graphics", "C+G": "compute", "M": "mps", "M+C": "mps"}


def _lookup(table: dict[str, str], value: str | None) -> str | None:
    return None if value is None else table.get(value.strip().lower())


def _first(gpu: ET.Element, *paths: str) -> ET.Element | None:
    for path in paths:
        node = gpu.find(path)
        if node is not None and v.element_text(node) is not None:
            return node
    return None


def driver_info(root: ET.Element) -> DriverInfo:
    return DriverInfo(
        driver_version=v.element_text(root, "driver_version"),
        cuda_driver_version=v.element_text(root, "cuda_version"),
    )


def _memory(node: ET.Element | None) -> Memory:
    return Memory(
        total_bytes=v.size_bytes(node, "total"),
        used_bytes=v.size_bytes(node, "used"),
        free_bytes=v.size_bytes(node, "free"),
        reserved_bytes=v.size_bytes(node, "reserved"),
    )


def _clocks(node: ET.Element | None) -> Clocks:
    return Clocks(
        graphics_hertz=v.hertz(node, "graphics_clock"),
        sm_hertz=v.hertz(node, "sm_clock"),
        memory_hertz=v.hertz(node, "mem_clock"),
        video_hertz=v.hertz(node, "video_clock"),
    )


def _clock_events(gpu: ET.Element) -> ClockEvents:
    for section, prefix in (
        ("clocks_event_reasons", "clocks_event_reason_"),
        ("clocks_throttle_reasons", "clocks_throttle_reason_"),
    ):
        node = gpu.find(section)
        if node is None:
            continue
        supported: list[str] = []
        active: list[str] = []
        for suffix, name in CLOCK_REASONS.items():
            state = v.enabled(node, prefix + suffix)
            if state is None:
                continue
            supported.append(name)
            if state:
                active.append(name)
        return ClockEvents(supported=tuple(supported), active=tuple(active))
    return ClockEvents()


def _sum(node: ET.Element | None, *paths: str) -> int | None:
    got = [v.integer(node, p) for p in paths]
    present = [g for g in got if g is not None]
    return sum(present) if present else None


def _ecc_counts(node: ET.Element | None) -> tuple[int | None, int | None]:
    """(corrected, uncorrected) totals of one ``volatile`` / ``aggregate`` block."""
    if node is None:
        return None, None
    if node.find("single_bit") is not None:  # up to R525
        return v.integer(node, "single_bit/total"), v.integer(node, "double_bit/total")
    corrected = _sum(node, "sram_correctable", "dram_correctable")
    if node.find("sram_uncorrectable") is not None:
        uncorrected = _sum(node, "sram_uncorrectable", "dram_uncorrectable")
    else:  # R570+: SRAM errors split by detection method
        uncorrected = _sum(
            node, "sram_uncorrectable_parity", "sram_uncorrectable_secded", "dram_uncorrectable"
        )
    return corrected, uncorrected


def _ecc(gpu: ET.Element) -> Ecc:
    cv, uv = _ecc_counts(gpu.find("ecc_errors/volatile"))
    ca, ua = _ecc_counts(gpu.find("ecc_errors/aggregate"))
    return Ecc(
        mode_current=v.enabled(gpu, "ecc_mode/current_ecc"),
        mode_pending=v.enabled(gpu, "ecc_mode/pending_ecc"),
        corrected_volatile=cv,
        uncorrected_volatile=uv,
        corrected_aggregate=ca,
        uncorrected_aggregate=ua,
    )


def _processes(gpu: ET.Element, *, vms: bool) -> tuple[Process, ...] | None:
    """The process list; None where the report has none or says N/A (unknown, not empty).

    On a vGPU host GPU (``vms``) each entry is a VM: a hypervisor's nvidia-smi lists the VMs on
    its GPUs as processes (ESXi: the VM's name, padded with spaces, and its world ID as the pid),
    with the framebuffer each holds as its memory. Names are stripped; an empty one is absent.
    """
    node = v.subtree(gpu, "processes")
    if node is None:
        return None
    out: list[Process] = []
    for p in node.findall("process_info"):
        pid = v.integer(p, "pid")
        if pid is None:
            continue
        kind = SMI_PROCESS_TYPES.get(v.element_text(p, "type") or "C", "compute")
        out.append(
            Process(
                pid=pid,
                name=v.element_text(p, "process_name"),
                kind="vm" if vms else kind,
                used_memory_bytes=v.size_bytes(p, "used_memory"),
                gpu_instance_id=v.integer(p, "gpu_instance_id"),
                compute_instance_id=v.integer(p, "compute_instance_id"),
            )
        )
    return tuple(out)


def _mig(gpu: ET.Element) -> tuple[MigGpuInstance, ...]:
    """MIG devices grouped by GPU instance (each ``mig_device`` is one compute instance)."""
    grouped: dict[int, tuple[ET.Element, list[MigComputeInstance]]] = {}
    for dev in gpu.findall("mig_devices/mig_device"):
        gi = v.integer(dev, "gpu_instance_id")
        ci = v.integer(dev, "compute_instance_id")
        if gi is None or ci is None:
            continue
        entry = grouped.setdefault(gi, (dev, []))
        entry[1].append(
            MigComputeInstance(
                id=ci,
                mig_index=v.integer(dev, "index"),
                sm_count=v.integer(dev, "device_attributes/shared/multiprocessor_count"),
            )
        )
    return tuple(
        MigGpuInstance(
            id=gi,
            memory_total_bytes=v.size_bytes(dev, "fb_memory_usage/total"),
            memory_used_bytes=v.size_bytes(dev, "fb_memory_usage/used"),
            compute_instances=tuple(cis),
        )
        for gi, (dev, cis) in sorted(grouped.items())
    )


def _guest_licenses(gpu: ET.Element) -> tuple[bool | None, tuple[GuestLicenseFeature, ...]]:
    """A vGPU guest's licensed product; (None, ()) where nvidia-smi prints no such block."""
    node = v.subtree(gpu, "vgpu_software_licensed_product")
    if node is None:
        return None, ()
    product = v.element_text(node, "licensed_product_name")
    lic = parse_license(v.element_text(node, "license_status"))
    feature = GuestLicenseFeature(
        feature=GUEST_FEATURES.get((product or "").lower(), "unknown"),
        licensed=lic.licensed,
        enabled=True,  # nvidia-smi prints the enabled feature
        product_name=product,
        state=None if lic.licensed is None else ("licensed" if lic.licensed else "unlicensed"),
        expiry_status=lic.expiry_status,
        expiry_timestamp_seconds=lic.expiry_timestamp_seconds,
    )
    return True, (feature,)


def _brand(value: str | None) -> str | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    return BRANDS.get(lowered, lowered.replace(" ", "_"))


def _architecture(value: str | None) -> str | None:
    # "Ada Lovelace" -> "ada", "Hopper" -> "hopper": the NVML reader's names
    return None if value is None else value.split()[0].lower()


def parse_gpu(index: int, gpu: ET.Element) -> Gpu:
    virt = v.subtree(gpu, "gpu_virtualization_mode")  # absent in some guests' reports
    power = gpu.find("gpu_power_readings")
    if power is None:
        power = gpu.find("power_readings")
    fan = v.ratio(gpu, "fan_speed")
    licensing, licenses = _guest_licenses(gpu)
    virtualization = _lookup(VIRTUALIZATION, v.element_text(virt, "virtualization_mode"))
    return Gpu(
        index=index,
        uuid=v.element_text(gpu, "uuid") or f"pci:{gpu.get('id', index)}",
        name=v.element_text(gpu, "product_name"),
        pci_bus_id=gpu.get("id") or v.element_text(gpu, "pci/pci_bus_id"),
        serial=v.element_text(gpu, "serial"),
        brand=_brand(v.element_text(gpu, "product_brand")),
        architecture=_architecture(v.element_text(gpu, "product_architecture")),
        virtualization_mode=virtualization,
        host_vgpu_mode=_lookup(HOST_VGPU_MODES, v.element_text(virt, "host_vgpu_mode")),
        vgpu_heterogeneous_mode=v.enabled(virt, "vgpu_heterogeneous_mode"),
        mig_mode_current=v.enabled(gpu, "mig_mode/current_mig"),
        mig_mode_pending=v.enabled(gpu, "mig_mode/pending_mig"),
        utilization=Utilization(
            gpu=v.ratio(gpu, "utilization/gpu_util"),
            memory=v.ratio(gpu, "utilization/memory_util"),
            encoder=v.ratio(gpu, "utilization/encoder_util"),
            decoder=v.ratio(gpu, "utilization/decoder_util"),
        ),
        memory=_memory(gpu.find("fb_memory_usage")),
        bar1_memory=_memory(gpu.find("bar1_memory_usage")),
        power_watts=v.watts(
            _first(power, "power_draw", "average_power_draw", "instant_power_draw")
            if power is not None
            else None
        ),
        power_limit_watts=v.watts(
            _first(power, "current_power_limit", "enforced_power_limit", "power_limit")
            if power is not None
            else None
        ),
        temperatures=Temperatures(
            gpu_celsius=v.celsius(gpu, "temperature/gpu_temp"),
            memory_celsius=v.celsius(gpu, "temperature/memory_temp"),
        ),
        clocks=_clocks(gpu.find("clocks")),
        max_clocks=_clocks(gpu.find("max_clocks")),
        clock_events=_clock_events(gpu),
        performance_state=v.pstate(gpu, "performance_state"),
        fan_speed=fan,
        persistence_mode=v.enabled(gpu, "persistence_mode"),
        compute_mode=_lookup(COMPUTE_MODES, v.element_text(gpu, "compute_mode")),
        ecc=_ecc(gpu),
        remapped_rows=RemappedRows(
            correctable=v.integer(gpu, "remapped_rows/remapped_row_corr"),
            uncorrectable=v.integer(gpu, "remapped_rows/remapped_row_unc"),
            pending=v.enabled(gpu, "remapped_rows/remapped_row_pending"),
            failed=v.enabled(gpu, "remapped_rows/remapped_row_failure"),
        ),
        pcie=Pcie(
            link_generation=v.integer(gpu, "pci/pci_gpu_link_info/pcie_gen/current_link_gen"),
            link_width=v.link_width(gpu, "pci/pci_gpu_link_info/link_widths/current_link_width"),
            replay_errors=v.integer(gpu, "pci/replay_counter"),
        ),
        processes=_processes(gpu, vms=virtualization == "host_vgpu"),
        mig_instances=_mig(gpu),
        guest_license_supported=licensing,
        guest_licenses=licenses,
    )


def parse_gpus(root: ET.Element) -> tuple[Gpu, ...]:
    return tuple(parse_gpu(i, g) for i, g in enumerate(root.findall("gpu")))
