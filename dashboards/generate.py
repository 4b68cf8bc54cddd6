"""Generate vgpumon's Grafana dashboards (dashboards/grafana/*.json) from the definitions below.

Run ``python dashboards/generate.py`` after editing this file; tests/dashboards checks that the
committed JSON is exactly what this script writes, runs every query against a real Prometheus
scraping simulated hosts, and checks every metric name against vgpumon's metric table.

Each query names the *scenario kinds* it is meant for (``VGPU``, ``MIG``, ``BARE``, ``LICENSE``):
the end-to-end test asserts that the query returns data on a simulated host of each kind it names.
Plain JSON and the standard library only, so that anyone can read and run this without a Grafana
SDK. Units are Grafana's names for vgpumon's base units: ratios 0-1 as ``percentunit``, bytes,
watts, hertz, celsius, seconds, joules.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "grafana"
SCHEMA_VERSION = 41  # Grafana 12
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Scenario kinds (tests/dashboards maps each to a built-in simulator scenario).
VGPU, MIG, BARE, LICENSE = "vgpu", "mig", "baremetal", "license"
ALL = (VGPU, MIG, BARE)

# Selectors shared by the queries; $instance, $gpu and $vm are the dashboards' variables.
HOST = 'instance=~"$instance"'
SEL = f'{HOST}, gpu=~"$gpu"'
VGPU_KEYS = "instance, job, gpu, uuid, vgpu_id"


def by_vm(expr: str) -> str:
    """Name each vGPU series by its VM: join the labels of vgpumon_vgpu_info onto it."""
    return (
        f"({expr})\n* on ({VGPU_KEYS}) group_left (vm_id, vgpu_type)\n"
        f'vgpumon_vgpu_info{{{HOST}, vm_id=~"$vm"}}'
    )


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    kinds: tuple[str, ...]  # scenario kinds where this query must return data
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str  # timeseries | stat | heatmap | table | state-timeline | bargauge | piechart
    unit: str
    queries: tuple[Query, ...]
    description: str = ""
    width: int = 12
    height: int = 8
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Row:
    title: str


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    variables: tuple[str, ...]  # of "instance", "gpu", "vm"
    items: tuple[Panel | Row, ...] = field(default_factory=tuple)

    def queries(self) -> Iterator[tuple[Panel, Query]]:
        for item in self.items:
            if isinstance(item, Panel):
                for query in item.queries:
                    yield item, query


def q(expr: str, legend: str, *kinds: str, instant: bool = False) -> Query:
    return Query(expr, legend, kinds or ALL, instant)


def ratio(title: str, *queries: Query, description: str = "", **kw: Any) -> Panel:
    return Panel(title, "timeseries", "percentunit", queries, description, min=0, max=1, **kw)


# --------------------------------------------------------------------------- dashboards

FLEET = Dashboard(
    "vgpumon-fleet",
    "vgpumon / Fleet overview",
    "Every host vgpumon watches: GPUs by virtualization mode, utilization and memory, power, "
    "lost GPUs, Xids, license problems and exporter health at a glance.",
    ("instance",),
    (
        Row("At a glance"),
        Panel(
            "Hosts",
            "stat",
            "none",
            (q(f"count(vgpumon_up{{{HOST}}})", "hosts", instant=True),),
            "Hosts whose exporter Prometheus scrapes.",
            width=4,
            height=4,
        ),
        Panel(
            "Exporters up",
            "stat",
            "none",
            (q(f'sum(up{{job=~".*vgpumon.*", {HOST}}})', "up", instant=True),),
            "Scrape targets that answered the last scrape.",
            width=4,
            height=4,
        ),
        Panel(
            "GPUs",
            "stat",
            "none",
            (q(f"count(vgpumon_gpu_info{{{HOST}}})", "GPUs", instant=True),),
            width=4,
            height=4,
        ),
        Panel(
            "Lost GPUs",
            "stat",
            "none",
            (q(f"count(vgpumon_gpu_up{{{HOST}}} == 0) or vector(0)", "lost", instant=True),),
            "GPUs that stopped answering NVML (lost or hung).",
            width=4,
            height=4,
        ),
        Panel(
            "Xid errors in range",
            "stat",
            "none",
            (
                q(
                    f"sum(increase(vgpumon_gpu_xid_errors_total{{{HOST}}}[$__range]))",
                    "Xids",
                    instant=True,
                ),
            ),
            "Xid errors of every GPU over the dashboard's time range.",
            width=4,
            height=4,
        ),
        Panel(
            "Unlicensed vGPUs",
            "stat",
            "none",
            (
                q(
                    f'count(vgpumon_vgpu_license_state{{{HOST}, state=~"unlicensed.*"}} == 1)'
                    " or vector(0)",
                    "unlicensed",
                    VGPU,
                    instant=True,
                ),
            ),
            "vGPUs whose guest holds no license (grace period or restricted).",
            width=4,
            height=4,
        ),
        Panel(
            "GPUs by virtualization mode",
            "piechart",
            "none",
            (
                q(
                    f"count by (mode) (vgpumon_gpu_virtualization_mode{{{HOST}}} == 1)",
                    "{{mode}}",
                    instant=True,
                ),
            ),
            "none: bare metal; passthrough: a whole GPU in a VM; host_vgpu: shared by vGPUs.",
            width=8,
        ),
        Panel(
            "Exporter health",
            "table",
            "none",
            (
                q(f"vgpumon_up{{{HOST}}}", "NVML up", instant=True),
                q(f"vgpumon_sampler_wedged{{{HOST}}}", "wedged", instant=True),
                q(
                    f"time() - vgpumon_last_sample_timestamp_seconds{{{HOST}}}",
                    "sample age",
                    instant=True,
                ),
            ),
            "Per host: NVML up (1), sampler wedged (1 is bad), age of the served sample.",
            width=16,
        ),
        Row("Utilization and memory"),
        Panel(
            "GPU utilization",
            "heatmap",
            "percentunit",
            (q(f"vgpumon_gpu_utilization_ratio{{{HOST}}}", "{{instance}} GPU {{gpu}}"),),
            "Distribution of GPU utilization over all GPUs (MIG-enabled GPUs report none).",
        ),
        Panel(
            "GPU memory used",
            "heatmap",
            "percentunit",
            (q(f"vgpumon:gpu_memory_used:ratio{{{HOST}}}", "{{instance}} GPU {{gpu}}"),),
            "Distribution of framebuffer use over all GPUs.",
        ),
        ratio(
            "Mean utilization by host",
            q(f"avg by (instance) (vgpumon_gpu_utilization_ratio{{{HOST}}})", "{{instance}}"),
        ),
        Panel(
            "Power by host",
            "timeseries",
            "watt",
            (q(f"sum by (instance) (vgpumon_gpu_power_watts{{{HOST}}})", "{{instance}}"),),
            min=0,
        ),
        Row("Problems"),
        Panel(
            "Firing alerts",
            "table",
            "none",
            (
                q(
                    f'ALERTS{{alertname=~"Vgpumon.*", alertstate="firing", {HOST}}}',
                    "{{alertname}}",
                    BARE,
                    instant=True,
                ),
            ),
            "vgpumon's alerts (packaging/prometheus/vgpumon.rules.yml) firing now, with their "
            "labels; each alert's runbook is in docs/runbooks.md.",
            width=24,
        ),
        Panel(
            "Lost GPUs",
            "table",
            "none",
            (
                q(
                    f"(vgpumon_gpu_up{{{HOST}}} == 0)"
                    " * on (instance, job, gpu, uuid) group_left (name, pci_bus_id)"
                    f" vgpumon_gpu_info{{{HOST}}}"
                    f" or (vgpumon_gpu_up{{{HOST}}} == 1)",
                    "{{instance}} GPU {{gpu}}",
                    instant=True,
                ),
            ),
            "GPUs and whether they answer (0: lost or hung, with name and PCI address).",
        ),
        Panel(
            "Xid errors by number",
            "timeseries",
            "none",
            (
                q(
                    f"sum by (instance, gpu, xid) "
                    f"(increase(vgpumon_gpu_xid_errors_total{{{HOST}}}[$__rate_interval]))",
                    "{{instance}} GPU {{gpu}} Xid {{xid}}",
                ),
            ),
            min=0,
        ),
        Panel(
            "vGPU license states",
            "bargauge",
            "none",
            (
                q(
                    f"count by (state) (vgpumon_vgpu_license_state{{{HOST}}} == 1)",
                    "{{state}}",
                    VGPU,
                    instant=True,
                ),
            ),
        ),
    ),
)

VGPU_HOST = Dashboard(
    "vgpumon-vgpu-host",
    "vgpumon / vGPU host",
    "One vGPU host: every VM's vGPU (named by the VM through vgpumon_vgpu_info), its engines, "
    "framebuffer, scheduler share against its entitlement, license and frame rate limit, and the "
    "capacity left per vGPU type.",
    ("instance", "gpu", "vm"),
    (
        Row("vGPUs"),
        Panel(
            "How the GPUs are shared",
            "table",
            "none",
            (
                q(
                    f"vgpumon_gpu_host_vgpu_mode{{{SEL}}} == 1",
                    "GPU {{gpu}} {{mode}}",
                    VGPU,
                    instant=True,
                ),
                q(
                    f"vgpumon_gpu_vgpu_heterogeneous_mode_enabled{{{SEL}}}",
                    "GPU {{gpu}} heterogeneous",
                    VGPU,
                    instant=True,
                ),
            ),
            "SR-IOV or not, and whether vGPUs of different types may share a GPU.",
            width=8,
        ),
        Panel(
            "vGPUs per GPU",
            "bargauge",
            "none",
            (q(f"vgpumon_gpu_vgpu_instances{{{SEL}}}", "GPU {{gpu}}", VGPU, instant=True),),
            width=8,
        ),
        Panel(
            "vGPUs and their VMs",
            "table",
            "none",
            (
                q(
                    f'vgpumon_vgpu_info{{{SEL}, vm_id=~"$vm"}}',
                    "{{vm_id}}",
                    VGPU,
                    instant=True,
                ),
            ),
            "vGPU type, class, VM, guest driver and placement of every vGPU.",
            width=16,
        ),
        ratio(
            "SM engine utilization by VM",
            q(by_vm(f"vgpumon_vgpu_utilization_ratio{{{SEL}}}"), "{{vm_id}}", VGPU),
        ),
        ratio(
            "Memory controller utilization by VM",
            q(by_vm(f"vgpumon_vgpu_memory_utilization_ratio{{{SEL}}}"), "{{vm_id}}", VGPU),
        ),
        ratio(
            "Encoder and decoder utilization by VM",
            q(by_vm(f"vgpumon_vgpu_encoder_utilization_ratio{{{SEL}}}"), "{{vm_id}} enc", VGPU),
            q(by_vm(f"vgpumon_vgpu_decoder_utilization_ratio{{{SEL}}}"), "{{vm_id}} dec", VGPU),
        ),
        Panel(
            "Framebuffer used by VM",
            "timeseries",
            "bytes",
            (q(by_vm(f"vgpumon_vgpu_framebuffer_used_bytes{{{SEL}}}"), "{{vm_id}}", VGPU),),
            min=0,
        ),
        ratio(
            "Framebuffer used by VM (of its vGPU)",
            q(by_vm(f"vgpumon:vgpu_framebuffer_used:ratio{{{SEL}}}"), "{{vm_id}}", VGPU),
        ),
        Row("Scheduler"),
        ratio(
            "Run share against entitlement",
            q(
                by_vm(f"vgpumon:vgpu_scheduler_run_share:rate5m{{{SEL}}}"),
                "{{vm_id}} ran",
                VGPU,
            ),
            q(
                by_vm(f"vgpumon:vgpu_scheduler_entitled_share:ratio{{{SEL}}}"),
                "{{vm_id}} entitled",
                VGPU,
            ),
            description="Fraction of time each vGPU ran (scheduler log) and the share its policy "
            "entitles it to (equal or fixed share; best effort entitles to nothing).",
            width=24,
        ),
        Panel(
            "Scheduler policy",
            "table",
            "none",
            (
                q(
                    f"vgpumon_vgpu_scheduler_policy{{{SEL}}} == 1",
                    "GPU {{gpu}} {{policy}}",
                    VGPU,
                    instant=True,
                ),
                q(
                    f"vgpumon_vgpu_scheduler_arr_enabled{{{SEL}}}",
                    "GPU {{gpu}} ARR",
                    VGPU,
                    instant=True,
                ),
            ),
            width=8,
        ),
        Panel(
            "Time slice",
            "timeseries",
            "s",
            (q(f"vgpumon_vgpu_scheduler_timeslice_seconds{{{SEL}}}", "GPU {{gpu}}", VGPU),),
            width=8,
        ),
        Panel(
            "Scheduler log entries missed",
            "timeseries",
            "none",
            (
                q(
                    "increase(vgpumon_vgpu_scheduler_log_entries_missed_total"
                    f"{{{SEL}}}[$__rate_interval])",
                    "GPU {{gpu}}",
                    VGPU,
                ),
            ),
            "Entries overwritten before they were read: run shares are understated.",
            width=8,
        ),
        Row("Licenses and frame rate"),
        Panel(
            "License state by VM",
            "table",
            "none",
            (
                q(
                    by_vm(f"vgpumon_vgpu_license_state{{{SEL}}} == 1"),
                    "{{vm_id}}",
                    VGPU,
                    instant=True,
                ),
            ),
            "The current license state of every guest (vGPUs without a guest driver have none).",
        ),
        Panel(
            "Time to license expiry",
            "table",
            "s",
            (
                q(
                    by_vm(f"vgpumon_vgpu_license_expiry_timestamp_seconds{{{SEL}}} - time()"),
                    "{{vm_id}}",
                    LICENSE,
                    instant=True,
                ),
            ),
            "Absent for licenses without an expiry.",
        ),
        Panel(
            "Frame rate limit by VM",
            "timeseries",
            "none",
            (q(by_vm(f"vgpumon_vgpu_frame_rate_limit{{{SEL}}}"), "{{vm_id}}", VGPU),),
            "Frames per second; absent where the limiter is off.",
        ),
        Panel(
            "Encoder sessions by VM",
            "timeseries",
            "none",
            (q(by_vm(f"vgpumon_vgpu_encoder_sessions{{{SEL}}}"), "{{vm_id}}", VGPU),),
        ),
        Panel(
            "Encoder frame rate by VM",
            "timeseries",
            "none",
            (q(by_vm(f"vgpumon_vgpu_encoder_average_fps{{{SEL}}}"), "{{vm_id}}", VGPU),),
            "Average frames per second over the VM's active encoder sessions.",
        ),
        Panel(
            "Encoder latency by VM",
            "timeseries",
            "s",
            (
                q(
                    by_vm(f"vgpumon_vgpu_encoder_average_latency_seconds{{{SEL}}}"),
                    "{{vm_id}}",
                    VGPU,
                ),
            ),
        ),
        Row("Capacity"),
        Panel(
            "vGPUs that still fit, by type",
            "bargauge",
            "none",
            (
                q(
                    f"vgpumon_vgpu_type_creatable_instances{{{SEL}}}"
                    " * on (instance, job, gpu, uuid, vgpu_type_id) group_left (vgpu_type)"
                    f" vgpumon_vgpu_type_info{{{SEL}}}",
                    "GPU {{gpu}} {{vgpu_type}}",
                    VGPU,
                    instant=True,
                ),
            ),
            "How many more vGPUs of each type the GPU can take now.",
        ),
        Panel(
            "vGPUs running and maximum, by type",
            "table",
            "none",
            (
                q(
                    f"vgpumon_vgpu_type_active_instances{{{SEL}}}"
                    " * on (instance, job, gpu, uuid, vgpu_type_id) group_left (vgpu_type)"
                    f" vgpumon_vgpu_type_info{{{SEL}}}",
                    "GPU {{gpu}} {{vgpu_type}} running",
                    VGPU,
                    instant=True,
                ),
                q(
                    f"vgpumon_vgpu_type_max_instances{{{SEL}}}"
                    " * on (instance, job, gpu, uuid, vgpu_type_id) group_left (vgpu_type)"
                    f" vgpumon_vgpu_type_info{{{SEL}}}",
                    "GPU {{gpu}} {{vgpu_type}} max",
                    VGPU,
                    instant=True,
                ),
            ),
        ),
    ),
)

MIG_DASH = Dashboard(
    "vgpumon-mig",
    "vgpumon / MIG",
    "MIG GPU instances: memory, GPM SM, DRAM and tensor activity, and their compute instances.",
    ("instance", "gpu"),
    (
        Panel(
            "MIG mode",
            "stat",
            "none",
            (q(f"vgpumon_gpu_mig_mode_enabled{{{SEL}}}", "GPU {{gpu}}", MIG, instant=True),),
            "1: MIG enabled now.",
            width=8,
            height=4,
        ),
        Panel(
            "Compute instances",
            "table",
            "none",
            (q(f"vgpumon_mig_instance_info{{{SEL}}}", "{{mig_uuid}}", MIG, instant=True),),
            "Every compute instance with its GPU instance profile, MIG UUID and placement.",
            width=16,
            height=8,
        ),
        Panel(
            "GPU instance memory used",
            "timeseries",
            "bytes",
            (
                q(
                    f"vgpumon_mig_memory_used_bytes{{{SEL}}}",
                    "GPU {{gpu}} GI {{gpu_instance}}",
                    MIG,
                ),
                q(
                    f"vgpumon_mig_memory_total_bytes{{{SEL}}}",
                    "GPU {{gpu}} GI {{gpu_instance}} total",
                    MIG,
                ),
            ),
            min=0,
        ),
        ratio(
            "GPU instance memory used (of the instance)",
            q(f"vgpumon:mig_memory_used:ratio{{{SEL}}}", "GPU {{gpu}} GI {{gpu_instance}}", MIG),
        ),
        ratio(
            "SM active by GPU instance",
            q(f"vgpumon_mig_sm_active_ratio{{{SEL}}}", "GPU {{gpu}} GI {{gpu_instance}}", MIG),
            description="GPM (Hopper and newer).",
        ),
        ratio(
            "SM occupancy by GPU instance",
            q(f"vgpumon_mig_sm_occupancy_ratio{{{SEL}}}", "GPU {{gpu}} GI {{gpu_instance}}", MIG),
        ),
        ratio(
            "DRAM active by GPU instance",
            q(f"vgpumon_mig_dram_active_ratio{{{SEL}}}", "GPU {{gpu}} GI {{gpu_instance}}", MIG),
        ),
        ratio(
            "Tensor active by GPU instance",
            q(
                f"vgpumon_mig_tensor_active_ratio{{{SEL}}}",
                "GPU {{gpu}} GI {{gpu_instance}}",
                MIG,
            ),
        ),
        ratio(
            "Pipe activity by GPU instance",
            q(
                f"vgpumon_mig_pipe_active_ratio{{{SEL}}}",
                "GPU {{gpu}} GI {{gpu_instance}} {{pipe}}",
                MIG,
            ),
            description="Floating-point pipes (FP16, FP32, FP64, tensor) of each GPU instance.",
            width=24,
        ),
    ),
)

GPU_DETAIL = Dashboard(
    "vgpumon-gpu",
    "vgpumon / GPU detail",
    "Everything one physical GPU shows: utilization, memory, power and energy, temperatures, "
    "clocks and why they are held down, ECC and remapped rows, PCIe, GPM and Xids.",
    ("instance", "gpu"),
    (
        Panel(
            "GPU",
            "table",
            "none",
            (
                q(
                    f"vgpumon_gpu_info{{{SEL}}}"
                    f" * on (instance, job, gpu, uuid) group_left () vgpumon_gpu_up{{{SEL}}}",
                    "GPU {{gpu}}",
                    instant=True,
                ),
            ),
            "Identity of the GPU; the value is 1 while it answers, 0 when lost or hung.",
            width=24,
            height=5,
        ),
        Row("Load"),
        ratio(
            "Utilization",
            q(f"vgpumon_gpu_utilization_ratio{{{SEL}}}", "GPU {{gpu}} kernel"),
            q(f"vgpumon_gpu_memory_utilization_ratio{{{SEL}}}", "GPU {{gpu}} memory", VGPU, BARE),
            q(f"vgpumon_gpu_encoder_utilization_ratio{{{SEL}}}", "GPU {{gpu}} encoder"),
            q(f"vgpumon_gpu_decoder_utilization_ratio{{{SEL}}}", "GPU {{gpu}} decoder"),
        ),
        Panel(
            "Framebuffer",
            "timeseries",
            "bytes",
            (
                q(f"vgpumon_gpu_memory_used_bytes{{{SEL}}}", "GPU {{gpu}} used"),
                q(f"vgpumon_gpu_memory_reserved_bytes{{{SEL}}}", "GPU {{gpu}} reserved"),
                q(f"vgpumon_gpu_memory_total_bytes{{{SEL}}}", "GPU {{gpu}} total"),
                q(f"vgpumon_gpu_bar1_memory_used_bytes{{{SEL}}}", "GPU {{gpu}} BAR1 used"),
            ),
            min=0,
        ),
        ratio(
            "GPM activity",
            q(f"vgpumon_gpu_sm_active_ratio{{{SEL}}}", "GPU {{gpu}} SM active", MIG, BARE),
            q(f"vgpumon_gpu_sm_occupancy_ratio{{{SEL}}}", "GPU {{gpu}} SM occupancy", MIG, BARE),
            q(f"vgpumon_gpu_tensor_active_ratio{{{SEL}}}", "GPU {{gpu}} tensor", MIG, BARE),
            q(f"vgpumon_gpu_dram_active_ratio{{{SEL}}}", "GPU {{gpu}} DRAM", MIG, BARE),
            description="GPU performance monitoring (Hopper and newer).",
        ),
        ratio(
            "GPM pipe and graphics activity",
            q(f"vgpumon_gpu_pipe_active_ratio{{{SEL}}}", "GPU {{gpu}} {{pipe}}", MIG, BARE),
            q(f"vgpumon_gpu_graphics_active_ratio{{{SEL}}}", "GPU {{gpu}} graphics", MIG, BARE),
        ),
        Panel(
            "Modes",
            "table",
            "none",
            (
                q(f"vgpumon_gpu_virtualization_mode{{{SEL}}} == 1", "{{mode}}", instant=True),
                q(f"vgpumon_gpu_compute_mode{{{SEL}}} == 1", "{{mode}}", instant=True),
                q(f"vgpumon_gpu_persistence_mode_enabled{{{SEL}}}", "persistence", instant=True),
                q(f"vgpumon_gpu_ecc_mode_enabled{{{SEL}}}", "ECC", instant=True),
                q(f"vgpumon_gpu_ecc_mode_pending{{{SEL}}}", "ECC pending", instant=True),
                q(f"vgpumon_gpu_mig_mode_enabled{{{SEL}}}", "MIG", instant=True),
                q(f"vgpumon_gpu_mig_mode_pending{{{SEL}}}", "MIG pending", instant=True),
            ),
            "Virtualization and compute mode, and the modes that change at the next reset or "
            "reboot (pending).",
        ),
        Panel(
            "Compute processes",
            "timeseries",
            "none",
            (q(f"vgpumon_gpu_processes{{{SEL}}}", "GPU {{gpu}}"),),
            min=0,
        ),
        Row("Power, temperature and clocks"),
        Panel(
            "Power",
            "timeseries",
            "watt",
            (
                q(f"vgpumon_gpu_power_watts{{{SEL}}}", "GPU {{gpu}} draw"),
                q(f"vgpumon_gpu_power_limit_watts{{{SEL}}}", "GPU {{gpu}} limit"),
                q(
                    f"rate(vgpumon_gpu_energy_joules_total{{{SEL}}}[$__rate_interval])",
                    "GPU {{gpu}} from energy",
                ),
            ),
            min=0,
        ),
        Panel(
            "Energy in range",
            "stat",
            "joule",
            (
                q(
                    f"increase(vgpumon_gpu_energy_joules_total{{{SEL}}}[$__range])",
                    "GPU {{gpu}}",
                    instant=True,
                ),
            ),
        ),
        Panel(
            "Temperature",
            "timeseries",
            "celsius",
            (q(f"vgpumon_gpu_temperature_celsius{{{SEL}}}", "GPU {{gpu}} {{sensor}}"),),
        ),
        Panel(
            "Clocks",
            "timeseries",
            "hertz",
            (
                q(f"vgpumon_gpu_clock_hertz{{{SEL}}}", "GPU {{gpu}} {{clock}}"),
                q(f"vgpumon_gpu_max_clock_hertz{{{SEL}}}", "GPU {{gpu}} {{clock}} max"),
            ),
            min=0,
        ),
        Panel(
            "Why the clocks are held down",
            "state-timeline",
            "none",
            (q(f"vgpumon_gpu_clock_event_active{{{SEL}}}", "GPU {{gpu}} {{reason}}"),),
            "1 while the reason holds the clocks down (idle and the power cap are normal).",
            width=24,
        ),
        Panel(
            "Performance state",
            "timeseries",
            "none",
            (q(f"vgpumon_gpu_performance_state{{{SEL}}}", "GPU {{gpu}} P"),),
            "0 = P0, the fastest.",
        ),
        Row("Errors"),
        Panel(
            "ECC errors",
            "timeseries",
            "none",
            (
                q(f"vgpumon_gpu_ecc_errors_total{{{SEL}}}", "GPU {{gpu}} {{type}} (lifetime)"),
                q(
                    f"vgpumon_gpu_ecc_volatile_errors_total{{{SEL}}}",
                    "GPU {{gpu}} {{type}} (since driver load)",
                ),
            ),
            min=0,
        ),
        Panel(
            "Remapped rows",
            "timeseries",
            "none",
            (
                q(f"vgpumon_gpu_remapped_rows{{{SEL}}}", "GPU {{gpu}} {{kind}}"),
                q(f"vgpumon_gpu_remapped_rows_pending{{{SEL}}}", "GPU {{gpu}} pending"),
                q(f"vgpumon_gpu_remapped_rows_failed{{{SEL}}}", "GPU {{gpu}} failed"),
            ),
            min=0,
        ),
        Panel(
            "Xid errors",
            "timeseries",
            "none",
            (
                q(
                    f"increase(vgpumon_gpu_xid_errors_total{{{SEL}}}[$__rate_interval])",
                    "GPU {{gpu}} Xid {{xid}}",
                ),
            ),
            min=0,
        ),
        Row("PCIe"),
        Panel(
            "PCIe link",
            "timeseries",
            "none",
            (
                q(f"vgpumon_gpu_pcie_link_generation{{{SEL}}}", "GPU {{gpu}} generation"),
                q(f"vgpumon_gpu_pcie_link_width{{{SEL}}}", "GPU {{gpu}} lanes"),
            ),
            "A link below its generation or width slows every transfer.",
            width=8,
        ),
        Panel(
            "PCIe replays",
            "timeseries",
            "none",
            (
                q(
                    f"increase(vgpumon_gpu_pcie_replay_errors_total{{{SEL}}}[$__rate_interval])",
                    "GPU {{gpu}}",
                ),
            ),
            "Link-level retransmissions: a rising count points at the slot or riser.",
            width=8,
        ),
        Panel(
            "PCIe throughput",
            "timeseries",
            "Bps",
            (
                q(
                    f"vgpumon_gpu_gpm_pcie_throughput_bytes_per_second{{{SEL}}}",
                    "GPU {{gpu}} {{direction}}",
                    MIG,
                    BARE,
                ),
            ),
            "Measured by GPM over its interval (Hopper and newer), without a blocking call.",
            width=8,
        ),
    ),
)

EXPORTER = Dashboard(
    "vgpumon-exporter",
    "vgpumon / Exporter health",
    "The exporter itself: scrape up, NVML up, wedged sampler, cycle duration, per-collector "
    "success and duration, NVML errors by function.",
    ("instance",),
    (
        Panel(
            "Scrape up",
            "state-timeline",
            "none",
            (q(f'up{{job=~".*vgpumon.*", {HOST}}}', "{{instance}}"),),
            width=8,
        ),
        Panel(
            "NVML up",
            "state-timeline",
            "none",
            (q(f"vgpumon_up{{{HOST}}}", "{{instance}}"),),
            width=8,
        ),
        Panel(
            "Sampler wedged",
            "state-timeline",
            "none",
            (q(f"vgpumon_sampler_wedged{{{HOST}}}", "{{instance}}"),),
            width=8,
        ),
        Panel(
            "Sampling cycle duration",
            "timeseries",
            "s",
            (q(f"vgpumon_sampler_last_cycle_duration_seconds{{{HOST}}}", "{{instance}}"),),
            min=0,
        ),
        Panel(
            "Age of the served sample",
            "timeseries",
            "s",
            (q(f"time() - vgpumon_last_sample_timestamp_seconds{{{HOST}}}", "{{instance}}"),),
            min=0,
        ),
        Panel(
            "Cycles per second",
            "timeseries",
            "none",
            (
                q(
                    f"rate(vgpumon_sampler_cycles_total{{{HOST}}}[$__rate_interval])",
                    "{{instance}}",
                ),
                q(
                    f"rate(vgpumon_sampler_cycles_abandoned_total{{{HOST}}}[$__rate_interval])",
                    "{{instance}} abandoned",
                ),
            ),
            min=0,
        ),
        Panel(
            "Collector success",
            "state-timeline",
            "none",
            (
                q(
                    f"vgpumon_scrape_collector_success{{{HOST}}}",
                    "{{instance}} {{collector}}",
                ),
            ),
        ),
        Panel(
            "Collector duration",
            "timeseries",
            "s",
            (
                q(
                    f"vgpumon_scrape_collector_duration_seconds{{{HOST}}}",
                    "{{instance}} {{collector}}",
                ),
            ),
            "Time each collector took in the last cycle, summed over GPUs.",
            min=0,
        ),
        Panel(
            "NVML errors by function",
            "timeseries",
            "none",
            (
                q(
                    "sum by (instance, function, error) "
                    f"(increase(vgpumon_nvml_errors_total{{{HOST}}}[$__rate_interval]))",
                    "{{instance}} {{function}} {{error}}",
                    VGPU,
                ),
            ),
            "Failed NVML calls (an unsupported call counts once per GPU).",
        ),
        Panel(
            "Versions",
            "table",
            "none",
            (q(f"vgpumon_driver_info{{{HOST}}}", "{{instance}}", instant=True),),
            "NVIDIA driver, NVML and CUDA driver versions per host.",
        ),
    ),
)

DASHBOARDS = (FLEET, VGPU_HOST, MIG_DASH, GPU_DETAIL, EXPORTER)

# --------------------------------------------------------------------------- JSON

VARIABLES = {
    "instance": ("Host", "label_values(vgpumon_up, instance)"),
    "gpu": ("GPU", 'label_values(vgpumon_gpu_info{instance=~"$instance"}, gpu)'),
    "vm": ("VM", 'label_values(vgpumon_vgpu_info{instance=~"$instance"}, vm_id)'),
}


def variable_json(name: str) -> dict[str, Any]:
    label, query = VARIABLES[name]
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "query": query,  # the classic string form: every Grafana version reads it
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "sort": 3,
        "options": [],
    }


def templating(dashboard: Dashboard) -> dict[str, Any]:
    datasource = {
        "name": "datasource",
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "refresh": 1,
        "options": [],
    }
    return {"list": [datasource, *(variable_json(v) for v in dashboard.variables)]}


def target_json(query: Query, ref: str) -> dict[str, Any]:
    return {
        "datasource": DATASOURCE,
        "expr": query.expr,
        "legendFormat": query.legend,
        "instant": query.instant,
        "range": not query.instant,
        "format": "table" if query.instant else "time_series",
        "refId": ref,
    }


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    result: dict[str, Any] = {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {},
        "targets": [target_json(query, chr(ord("A") + i)) for i, query in enumerate(panel.queries)],
    }
    if panel.kind == "heatmap":
        result["options"] = {
            "calculate": True,
            "yAxis": {"unit": panel.unit},
            "color": {"mode": "scheme", "scheme": "Oranges"},
        }
    if panel.kind == "table":
        result["transformations"] = [{"id": "merge", "options": {}}]
    return result


def dashboard_json(dashboard: Dashboard) -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    x = y = row_height = 0
    for number, item in enumerate(dashboard.items, start=1):
        if isinstance(item, Row):
            y += row_height
            x = row_height = 0
            panels.append(
                {
                    "id": number,
                    "type": "row",
                    "title": item.title,
                    "collapsed": False,
                    "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                    "panels": [],
                }
            )
            y += 1
            continue
        if x + item.width > 24:
            y += row_height
            x = row_height = 0
        panels.append(panel_json(item, number, x, y))
        x += item.width
        row_height = max(row_height, item.height)
    links = [
        {
            "type": "dashboards",
            "tags": ["vgpumon"],
            "asDropdown": True,
            "title": "vgpumon",
            "includeVars": True,
            "keepTime": True,
        }
    ]
    return {
        "uid": dashboard.uid,
        "title": dashboard.title,
        "description": dashboard.description,
        "tags": ["vgpumon", "nvidia", "gpu"],
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "links": links,
        "templating": templating(dashboard),
        "panels": panels,
    }


def file_name(dashboard: Dashboard) -> str:
    return f"{dashboard.uid}.json"


def render(dashboard: Dashboard) -> str:
    return json.dumps(dashboard_json(dashboard), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for dashboard in DASHBOARDS:
        (OUT / file_name(dashboard)).write_text(render(dashboard), encoding="utf-8")
        print(f"wrote {OUT / file_name(dashboard)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
