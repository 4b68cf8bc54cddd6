"""vgpumon / GPU detail: everything one physical GPU shows."""

from __future__ import annotations

from .common import (
    ALL,
    BARE,
    CURRENT,
    DRIVER,
    EXPIRY,
    FILLING,
    GPU_KEYS,
    GUEST,
    HOST,
    LICENSE_STATES,
    LOST_OK,
    MIG,
    NVLINK,
    ON_OFF,
    ORANGE_ABOVE_ZERO,
    READY,
    RED_ABOVE_ZERO,
    RENEWAL,
    SCOPE_VARIABLES,
    SEL,
    UP_DOWN,
    VGPU,
    WHO,
    YES_BAD,
    YES_WARN,
    Board,
    Column,
    Row,
    q,
    ratio_panel,
    stat_panel,
    state_panel,
    table_panel,
    timeseries_panel,
)

G = f"{WHO} GPU {{{{gpu}}}}"
PROC = f"{G} {{{{process_name}}}} ({{{{pid}}}})"
POD = f"{G} {{{{namespace}}}}/{{{{pod}}}} {{{{container}}}}"
LINK = f"{G} link {{{{link}}}}"

BOARD = Board(
    "vgpumon-gpu",
    "vgpumon / GPU detail",
    "Everything one physical GPU shows: utilization, memory, processes and pods, power and "
    "energy, temperatures, fans, clocks and why they are held down, ECC and remapped rows, "
    "PCIe, NVLink, GPM, Xids and the licenses a guest holds.",
    (*SCOPE_VARIABLES, "gpu"),
    (
        table_panel(
            "GPU",
            "Identity of each GPU and whether it answers NVML (red: lost or hung).",
            q(
                f"vgpumon_gpu_info{{{SEL}}}"
                f" * on ({GPU_KEYS}) group_left () vgpumon_gpu_up{{{SEL}}}",
                G,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("name", "Model"),
                Column("architecture", "Architecture"),
                Column("pci_bus_id", "PCI address"),
                Column("serial", "Serial"),
                Column("uuid", "UUID"),
                Column("Value", "NVML", mappings=(LOST_OK,)),
            ),
            width=24,
            height=5,
        ),
        Row("Load"),
        ratio_panel(
            "Utilization",
            "Kernel, memory controller, encoder and decoder utilization of the GPU.",
            q(f"vgpumon_gpu_utilization_ratio{{{SEL}}}", f"{G} kernel"),
            q(f"vgpumon_gpu_memory_utilization_ratio{{{SEL}}}", f"{G} memory", VGPU, BARE),
            q(f"vgpumon_gpu_encoder_utilization_ratio{{{SEL}}}", f"{G} encoder"),
            q(f"vgpumon_gpu_decoder_utilization_ratio{{{SEL}}}", f"{G} decoder"),
        ),
        timeseries_panel(
            "Framebuffer",
            "Framebuffer in use (with what MIG-backed vGPUs' guests hold), used as NVML says, "
            "free, reserved by the driver and total; BAR1 (the CPU's window into GPU memory) "
            "used, free and total.",
            q(f"vgpumon_gpu_memory_in_use_bytes{{{SEL}}}", f"{G} in use"),
            q(f"vgpumon_gpu_memory_used_bytes{{{SEL}}}", f"{G} used"),
            q(f"vgpumon_gpu_memory_free_bytes{{{SEL}}}", f"{G} free"),
            q(f"vgpumon_gpu_memory_reserved_bytes{{{SEL}}}", f"{G} reserved"),
            q(f"vgpumon_gpu_memory_total_bytes{{{SEL}}}", f"{G} total"),
            q(f"vgpumon_gpu_bar1_memory_used_bytes{{{SEL}}}", f"{G} BAR1 used"),
            q(f"vgpumon_gpu_bar1_memory_free_bytes{{{SEL}}}", f"{G} BAR1 free"),
            q(f"vgpumon_gpu_bar1_memory_total_bytes{{{SEL}}}", f"{G} BAR1 total"),
            unit="bytes",
        ),
        ratio_panel(
            "GPM activity",
            "GPU performance monitoring (Hopper and newer): SM activity and occupancy, tensor "
            "and DRAM activity.",
            q(f"vgpumon_gpu_sm_active_ratio{{{SEL}}}", f"{G} SM active", MIG, BARE),
            q(f"vgpumon_gpu_sm_occupancy_ratio{{{SEL}}}", f"{G} SM occupancy", MIG, BARE),
            q(f"vgpumon_gpu_tensor_active_ratio{{{SEL}}}", f"{G} tensor", MIG, BARE),
            q(f"vgpumon_gpu_dram_active_ratio{{{SEL}}}", f"{G} DRAM", MIG, BARE),
        ),
        ratio_panel(
            "GPM pipe and graphics activity",
            "Floating-point pipes and the graphics engine (GPM, Hopper and newer).",
            q(f"vgpumon_gpu_pipe_active_ratio{{{SEL}}}", f"{G} {{{{pipe}}}}", MIG, BARE),
            q(f"vgpumon_gpu_graphics_active_ratio{{{SEL}}}", f"{G} graphics", MIG, BARE),
        ),
        table_panel(
            "Modes",
            "Virtualization and compute mode, persistence, ECC and MIG, and the modes that "
            "change at the next reset or reboot (pending: orange).",
            q(f"vgpumon_gpu_virtualization_mode{{{SEL}}} == 1", "{{mode}}", instant=True),
            q(
                f"label_replace(vgpumon_gpu_compute_mode{{{SEL}}} == 1,"
                ' "compute_mode", "$1", "mode", "(.*)")',
                "{{compute_mode}}",
                instant=True,
            ),
            q(f"vgpumon_gpu_persistence_mode_enabled{{{SEL}}}", "persistence", instant=True),
            q(f"vgpumon_gpu_ecc_mode_enabled{{{SEL}}}", "ECC", instant=True),
            q(f"vgpumon_gpu_ecc_mode_pending{{{SEL}}}", "ECC pending", instant=True),
            q(f"vgpumon_gpu_mig_mode_enabled{{{SEL}}}", "MIG", instant=True),
            q(f"vgpumon_gpu_mig_mode_pending{{{SEL}}}", "MIG pending", instant=True),
            columns=(
                Column("gpu", "GPU"),
                Column("mode", "Virtualization"),
                Column("compute_mode", "Compute mode"),
                Column("Value #C", "Persistence", mappings=(ON_OFF,)),
                Column("Value #D", "ECC", mappings=(ON_OFF,)),
                Column("Value #E", "ECC pending", mappings=(ON_OFF,)),
                Column("Value #F", "MIG", mappings=(ON_OFF,)),
                Column("Value #G", "MIG pending", mappings=(ON_OFF,)),
            ),
        ),
        timeseries_panel(
            "Compute processes",
            "Processes running on the GPU.",
            q(f"vgpumon_gpu_processes{{{SEL}}}", G),
        ),
        Row("Processes and pods"),
        ratio_panel(
            "SM utilization by process",
            "Per-process series (serve --process-series): each process's share of the SMs.",
            q(f"vgpumon_process_sm_utilization_ratio{{{SEL}}}", PROC, BARE),
        ),
        timeseries_panel(
            "GPU memory by process",
            "Framebuffer each process holds (serve --process-series).",
            q(f"vgpumon_process_memory_used_bytes{{{SEL}}}", PROC, MIG, BARE),
            unit="bytes",
        ),
        ratio_panel(
            "Memory, encoder and decoder utilization by process",
            "Each process's share of memory bandwidth, encoder and decoder "
            "(serve --process-series).",
            q(f"vgpumon_process_memory_utilization_ratio{{{SEL}}}", f"{PROC} memory", BARE),
            q(f"vgpumon_process_encoder_utilization_ratio{{{SEL}}}", f"{PROC} enc", BARE),
            q(f"vgpumon_process_decoder_utilization_ratio{{{SEL}}}", f"{PROC} dec", BARE),
        ),
        stat_panel(
            "Process series truncated",
            "Whether some processes got no series because of --process-series-max (orange: raise "
            "it or expect missing processes).",
            q(f"vgpumon_process_series_truncated{{{HOST}}}", WHO, BARE, instant=True),
            mappings=(YES_WARN,),
            width=4,
            height=8,
        ),
        ratio_panel(
            "Utilization by pod",
            "The device each container holds (whole GPU, vGPU or MIG instance), from the kubelet "
            "(serve --kubernetes.socket --kubernetes.pod-series).",
            q(f"vgpumon_pod_gpu_utilization_ratio{{{SEL}}}", POD, VGPU),
            width=10,
        ),
        timeseries_panel(
            "GPU memory by pod",
            "Memory of the device each container holds (--kubernetes.pod-series).",
            q(f"vgpumon_pod_gpu_memory_used_bytes{{{SEL}}}", POD, VGPU),
            unit="bytes",
            width=10,
        ),
        Row("Power, temperature and clocks"),
        timeseries_panel(
            "Power",
            "Power draw, the enforced limit, and the draw computed from the energy counter.",
            q(f"vgpumon_gpu_power_watts{{{SEL}}}", f"{G} draw"),
            q(f"vgpumon_gpu_power_limit_watts{{{SEL}}}", f"{G} limit"),
            q(
                f"rate(vgpumon_gpu_energy_joules_total{{{SEL}}}[$__rate_interval])",
                f"{G} from energy",
            ),
            unit="watt",
        ),
        stat_panel(
            "Energy in range",
            "Energy each GPU used over the dashboard's time range.",
            q(
                f"increase(vgpumon_gpu_energy_joules_total{{{SEL}}}[$__range])",
                G,
                instant=True,
            ),
            unit="joule",
            width=12,
            height=8,
        ),
        timeseries_panel(
            "Temperature",
            "GPU and memory temperature, and the slowdown and shutdown thresholds where the "
            "driver reports them.",
            q(f"vgpumon_gpu_temperature_celsius{{{SEL}}}", f"{G} {{{{sensor}}}}"),
            unit="celsius",
            min=None,
        ),
        timeseries_panel(
            "Fan speed",
            "Fan speed as a fraction of its maximum; passive boards (most data-center GPUs) "
            "have no fan and no series. Near full: check airflow.",
            q(f"vgpumon_gpu_fan_speed_ratio{{{SEL}}}", G, BARE),
            unit="percentunit",
            max=1,
            thresholds=FILLING,
        ),
        timeseries_panel(
            "Clocks",
            "Current clocks and their maxima.",
            q(f"vgpumon_gpu_clock_hertz{{{SEL}}}", f"{G} {{{{clock}}}}"),
            q(f"vgpumon_gpu_max_clock_hertz{{{SEL}}}", f"{G} {{{{clock}}}} max"),
            unit="hertz",
        ),
        timeseries_panel(
            "Performance state",
            "0 = P0, the fastest.",
            q(f"vgpumon_gpu_performance_state{{{SEL}}}", f"{G} P"),
        ),
        state_panel(
            "Why the clocks are held down",
            "Red while a reason holds the clocks down; idle and the application setting are "
            "normal, thermal and power reasons are not (their alerts fire after 10 minutes).",
            q(f"vgpumon_gpu_clock_event_active{{{SEL}}}", f"{G} {{{{reason}}}}"),
            mappings=(YES_BAD,),
            width=24,
        ),
        Row("Errors"),
        timeseries_panel(
            "ECC errors",
            "Memory errors counted over the GPU's life and since the driver loaded; "
            "uncorrected ones mean corrupt data (dashed line above 0).",
            q(f"vgpumon_gpu_ecc_errors_total{{{SEL}}}", f"{G} {{{{type}}}} (lifetime)"),
            q(
                f"vgpumon_gpu_ecc_volatile_errors_total{{{SEL}}}",
                f"{G} {{{{type}}}} (since driver load)",
            ),
            thresholds=ORANGE_ABOVE_ZERO,
        ),
        timeseries_panel(
            "Remapped rows",
            "Memory rows remapped to spares, remappings waiting for a reset (pending) and "
            "failed ones (1 is bad).",
            q(f"vgpumon_gpu_remapped_rows{{{SEL}}}", f"{G} {{{{kind}}}}"),
            q(f"vgpumon_gpu_remapped_rows_pending{{{SEL}}}", f"{G} pending"),
            q(f"vgpumon_gpu_remapped_rows_failed{{{SEL}}}", f"{G} failed"),
            thresholds=ORANGE_ABOVE_ZERO,
        ),
        state_panel(
            "What the driver asks for",
            "Red while the driver itself asks for a recovery action (the legend names it: GPU "
            "reset, node reboot, drain...), while a repair waits for the next reset, or when "
            "memory is beyond repair; each has its alert and runbook. Absent on drivers before "
            "R565 (action), R580 (repair) and R590 (memory).",
            q(
                f'vgpumon_gpu_recovery_action{{{SEL}, action!="none"}}',
                f"{G} asks {{{{action}}}}",
                *ALL,
                DRIVER,
            ),
            q(
                f"vgpumon_gpu_repair_pending{{{SEL}}}",
                f"{G} {{{{kind}}}} repair pending",
                *ALL,
                DRIVER,
            ),
            q(f"vgpumon_gpu_unrepairable_memory{{{SEL}}}", f"{G} memory beyond repair", DRIVER),
            mappings=(YES_BAD,),
            width=24,
        ),
        timeseries_panel(
            "Xid errors",
            "Xid errors per interval, only where one happened (the exporter pre-creates every "
            "catalogued Xid at 0); docs/runbooks.md says what each means.",
            q(
                f"increase(vgpumon_gpu_xid_errors_total{{{SEL}}}[$__rate_interval]) > 0",
                f"{G} Xid {{{{xid}}}}",
                BARE,
            ),
            thresholds=RED_ABOVE_ZERO,
            width=24,
        ),
        Row("Confidential computing"),
        state_panel(
            "Confidential computing",
            "Whether CC is on, in developer-tools mode (not a protected setup), and whether the "
            "GPUs accept work (red: attestation has not set them ready; its alert fires after "
            "10 minutes).",
            q(f"vgpumon_gpu_cc_enabled{{{SEL}}}", f"{G} CC", *ALL, DRIVER),
            q(f"vgpumon_gpu_cc_devtools_mode_enabled{{{SEL}}}", f"{G} devtools mode", DRIVER),
            mappings=(ON_OFF,),
            width=8,
        ),
        state_panel(
            "CC GPUs ready",
            "Green once attestation set the GPUs ready for client work.",
            q(
                f"vgpumon_gpu_cc_ready{{{SEL}}} and on ({GPU_KEYS}) vgpumon_gpu_cc_enabled == 1",
                f"{G} ready",
                DRIVER,
            ),
            mappings=(READY,),
            width=8,
        ),
        state_panel(
            "CC environment and multi-GPU mode",
            "The environment (prod, sim, unavailable) and the multi-GPU protection mode "
            "(none, protected PCIe, NVLink encryption).",
            q(
                f"vgpumon_gpu_cc_environment{{{SEL}}} == 1",
                f"{G} {{{{environment}}}}",
                *ALL,
                DRIVER,
            ),
            q(f"vgpumon_gpu_cc_multi_gpu_mode{{{SEL}}} == 1", f"{G} {{{{mode}}}}", *ALL, DRIVER),
            mappings=(CURRENT,),
            width=8,
        ),
        timeseries_panel(
            "CC protected memory",
            "Memory protected by confidential computing and the part in use.",
            q(f"vgpumon_gpu_cc_protected_memory_total_bytes{{{SEL}}}", f"{G} protected", DRIVER),
            q(f"vgpumon_gpu_cc_protected_memory_used_bytes{{{SEL}}}", f"{G} used", DRIVER),
            unit="bytes",
            width=24,
        ),
        Row("PCIe"),
        timeseries_panel(
            "PCIe link",
            "Generation and lanes in use; a link below its maximum slows every transfer.",
            q(f"vgpumon_gpu_pcie_link_generation{{{SEL}}}", f"{G} generation"),
            q(f"vgpumon_gpu_pcie_link_width{{{SEL}}}", f"{G} lanes"),
            width=8,
        ),
        timeseries_panel(
            "PCIe replays",
            "Link-level retransmissions: a rising count points at the slot or riser.",
            q(
                f"increase(vgpumon_gpu_pcie_replay_errors_total{{{SEL}}}[$__rate_interval])",
                G,
            ),
            thresholds=ORANGE_ABOVE_ZERO,
            width=8,
        ),
        timeseries_panel(
            "PCIe throughput",
            "Host-GPU traffic by direction: GPM's measurement on Hopper and newer, else the "
            "driver's counter where serve --pcie-throughput is on (A100, L40S, ...).",
            q(
                f"vgpumon_gpu_gpm_pcie_throughput_bytes_per_second{{{SEL}}}\n"
                f"or vgpumon_gpu_pcie_throughput_bytes_per_second{{{SEL}}}",
                f"{G} {{{{direction}}}}",
                VGPU,
                MIG,
                BARE,
            ),
            unit="Bps",
            width=8,
        ),
        Row("NVLink"),
        state_panel(
            "NVLink link state",
            "Each NVLink link: green while active, red when down (the link-down alert fires "
            "after 5 minutes).",
            q(f"vgpumon_gpu_nvlink_up{{{SEL}}}", LINK, NVLINK),
            mappings=(UP_DOWN,),
            width=24,
        ),
        timeseries_panel(
            "NVLink throughput",
            "Data sent and received per link.",
            q(
                f"rate(vgpumon_gpu_nvlink_data_bytes_total{{{SEL}}}[$__rate_interval])",
                f"{LINK} {{{{direction}}}}",
                NVLINK,
            ),
            unit="Bps",
        ),
        timeseries_panel(
            "NVLink errors",
            "Data-link-layer errors (CRC, replay, recovery) since the driver loaded, only on "
            "links that had one; a rising line is a burst (the error-burst alert fires on it).",
            q(
                f"vgpumon_gpu_nvlink_errors_total{{{SEL}}} > 0",
                f"{LINK} {{{{error}}}}",
                NVLINK,
            ),
            thresholds=RED_ABOVE_ZERO,
        ),
        Row("Licenses inside a guest"),
        table_panel(
            "Guest license state",
            "Licensable features (vWS, vCS, ...) as the guest driver reports them, for a "
            "vgpumon running inside a VM (red: unlicensed).",
            q(
                f"vgpumon_guest_license_state{{{SEL}}} == 1",
                f"{G} {{{{feature}}}}",
                GUEST,
                instant=True,
            ),
            columns=(
                Column("instance", "Guest"),
                Column("gpu", "GPU"),
                Column("feature", "Feature"),
                Column("state", "State", mappings=(LICENSE_STATES,)),
            ),
        ),
        table_panel(
            "Guest license leases",
            "Each feature's license lease inside the guest: when it ends (renewed long before on "
            "a healthy guest) and whether it was renewed when due (red: not renewed; "
            "docs/licensing.md).",
            q(
                f"vgpumon_guest_license_expiry_timestamp_seconds{{{SEL}}} - time()",
                f"{G} {{{{feature}}}}",
                GUEST,
                instant=True,
            ),
            q(
                f"vgpumon_guest_license_renewal_overdue{{{SEL}}}",
                f"{G} {{{{feature}}}} renewal",
                GUEST,
                instant=True,
            ),
            columns=(
                Column("instance", "Guest"),
                Column("gpu", "GPU"),
                Column("feature", "Feature"),
                Column("Value #A", "Lease ends in", unit="s", thresholds=EXPIRY),
                Column("Value #B", "Renewal", mappings=(RENEWAL,)),
            ),
        ),
    ),
)
