"""Shared pieces for the exporter tests: a snapshot that fills every family, parsing helpers."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import Callable, Iterator

from prometheus_client.parser import text_string_to_metric_families

from vgpumon.collect.memory_in_use import memory_decided
from vgpumon.model import (
    ClockEvents,
    Clocks,
    CollectorStatus,
    DeviceAllocation,
    DriverInfo,
    Ecc,
    Gpm,
    Gpu,
    GpuMetering,
    GuestLicenseFeature,
    Memory,
    MigComputeInstance,
    MigGpuInstance,
    MigMeter,
    MigProfileCapacity,
    NvLink,
    NvmlErrorCount,
    Pcie,
    PodMeter,
    Process,
    ProcessMeter,
    RemappedRows,
    SamplerHealth,
    SamplingCadence,
    Snapshot,
    Temperatures,
    Usage,
    Utilization,
    VanishedVgpu,
    VgpuDepartures,
    VgpuInstance,
    VgpuLicense,
    VgpuMeter,
    VgpuProcess,
    VgpuScheduler,
    VgpuSchedulerUsage,
    VgpuShare,
    VgpuType,
    VgpuUtilization,
    VirtualMachine,
)

GIB = 1024**3


def _gpm(base: float) -> Gpm:
    return Gpm(
        interval_seconds=1.0,
        graphics_active=base,
        sm_active=base,
        sm_occupancy=base / 2,
        tensor_active=base / 4,
        dram_active=base / 3,
        fp64_active=0.0,
        fp32_active=base,
        fp16_active=0.1,
        pcie_tx_bytes_per_second=1.5e9,
        pcie_rx_bytes_per_second=2.5e9,
    )


def _physical(index: int, uuid: str, mode: str, **extra: object) -> Gpu:
    fields: dict[str, object] = {
        "index": index,
        "uuid": uuid,
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{index + 1:02X}:00.0",
        "serial": f"13222200{index:05d}",
        "brand": "nvidia",
        "architecture": "hopper",
        "compute_capability": "9.0",
        "virtualization_mode": mode,
        "mig_mode_current": False,
        "mig_mode_pending": False,
        "persistence_mode": True,
        "compute_mode": "default",
        "utilization": Utilization(gpu=0.5, memory=0.25, encoder=0.0, decoder=0.125),
        "memory": Memory(80 * GIB, 20 * GIB, 59 * GIB, 1 * GIB),
        "bar1_memory": Memory(128 * GIB, 2 * GIB, 126 * GIB),
        "power_watts": 312.5,
        "power_limit_watts": 700.0,
        "energy_joules": 123456.789,
        "temperatures": Temperatures(gpu_celsius=45.0, memory_celsius=52.0),
        "clocks": Clocks(1.98e9, 1.98e9, 2.619e9, 1.545e9),
        "max_clocks": Clocks(1.98e9, 1.98e9, 2.619e9, 1.545e9),
        "clock_events": ClockEvents(supported=("idle", "sw_power_cap"), active=("sw_power_cap",)),
        "performance_state": 0,
        "fan_speed": 0.3,
        "ecc": Ecc(True, True, 1, 0, 12, 0),
        "remapped_rows": RemappedRows(0, 0, False, False),
        "xid_errors": {79: 1, 13: 2},
        "pcie": Pcie(5, 16, 1.0e9, 2.0e9, 3),
        "nvlinks": (NvLink(0, True, 4 * GIB, 2 * GIB, 1, 0, 0), NvLink(1, False, 0, 0, 0, 0, 0)),
        "gpm": _gpm(0.4),
        "processes": (
            Process(
                pid=4242,
                name="python3",
                used_memory_bytes=2 * GIB,
                sm_utilization=0.5,
                memory_utilization=0.2,
                encoder_utilization=0.0,
                decoder_utilization=0.0,
            ),
            Process(pid=4343, name="train", used_memory_bytes=8 * GIB, sm_utilization=0.25),
        ),
    }
    fields.update(extra)
    return Gpu(**fields)  # type: ignore[arg-type]


def rich_snapshot() -> Snapshot:
    """A host with every kind of GPU vgpumon knows, every field filled: each family has samples."""
    vgpus = tuple(
        VgpuInstance(
            vgpu_id=3251634000 + i,
            uuid=f"VGPU-{i:08d}-0000-0000-0000-000000000000",
            vm_id=f"vm-{i}",
            vm_id_type="uuid",
            type_id=1001,
            type_name="NVIDIA H100-8C",
            type_class="Compute",
            mdev_uuid=f"mdev-{i}",
            guest_driver_version="580.65.06",
            placement_id=i * 8,
            framebuffer_total_bytes=8 * GIB,
            framebuffer_used_bytes=GIB * (i + 1),
            frame_rate_limit=60 if i == 0 else None,
            encoder_capacity=1.0,
            encoder_sessions=1,
            encoder_average_fps=30.0,
            encoder_average_latency_seconds=0.004,
            fbc_sessions=0,
            fbc_average_fps=0.0,
            fbc_average_latency_seconds=0.0,
            migration_supported=i == 0,
            utilization=VgpuUtilization(sm=0.3, memory=0.1, encoder=0.05, decoder=0.0, samples=5),
            license=VgpuLicense(
                licensed=i == 0,
                state="licensed" if i == 0 else "unlicensed_restricted",
                expiry_status="valid" if i == 0 else None,
                expiry_timestamp_seconds=1.8e9 if i == 0 else None,
                renewal_overdue=False if i == 0 else None,
            ),
            vm=VirtualMachine(name="vm-render-07", uuid="vm-0", state="running", title="Render")
            if i == 0
            else None,
            vf_pci_bus_id="0000:18:00.4" if i == 0 else None,
            live_migration_compatible=i == 0,
            migration_limits=() if i == 0 else ("guest_driver",),
        )
        for i in range(2)
    )
    host = _physical(
        0,
        "GPU-00000000-1111-2222-3333-444444444444",
        "host_vgpu",
        host_vgpu_mode="sriov",
        vgpu_heterogeneous_mode=False,
        vgpu_migration_supported=True,
        vgpu_framebuffer_free_bytes=64 * GIB,
        vgpu_framebuffer_stranded_bytes=0,
        vgpu_instances=vgpus,
        # The VMs as a hypervisor's process list names them (an agentless ESXi host's).
        processes=(
            *_physical(0, "", "none").processes,
            Process(pid=2102359, name="render-farm-01", kind="vm", used_memory_bytes=GIB),
        ),
        vgpu_types=(
            VgpuType(
                type_id=1001,
                name="NVIDIA H100-8C",
                type_class="Compute",
                framebuffer_bytes=8 * GIB,
                max_instances=10,
                max_instances_per_vm=1,
                creatable=True,
                active_instances=2,
                creatable_instances=8,
            ),
        ),
        vgpu_processes=(
            VgpuProcess(
                vgpu_id=3251634000,
                pid=77,
                name="blender",
                sm_utilization=0.2,
                memory_utilization=0.1,
                encoder_utilization=0.0,
                decoder_utilization=0.0,
            ),
        ),
        vgpu_schedulers=(
            VgpuScheduler(
                policy="equal_share",
                arr_enabled=True,
                timeslice_seconds=0.002,
                average_factor=33,
                frequency_hertz=480.0,
                supported_policies=("best_effort", "equal_share", "fixed_share"),
                min_timeslice_seconds=0.001,
                max_timeslice_seconds=0.03,
                usage=(
                    VgpuSchedulerUsage(3251634000, 12.5, 1.25),
                    VgpuSchedulerUsage(3251634001, 10.0, 2.0),
                ),
                log_entries_total=200,
                log_entries_missed_total=3,
                share_window_seconds=60.0,
                shares=(
                    VgpuShare(3251634000, "starved", 0.5, 1 / 12, 0.5, 60.0),
                    VgpuShare(3251634001, "ok", 0.5, 2 / 3, 0.0, 60.0),
                ),
            ),
        ),
    )
    mig = _physical(
        1,
        "GPU-11111111-1111-2222-3333-444444444444",
        "none",
        mig_mode_current=True,
        mig_mode_pending=True,
        utilization=Utilization(),
        gpm=None,
        mig_free_slices=3,
        mig_profiles=(
            MigProfileCapacity(19, "1g.10gb", 1, 10 * GIB, 7, 3),
            MigProfileCapacity(9, "3g.40gb", 3, 40 * GIB, 2, 0),
        ),
        mig_instances=(
            MigGpuInstance(
                id=1,
                profile_id=19,
                profile_name="1g.10gb",
                placement_start=0,
                placement_size=1,
                memory_total_bytes=10 * GIB,
                memory_used_bytes=GIB,
                gpm=_gpm(0.7),
                compute_instances=(
                    MigComputeInstance(
                        id=0,
                        mig_uuid="MIG-aaaaaaaa-0000-0000-0000-000000000000",
                        placement_start=0,
                        placement_size=1,
                        sm_count=16,
                    ),
                ),
            ),
            MigGpuInstance(
                id=2,
                profile_name="3g.40gb",
                placement_start=4,
                placement_size=4,
                memory_total_bytes=40 * GIB,
                memory_used_bytes=0,
                compute_instances=(
                    MigComputeInstance(id=0, mig_uuid="MIG-bbbbbbbb-0000-0000-0000-000000000000"),
                    MigComputeInstance(id=1, mig_uuid="MIG-cccccccc-0000-0000-0000-000000000000"),
                ),
            ),
        ),
        processes=(
            Process(
                pid=5000,
                name="infer",
                used_memory_bytes=GIB,
                gpu_instance_id=1,
                compute_instance_id=0,
            ),
        ),
    )
    guest = _physical(
        2,
        "GPU-22222222-1111-2222-3333-444444444444",
        "vgpu",
        guest_license_supported=True,
        guest_licenses=(
            GuestLicenseFeature(
                feature="compute",
                licensed=True,
                state="licensed",
                expiry_status="valid",
                expiry_timestamp_seconds=1.9e9,
                renewal_overdue=True,
            ),
            GuestLicenseFeature(feature="nvidia_rtx", licensed=False, state="unlicensed"),
        ),
    )
    lost = Gpu(
        index=3,
        uuid="GPU-33333333-1111-2222-3333-444444444444",
        up=False,
        down_reason="gpu_is_lost",
        name="NVIDIA H100 80GB HBM3",
    )
    # Usage counters as the metering stage leaves them (vgpumon.collect.metering), and the
    # vGPUs gone since start as the libvirt enricher judged them (vgpumon.collect.vanished).
    host = dataclasses.replace(
        host,
        vgpu_departures=VgpuDepartures(
            vanished=(VanishedVgpu(3251634009, "vm-lost-its-vgpu", "0d1f", 1.0),),
            counts={"vm_stopped": 4, "vm_holds_another": 1, "vanished": 1, "vm_unknown": 0},
        ),
        metering=GpuMetering(
            energy_joules_metered=900.0,
            unattributed_energy_joules={"vgpu": 100.0},
            vgpus=tuple(
                VgpuMeter(v.vgpu_id, Usage(30.0, 60.0 * GIB, 400.0), 0.0)
                for v in host.vgpu_instances
            ),
        ),
    )
    mig = dataclasses.replace(
        mig,
        metering=GpuMetering(
            energy_joules_metered=500.0,
            unattributed_energy_joules={"mig": 50.0, "pod": 200.0},
            unmetered_seconds=3.0,
            migs=tuple(MigMeter(gi.id, Usage(10.0, 5.0 * GIB, 225.0)) for gi in mig.mig_instances),
            processes=(
                ProcessMeter(
                    5000,
                    "infer",
                    1,
                    0,
                    Usage(10.0, 60.0 * GIB),
                    120.0,
                    True,
                    "ml",
                    "infer-a",
                    "server",
                ),
            ),
            pods=(PodMeter("ml", "infer-a", "server", Usage(10.0, 60.0 * GIB, 300.0)),),
            longest_idle_holder_seconds=120.0,
            dead_holders=0,
            dead_holder_memory_bytes=0,
        ),
    )
    snapshot = Snapshot(
        timestamp=1_767_225_601.0,
        driver=DriverInfo("580.65.06", "13.580.65.06", "13.0"),
        # Built by hand, not by the readers: the memory in use is decided as the sampler does.
        gpus=tuple(memory_decided(g) for g in (host, mig, guest, lost)),
        collectors=(
            CollectorStatus("device", True, 0.0),
            CollectorStatus("memory", False, 0.0, failure="timeout", detail="no answer in 1 s"),
            CollectorStatus("vgpu", True, 0.0),
            CollectorStatus("xid", True, 0.0),
        ),
        nvml_errors=(NvmlErrorCount("nvmlDeviceGetFanSpeed_v2", "not_supported", 4),),
        health=SamplerHealth(
            up=True,
            wedged=False,
            cycles_total=2,
            cycles_abandoned_total=0,
            last_cycle_duration_seconds=0.0,
            dispatch="serial",
            interval_seconds=1.0,
            cadences=(SamplingCadence("gpm", 5.0), SamplingCadence("processes", 5.0)),
        ),
        source="sim:test",
        allocations=(
            DeviceAllocation(
                "nvidia.com/NVIDIA_H100-8C",
                "mdev-0",
                "vdi",
                "virt-launcher-vm-render-07-x7k2p",
                "compute",
                vm_name="vm-render-07",
                kind="vgpu",
                gpu_uuid=host.uuid,
                vgpu_id=vgpus[0].vgpu_id,
            ),
            DeviceAllocation(
                "nvidia.com/mig-1g.10gb",
                "MIG-bbbbbbbb-0000-0000-0000-000000000000",
                "ml",
                "infer-a",
                "server",
                kind="mig",
                gpu_uuid=mig.uuid,
                gpu_instance_id=mig.mig_instances[0].id,
                compute_instance_id=0,
            ),
            DeviceAllocation("nvidia.com/gpu", guest.uuid, kind="gpu", gpu_uuid=guest.uuid),
        ),
    )
    return with_driver_surfaces(snapshot)


def with_driver_surfaces(snapshot: Snapshot) -> Snapshot:
    """The rich host with what the R550-R610 driver surfaces add: recovery and repair state,
    confidential computing, accounting, migration payloads, per-type reservations, MIG-backed
    vGPU capacity per GPU instance, encoder schedulers and the metering methods."""
    from vgpumon.model import (
        AccountingRecord,
        ConfCompute,
        GpuInstanceVgpuCapacity,
        Recovery,
    )

    host, mig, guest, lost = snapshot.gpus
    vgpus = tuple(
        dataclasses.replace(v, migration_state_bytes=(v.framebuffer_used_bytes or 0) + 64 << 20)
        for v in host.vgpu_instances
    )
    types = tuple(
        dataclasses.replace(
            t,
            framebuffer_reservation_bytes=256 << 20,
            gsp_heap_bytes=96 << 20,
            bar1_bytes=256 << 20,
        )
        for t in host.vgpu_types
    )
    encoder = dataclasses.replace(host.vgpu_schedulers[0], engine="nvenc0")
    host = dataclasses.replace(
        host,
        recovery=Recovery("gpu_reset", False, True, False),
        conf_compute=ConfCompute(True, "prod", False, "protected_pcie", False, "amd_sev_snp", True),
        vgpu_instances=vgpus,
        vgpu_types=types,
        vgpu_encoder_schedulers=(encoder,),
        # a GPU instance that hosts MIG-backed vGPUs, with only what the vGPU readers fill
        mig_instances=(MigGpuInstance(id=2, profile_id=9, profile_name="3g.40gb"),),
    )
    host = dataclasses.replace(
        host,
        mig_instances=(
            dataclasses.replace(
                host.mig_instances[0],
                vgpu_heterogeneous_mode=True,
                vgpu_capacity=(GpuInstanceVgpuCapacity(1001, "NVIDIA H100-8C", 2),),
            ),
        ),
    )
    assert host.metering is not None
    host = dataclasses.replace(
        host, metering=dataclasses.replace(host.metering, methods={"vgpu": "vgpu_samples"})
    )
    assert mig.metering is not None
    mig = dataclasses.replace(
        mig,
        recovery=Recovery("none", False, False, True),
        conf_compute=ConfCompute(
            True,
            "prod",
            False,
            "none",
            True,
            protected_memory_total_bytes=70 << 30,
            protected_memory_used_bytes=12 << 30,
            unprotected_memory_bytes=10 << 30,
        ),
        metering=dataclasses.replace(
            mig.metering, methods={"mig": "gpm", "process": "accounting", "pod": "accounting"}
        ),
    )
    guest = dataclasses.replace(
        guest,
        accounting_enabled=True,
        accounting=(AccountingRecord(4242, True, 0.5, 600, 12, 2.4, 1.7e9, 2 << 30),),
    )
    collectors = (
        *snapshot.collectors,
        CollectorStatus("recovery", True, 0.0, unsupported={"function_not_found": 1}),
    )
    return dataclasses.replace(snapshot, gpus=(host, mig, guest, lost), collectors=collectors)


def samples_by_name(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Parse text-format exposition into {sample name: [(labels, value)]}."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lines(text: str) -> Iterator[str]:
    return (line for line in text.splitlines() if line and not line.startswith("#"))


@dataclasses.dataclass
class FixedFeed:
    """A snapshot feed (:class:`vgpumon.feed.SnapshotFeed`) for server tests: ``latest`` is set
    by hand (on the event loop: setting it tells the listeners); ``/-/ready`` says wedged when
    the snapshot is."""

    latest: Snapshot | None = None
    name: str = "test feed"
    listeners: list[Callable[[Snapshot], object]] = dataclasses.field(default_factory=list)

    @property
    def not_ready_reason(self) -> str | None:
        if self.latest is None:
            return "first sampling cycle not done"
        return "sampler wedged" if self.latest.health.wedged else None

    def __setattr__(self, name: str, value: object) -> None:
        # As a real feed does: each new snapshot is told to the listeners (the publisher has no
        # timer of its own to find it).
        object.__setattr__(self, name, value)
        if name == "latest" and isinstance(value, Snapshot):
            for listener in list(getattr(self, "listeners", ())):
                listener(value)

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self.listeners.append(listener)

    def refresh(self) -> None:
        pass

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()
