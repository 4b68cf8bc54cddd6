"""vgpumon / vGPU host: every VM's vGPU on one host, named by its VM."""

from __future__ import annotations

from .common import (
    DRIVER,
    EXPIRY,
    FILLING,
    GPU_KEYS,
    LICENSE_STATES,
    METERING,
    ON_OFF,
    ORANGE_ABOVE_ZERO,
    READY,
    SCOPE_VARIABLES,
    SEL,
    SHARE_STATES,
    VGPU,
    VM_INFO,
    VM_STATES,
    WHO,
    YES_GOOD,
    Board,
    Column,
    Panel,
    Row,
    bargauge_panel,
    by_vm,
    q,
    ratio_panel,
    table_panel,
    timeseries_panel,
)

VM = "{{vm_name}}"
PER_TYPE = (
    f" * on ({GPU_KEYS}, vgpu_type_id) group_left (vgpu_type) vgpumon_vgpu_type_info{{{SEL}}}"
)


# Starvation and contention read the collector's one verdict (docs/verdicts.md): the share state,
# due and received share it exports per vGPU; no query here decides who is starved. "Above due":
# a neighbour that received more than its due by over 1 % of the window (who took the time).
ONE = "instance, job, host, gpu, uuid, gpu_instance, vgpu_id"
SCHED = "instance, job, host, gpu, uuid, gpu_instance"
RECEIVED = f"vgpumon_vgpu_scheduler_received_share_ratio{{{SEL}}}"
DUE = f"vgpumon_vgpu_scheduler_due_share_ratio{{{SEL}}}"
WAITED = f"vgpumon_vgpu_scheduler_waited_share_ratio{{{SEL}}}"
STARVED = f'vgpumon_vgpu_scheduler_share_state{{{SEL}, state="starved"}} == 1'
NO_VERDICT = (
    f"vgpumon_vgpu_scheduler_share_state{{{SEL}, "
    'state=~"short_window|missed_entries|unknown_policy"} == 1'
)
ABOVE = f"(({RECEIVED} - on ({ONE}) {DUE}) > 0.01)"


def _starved(expr: str) -> str:
    return f"({expr}) and on ({ONE}) ({STARVED})"


def _neighbour(expr: str) -> str:
    return f"({expr}) and on ({ONE}) {ABOVE}\nand on ({SCHED}) ({STARVED})"


def _vm_series(title: str, description: str, family: str, unit: str) -> Panel:
    return timeseries_panel(
        title, description, q(by_vm(f"{family}{{{SEL}}}"), VM, VGPU), unit=unit, width=8
    )


BOARD = Board(
    "vgpumon-vgpu-host",
    "vgpumon / vGPU host",
    "One vGPU host: every VM's vGPU (named by the VM through vgpumon_vgpu_info), its engines, "
    "framebuffer, processes, scheduler share against its entitlement, license, frame rate "
    "limit, remote-display capture and live migration, and the capacity left per vGPU type.",
    (*SCOPE_VARIABLES, "gpu", "vm"),
    (
        Row("vGPUs"),
        table_panel(
            "How the GPUs are shared",
            "Per GPU: SR-IOV or not, whether vGPUs of different types may share it "
            "(heterogeneous mode) and whether its vGPUs can be live-migrated (orange: no).",
            q(f"vgpumon_gpu_host_vgpu_mode{{{SEL}}} == 1", "{{mode}}", VGPU, instant=True),
            q(
                f"vgpumon_gpu_vgpu_heterogeneous_mode_enabled{{{SEL}}}",
                "heterogeneous",
                VGPU,
                instant=True,
            ),
            q(f"vgpumon_gpu_vgpu_migration_supported{{{SEL}}}", "migration", VGPU, instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("mode", "vGPU mode"),
                Column("Value #B", "Heterogeneous", mappings=(ON_OFF,)),
                Column("Value #C", "Live migration", mappings=(YES_GOOD,)),
            ),
        ),
        bargauge_panel(
            "vGPUs per GPU",
            "vGPUs running on each GPU.",
            q(
                f"vgpumon_gpu_vgpu_instances{{{SEL}}}",
                f"{WHO} GPU {{{{gpu}}}}",
                VGPU,
                instant=True,
            ),
            width=12,
        ),
        table_panel(
            "vGPUs and their VMs",
            "Every vGPU with its VM (name from libvirt or the kubelet where enabled, else NVML's "
            "VM id), type, guest driver, SR-IOV virtual function and placement.",
            q(VM_INFO, VM, VGPU, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("vgpu_type", "vGPU type"),
                Column("vgpu_class", "Class"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("gpu_instance", "GPU instance"),
                Column("placement_id", "Placement"),
                Column("guest_driver_version", "Guest driver"),
                Column("vf_pci_bus_id", "Virtual function"),
            ),
            width=24,
        ),
        table_panel(
            "VM state",
            "State of the libvirt domain holding each vGPU (serve --libvirt.uri): a paused or "
            "crashed VM still holds its vGPU.",
            q(by_vm(f"vgpumon_vgpu_vm_state{{{SEL}}} == 1"), VM, VGPU, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("state", "State", mappings=(VM_STATES,)),
            ),
        ),
        table_panel(
            "Live migration by VM",
            "Whether each vGPU can be live-migrated with its VM (orange: no; the GPU's own "
            "support is in the first table), and whether this host's side is ready to move it "
            "now (red: not; the capacity dashboard says why).",
            q(by_vm(f"vgpumon_vgpu_migration_supported{{{SEL}}}"), VM, VGPU, instant=True),
            q(by_vm(f"vgpumon_vgpu_migration_ready{{{SEL}}}"), f"{VM} ready", VGPU, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("vgpu_type", "vGPU type"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("Value #A", "Live migration", mappings=(YES_GOOD,)),
                Column("Value #B", "Ready to move", mappings=(READY,)),
            ),
        ),
        Row("Engines and memory"),
        ratio_panel(
            "SM engine utilization by VM",
            "Share of the GPU's 3D/compute engine each VM's vGPU used.",
            q(by_vm(f"vgpumon_vgpu_utilization_ratio{{{SEL}}}"), VM, VGPU),
        ),
        ratio_panel(
            "Memory controller utilization by VM",
            "Share of the GPU's memory bandwidth each VM's vGPU used.",
            q(by_vm(f"vgpumon_vgpu_memory_utilization_ratio{{{SEL}}}"), VM, VGPU),
        ),
        ratio_panel(
            "Encoder and decoder utilization by VM",
            "Share of the video encoder and decoder each VM's vGPU used.",
            q(by_vm(f"vgpumon_vgpu_encoder_utilization_ratio{{{SEL}}}"), f"{VM} enc", VGPU),
            q(by_vm(f"vgpumon_vgpu_decoder_utilization_ratio{{{SEL}}}"), f"{VM} dec", VGPU),
        ),
        timeseries_panel(
            "Framebuffer used by VM",
            "GPU memory each VM's guest uses.",
            q(by_vm(f"vgpumon_vgpu_framebuffer_used_bytes{{{SEL}}}"), VM, VGPU),
            unit="bytes",
        ),
        timeseries_panel(
            "Framebuffer used by VM (of its vGPU)",
            "Fraction of its vGPU's framebuffer each guest uses; the nearly-full alert fires "
            "above 95 %.",
            q(by_vm(f"vgpumon:vgpu_framebuffer_used:ratio{{{SEL}}}"), VM, VGPU),
            unit="percentunit",
            max=1,
            thresholds=FILLING,
        ),
        ratio_panel(
            "SM utilization by process in the VMs",
            "Processes inside each VM as the host sees them (per-process series, serve "
            "--process-series).",
            q(
                by_vm(f"vgpumon_vgpu_process_sm_utilization_ratio{{{SEL}}}"),
                f"{VM} {{{{process_name}}}} ({{{{pid}}}})",
                VGPU,
            ),
        ),
        ratio_panel(
            "Memory, encoder and decoder utilization by process in the VMs",
            "Memory bandwidth, encoder and decoder share of each process inside the VMs "
            "(serve --process-series).",
            q(
                by_vm(f"vgpumon_vgpu_process_memory_utilization_ratio{{{SEL}}}"),
                f"{VM} {{{{process_name}}}} ({{{{pid}}}}) memory",
                VGPU,
            ),
            q(
                by_vm(f"vgpumon_vgpu_process_encoder_utilization_ratio{{{SEL}}}"),
                f"{VM} {{{{process_name}}}} ({{{{pid}}}}) enc",
                VGPU,
            ),
            q(
                by_vm(f"vgpumon_vgpu_process_decoder_utilization_ratio{{{SEL}}}"),
                f"{VM} {{{{process_name}}}} ({{{{pid}}}}) dec",
                VGPU,
            ),
        ),
        Row("Scheduler"),
        ratio_panel(
            "Share received against due",
            "Part of the last minute each vGPU ran on the engine (scheduler log) and the part its "
            "policy makes it due (equal or fixed share; best effort: an equal part of those that "
            "wanted the engine), as the exporter decides them (docs/verdicts.md).",
            q(by_vm(RECEIVED), f"{VM} received", VGPU),
            q(by_vm(DUE), f"{VM} due", VGPU),
            width=12,
        ),
        ratio_panel(
            "Run and waited time",
            "From the scheduler log's counters over the rate window (which may be longer than "
            "the verdict's minute): the part of the time each vGPU ran, and the part it was "
            "preempted with work left.",
            q(
                by_vm(f"rate(vgpumon_vgpu_scheduler_run_seconds_total{{{SEL}}}[$__rate_interval])"),
                f"{VM} ran",
                VGPU,
            ),
            q(
                by_vm(
                    "rate(vgpumon_vgpu_scheduler_preemption_seconds_total"
                    f"{{{SEL}}}[$__rate_interval])"
                ),
                f"{VM} waited",
                VGPU,
            ),
            width=12,
        ),
        ratio_panel(
            "Encoder share",
            "The part of a video encoder engine each vGPU received over the verdict's window, "
            "was held off it with work left, and the share its policy makes it due (per-engine "
            "scheduler logs, R590+): on VDI and streaming hosts the encoder, not the graphics "
            "engine, is what VMs fight over.",
            q(
                by_vm(f"vgpumon_vgpu_encoder_received_share_ratio{{{SEL}}}"),
                f"{VM} {{{{engine}}}} received",
                DRIVER,
            ),
            q(
                by_vm(f"vgpumon_vgpu_encoder_waited_share_ratio{{{SEL}}}"),
                f"{VM} {{{{engine}}}} held off",
                DRIVER,
            ),
            q(
                by_vm(f"vgpumon_vgpu_encoder_due_share_ratio{{{SEL}}}"),
                f"{VM} {{{{engine}}}} due",
                DRIVER,
            ),
            width=12,
        ),
        ratio_panel(
            "Encoder time",
            "Each vGPU's time on a video encoder engine, and held off it, per second (the "
            "engines' scheduler-log counters).",
            q(
                by_vm(
                    "rate(vgpumon_vgpu_encoder_scheduler_run_seconds_total"
                    f"{{{SEL}}}[$__rate_interval])"
                ),
                f"{VM} {{{{engine}}}} ran",
                DRIVER,
            ),
            q(
                by_vm(
                    "rate(vgpumon_vgpu_encoder_scheduler_preemption_seconds_total"
                    f"{{{SEL}}}[$__rate_interval])"
                ),
                f"{VM} {{{{engine}}}} held off",
                DRIVER,
            ),
            width=6,
        ),
        table_panel(
            "Encoder verdicts",
            "Per vGPU and encoder engine, the collector's verdict on its share against its due "
            "(the one starvation rule, docs/verdicts.md): starved, ok, or why there is none yet.",
            q(
                by_vm(f"vgpumon_vgpu_encoder_share_state{{{SEL}}} == 1"),
                VM,
                DRIVER,
                instant=True,
            ),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("engine", "Engine"),
                Column("state", "Verdict", mappings=(SHARE_STATES,)),
            ),
            width=6,
        ),
        table_panel(
            "Scheduler policy",
            "Policy of each GPU (or GPU instance), adaptive round-robin, its averaging factor "
            "and the scheduling frequency where the driver reports it.",
            q(f"vgpumon_vgpu_scheduler_policy{{{SEL}}} == 1", "{{policy}}", VGPU, instant=True),
            q(f"vgpumon_vgpu_scheduler_arr_enabled{{{SEL}}}", "ARR", VGPU, instant=True),
            q(f"vgpumon_vgpu_scheduler_average_factor{{{SEL}}}", "factor", VGPU, instant=True),
            q(f"vgpumon_vgpu_scheduler_frequency_hertz{{{SEL}}}", "frequency", VGPU, instant=True),
            q(
                f"vgpumon_vgpu_scheduler_share_window_seconds{{{SEL}}}",
                "verdict window",
                VGPU,
                instant=True,
            ),
            columns=(
                Column("gpu", "GPU"),
                Column("gpu_instance", "GPU instance"),
                Column("policy", "Policy"),
                Column("Value #B", "Adaptive round-robin", mappings=(ON_OFF,)),
                Column("Value #C", "Averaging factor"),
                Column("Value #D", "Frequency", unit="hertz"),
                Column("Value #E", "Share verdict window", unit="s"),
            ),
            width=8,
        ),
        timeseries_panel(
            "Time slice",
            "The scheduler's time slice and the shortest and longest it accepts.",
            q(f"vgpumon_vgpu_scheduler_timeslice_seconds{{{SEL}}}", f"{WHO} GPU {{{{gpu}}}}", VGPU),
            q(
                f"vgpumon_vgpu_scheduler_min_timeslice_seconds{{{SEL}}}",
                f"{WHO} GPU {{{{gpu}}}} shortest",
                VGPU,
            ),
            q(
                f"vgpumon_vgpu_scheduler_max_timeslice_seconds{{{SEL}}}",
                f"{WHO} GPU {{{{gpu}}}} longest",
                VGPU,
            ),
            unit="s",
            width=8,
        ),
        timeseries_panel(
            "Scheduler log entries",
            "Entries read per second, and entries overwritten before they were read (above 0: "
            "run shares are understated; dashed line).",
            q(
                f"rate(vgpumon_vgpu_scheduler_log_entries_total{{{SEL}}}[$__rate_interval])",
                f"{WHO} GPU {{{{gpu}}}} read/s",
                VGPU,
            ),
            q(
                "increase(vgpumon_vgpu_scheduler_log_entries_missed_total"
                f"{{{SEL}}}[$__rate_interval])",
                f"{WHO} GPU {{{{gpu}}}} missed",
                VGPU,
            ),
            thresholds=ORANGE_ABOVE_ZERO,
            width=8,
        ),
        table_panel(
            "Starved vGPUs",
            "vGPUs the exporter calls starved (the rule of docs/verdicts.md, the alert's too): "
            "over the last minute they waited for the engine (preempted with work left) yet "
            "received under 90 % of their due. The neighbours that took the time are in the next "
            "table.",
            q(by_vm(_starved(RECEIVED)), VM, METERING, instant=True),
            q(by_vm(_starved(DUE)), VM, METERING, instant=True),
            q(by_vm(_starved(WAITED)), VM, METERING, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("Value #A", "Received", unit="percentunit"),
                Column("Value #B", "Due", unit="percentunit"),
                Column("Value #C", "Waited", unit="percentunit"),
            ),
        ),
        table_panel(
            "Neighbours above their due",
            "On a GPU (or GPU instance) with a starved vGPU, the other vGPUs that received more "
            "than their due in the same window, and by how much: who took the starved vGPU's time.",
            q(by_vm(_neighbour(RECEIVED)), VM, METERING, instant=True),
            q(by_vm(_neighbour(DUE)), VM, METERING, instant=True),
            q(by_vm(_neighbour(f"{RECEIVED} - on ({ONE}) {DUE}")), VM, METERING, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("Value #A", "Received", unit="percentunit"),
                Column("Value #B", "Due", unit="percentunit"),
                Column("Value #C", "Above due", unit="percentunit"),
            ),
        ),
        table_panel(
            "vGPUs without a share verdict",
            "vGPUs the exporter cannot judge now, and why: short_window (less than half a minute "
            "of counters: just started, or a new vGPU), missed_entries (the scheduler log lost "
            "entries in the window: sample more often) or unknown_policy.",
            q(by_vm(NO_VERDICT), VM, METERING, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("state", "Why no verdict"),
            ),
        ),
        Row("Licenses and frame rate"),
        table_panel(
            "License state by VM",
            "The license state of every guest as the host sees it (red: unlicensed; orange: "
            "grace period). vGPUs without a guest driver have none.",
            q(by_vm(f"vgpumon_vgpu_license_state{{{SEL}}} == 1"), VM, VGPU, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("vgpu_type", "vGPU type"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("state", "License", mappings=(LICENSE_STATES,)),
            ),
        ),
        table_panel(
            "Time to license expiry",
            "Time left on each guest's license (red within a day or past, orange within the "
            "alert's 7 days). Absent for licenses without an expiry.",
            q(
                by_vm(f"vgpumon_vgpu_license_expiry_timestamp_seconds{{{SEL}}} - time()"),
                VM,
                VGPU,
                instant=True,
            ),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("Value", "Expires in", unit="s", thresholds=EXPIRY),
            ),
        ),
        timeseries_panel(
            "Frame rate limit by VM",
            "Frames per second the frame rate limiter allows; absent where it is off.",
            q(by_vm(f"vgpumon_vgpu_frame_rate_limit{{{SEL}}}"), VM, VGPU),
            width=8,
        ),
        _vm_series(
            "Encoder sessions by VM",
            "Active hardware encoder sessions of each VM.",
            "vgpumon_vgpu_encoder_sessions",
            "none",
        ),
        _vm_series(
            "Encoder frame rate by VM",
            "Average frames per second over the VM's active encoder sessions.",
            "vgpumon_vgpu_encoder_average_fps",
            "none",
        ),
        _vm_series(
            "Encoder latency by VM",
            "Average encode latency of the VM's sessions.",
            "vgpumon_vgpu_encoder_average_latency_seconds",
            "s",
        ),
        ratio_panel(
            "Encoder capacity by VM",
            "Share of the encoder each vGPU may use.",
            q(by_vm(f"vgpumon_vgpu_encoder_capacity_ratio{{{SEL}}}"), VM, VGPU),
            width=8,
        ),
        _vm_series(
            "Frame buffer capture sessions by VM",
            "Active frame buffer capture (FBC) sessions: remote-display protocols grabbing the "
            "guest's screen.",
            "vgpumon_vgpu_fbc_sessions",
            "none",
        ),
        _vm_series(
            "Frame buffer capture rate by VM",
            "Average frames per second over the VM's FBC sessions.",
            "vgpumon_vgpu_fbc_average_fps",
            "none",
        ),
        _vm_series(
            "Frame buffer capture latency by VM",
            "Average capture latency of the VM's FBC sessions.",
            "vgpumon_vgpu_fbc_average_latency_seconds",
            "s",
        ),
        timeseries_panel(
            "Live-migration payload",
            "Bytes a live migration of each vGPU would move now (its runtime state, framebuffer "
            "in use included): with the link's bandwidth, how long the move takes. Absent "
            "before R565.",
            q(by_vm(f"vgpumon_vgpu_migration_state_bytes{{{SEL}}}"), VM, VGPU, DRIVER),
            unit="bytes",
            width=24,
        ),
        Row("Capacity"),
        bargauge_panel(
            "vGPUs that still fit, by type",
            "How many more vGPUs of each type the GPU can take now.",
            q(
                f"vgpumon_vgpu_type_creatable_instances{{{SEL}}}{PER_TYPE}",
                f"{WHO} GPU {{{{gpu}}}} {{{{vgpu_type}}}}",
                VGPU,
                instant=True,
            ),
            width=12,
        ),
        table_panel(
            "vGPUs running and maximum, by type",
            "Per GPU and vGPU type: whether one more can be created now (orange: no), running, "
            "the most that fit, and one vGPU's framebuffer.",
            q(
                f"vgpumon_vgpu_type_active_instances{{{SEL}}}{PER_TYPE}",
                "running",
                VGPU,
                instant=True,
            ),
            q(f"vgpumon_vgpu_type_max_instances{{{SEL}}}{PER_TYPE}", "max", VGPU, instant=True),
            q(
                f"vgpumon_vgpu_type_framebuffer_bytes{{{SEL}}}{PER_TYPE}",
                "framebuffer",
                VGPU,
                instant=True,
            ),
            q(f"vgpumon_vgpu_type_creatable{{{SEL}}}{PER_TYPE}", "creatable", VGPU, instant=True),
            columns=(
                Column("gpu", "GPU"),
                Column("vgpu_type", "vGPU type"),
                Column("Value #D", "Can create one now", mappings=(YES_GOOD,)),
                Column("Value #A", "Running"),
                Column("Value #B", "Maximum"),
                Column("Value #C", "Framebuffer", unit="bytes"),
            ),
        ),
        table_panel(
            "What one vGPU takes, by type",
            "Per vGPU type, what the driver reserves beyond the vGPU's framebuffer (its "
            "reservation and GSP heap: together the type's real footprint) and its BAR1 "
            "aperture (R550+).",
            q(
                f"vgpumon_vgpu_type_framebuffer_bytes{{{SEL}}}{PER_TYPE}",
                "framebuffer",
                DRIVER,
                instant=True,
            ),
            q(
                f"vgpumon_vgpu_type_framebuffer_reservation_bytes{{{SEL}}}{PER_TYPE}",
                "reservation",
                DRIVER,
                instant=True,
            ),
            q(
                f"vgpumon_vgpu_type_gsp_heap_bytes{{{SEL}}}{PER_TYPE}",
                "gsp",
                DRIVER,
                instant=True,
            ),
            q(f"vgpumon_vgpu_type_bar1_bytes{{{SEL}}}{PER_TYPE}", "bar1", DRIVER, instant=True),
            columns=(
                Column("gpu", "GPU"),
                Column("vgpu_type", "vGPU type"),
                Column("Value #A", "Framebuffer", unit="bytes"),
                Column("Value #B", "Reservation", unit="bytes"),
                Column("Value #C", "GSP heap", unit="bytes"),
                Column("Value #D", "BAR1", unit="bytes"),
            ),
        ),
        table_panel(
            "MIG-backed vGPUs per GPU instance",
            "Per GPU instance of a MIG vGPU host: vGPUs running in it, whether it mixes vGPU "
            "sizes, and how many more of each type fit there now (GB20x time-sliced MIG-backed "
            "vGPUs, R575+).",
            q(f"vgpumon_mig_vgpu_instances{{{SEL}}}", "running", DRIVER, instant=True),
            q(
                f"vgpumon_mig_vgpu_heterogeneous_mode_enabled{{{SEL}}}",
                "mixed",
                DRIVER,
                instant=True,
            ),
            q(
                f"vgpumon_mig_vgpu_type_creatable_instances{{{SEL}}}{PER_TYPE}",
                "fits",
                DRIVER,
                instant=True,
            ),
            columns=(
                Column("gpu", "GPU"),
                Column("gpu_instance", "GPU instance"),
                Column("Value #A", "Running"),
                Column("Value #B", "Mixed sizes", mappings=(ON_OFF,)),
                Column("vgpu_type", "vGPU type"),
                Column("Value #C", "More that fit"),
            ),
            width=24,
        ),
    ),
)
