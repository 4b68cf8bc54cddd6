"""vgpumon / Fleet overview: every host at a glance, problems first."""

from __future__ import annotations

from .common import (
    BARE,
    GPU_KEYS,
    GREEN_ABOVE_ZERO,
    GUEST,
    HOST,
    LICENSE_STATES,
    LOST,
    NVLINK,
    RED_ABOVE_ZERO,
    SAMPLE_AGE,
    SCOPE,
    SCOPE_VARIABLES,
    UP_DOWN,
    VGPU,
    WHO,
    YES_BAD,
    Board,
    Column,
    Row,
    bargauge_panel,
    heatmap_panel,
    piechart_panel,
    q,
    ratio_panel,
    stat_panel,
    table_panel,
    timeseries_panel,
    vm_info,
)

BOARD = Board(
    "vgpumon-fleet",
    "vgpumon / Fleet overview",
    "Every host vgpumon watches: GPUs by virtualization mode, utilization and memory, power, "
    "lost GPUs, Xids, NVLink and license problems and exporter health at a glance.",
    SCOPE_VARIABLES,
    (
        Row("At a glance"),
        stat_panel(
            "Hosts",
            "Hosts whose exporter Prometheus scrapes (agentless hosts counted one by one). "
            "Red when there are none.",
            q(f"count(vgpumon_up{{{HOST}}}) or vector(0)", "hosts", instant=True),
            thresholds=GREEN_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "Exporters down",
            "Scrape targets that did not answer the last scrape: their GPUs are unwatched. "
            "Red above 0.",
            q(f"count(up{{{SCOPE}}} == 0) or vector(0)", "down", instant=True),
            thresholds=RED_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "GPUs",
            "Physical GPUs the exporters see. Red when there are none.",
            q(f"count(vgpumon_gpu_info{{{HOST}}}) or vector(0)", "GPUs", instant=True),
            thresholds=GREEN_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "Lost GPUs",
            "GPUs that stopped answering NVML (lost or hung). Red above 0.",
            q(f"count(vgpumon_gpu_up{{{HOST}}} == 0) or vector(0)", "lost", instant=True),
            thresholds=RED_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "Xid errors in range",
            "Xid errors of every GPU over the dashboard's time range. Red above 0.",
            q(
                f"sum(increase(vgpumon_gpu_xid_errors_total{{{HOST}}}[$__range])) or vector(0)",
                "Xids",
                instant=True,
            ),
            thresholds=RED_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "NVLink links down",
            "NVLink links that are not active. Red above 0.",
            q(f"count(vgpumon_gpu_nvlink_up{{{HOST}}} == 0) or vector(0)", "down", instant=True),
            thresholds=RED_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "Unlicensed vGPUs",
            "vGPUs whose guest holds no license (grace period or restricted), as the host sees "
            "them. Red above 0.",
            q(
                f'count(vgpumon_vgpu_license_state{{{HOST}, state=~"unlicensed.*"}} == 1)'
                " or vector(0)",
                "unlicensed",
                instant=True,
            ),
            thresholds=RED_ABOVE_ZERO,
            width=3,
        ),
        stat_panel(
            "Unlicensed guest features",
            "Licensable features (vWS, vCS, ...) that a vgpumon inside a VM reports unlicensed. "
            "Red above 0.",
            q(
                f'count(vgpumon_guest_license_state{{{HOST}, state="unlicensed"}} == 1)'
                " or vector(0)",
                "unlicensed",
                instant=True,
            ),
            thresholds=RED_ABOVE_ZERO,
            width=3,
        ),
        piechart_panel(
            "GPUs by virtualization mode",
            "none: bare metal; passthrough: a whole GPU in a VM; host_vgpu: shared by vGPUs.",
            q(
                f"count by (mode) (vgpumon_gpu_virtualization_mode{{{HOST}}} == 1)",
                "{{mode}}",
                instant=True,
            ),
        ),
        table_panel(
            "Exporter health",
            "Per exporter and agentless host: NVML up, sampler wedged and the age of the "
            "served sample (the stale alert fires past 2 minutes).",
            q(f"vgpumon_up{{{HOST}}}", "NVML up", instant=True),
            q(f"vgpumon_sampler_wedged{{{HOST}}}", "wedged", instant=True),
            q(f"time() - vgpumon_last_sample_timestamp_seconds{{{HOST}}}", "age", instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("Value #A", "NVML", mappings=(UP_DOWN,)),
                Column("Value #B", "Sampler wedged", mappings=(YES_BAD,)),
                Column("Value #C", "Sample age", unit="s", thresholds=SAMPLE_AGE),
            ),
            width=16,
        ),
        Row("Utilization and memory"),
        heatmap_panel(
            "GPU utilization",
            "Distribution of GPU utilization over all GPUs (MIG-enabled GPUs report none).",
            q(f"vgpumon_gpu_utilization_ratio{{{HOST}}}", f"{WHO} GPU {{{{gpu}}}}"),
            unit="percentunit",
        ),
        heatmap_panel(
            "GPU memory used",
            "Distribution of framebuffer use over all GPUs.",
            q(f"vgpumon:gpu_memory_used:ratio{{{HOST}}}", f"{WHO} GPU {{{{gpu}}}}"),
            unit="percentunit",
        ),
        ratio_panel(
            "Mean utilization by host",
            "Mean GPU utilization of each exporter's (or agentless host's) GPUs.",
            q(
                f"avg by (instance, host) (vgpumon_gpu_utilization_ratio{{{HOST}}})",
                WHO,
            ),
        ),
        timeseries_panel(
            "Power by host",
            "Power draw of all GPUs of each host.",
            q(f"sum by (instance, host) (vgpumon_gpu_power_watts{{{HOST}}})", WHO),
            unit="watt",
        ),
        Row("Problems"),
        table_panel(
            "Firing alerts",
            "vgpumon's alerts (packaging/prometheus/vgpumon.rules.yml) firing now; the runbook "
            "of each is in docs/runbooks.md.",
            q(
                f'ALERTS{{alertname=~"Vgpumon.*", alertstate="firing", {HOST}}}',
                "{{alertname}}",
                BARE,
                instant=True,
            ),
            columns=(
                Column("alertname", "Alert"),
                Column("severity", "Severity"),
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("xid", "Xid"),
                Column("vgpu_id", "vGPU"),
                Column("link", "NVLink"),
            ),
            width=24,
        ),
        table_panel(
            "Lost GPUs",
            "GPUs that stopped answering NVML (lost or hung), with their name and PCI address. "
            "Empty while every GPU answers.",
            q(
                f"(vgpumon_gpu_up{{{HOST}}} == 0)"
                f" * on ({GPU_KEYS}) group_left (name, pci_bus_id)"
                f" vgpumon_gpu_info{{{HOST}}}",
                f"{WHO} GPU {{{{gpu}}}}",
                LOST,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("name", "Model"),
                Column("pci_bus_id", "PCI address"),
                Column("uuid", "UUID"),
            ),
        ),
        timeseries_panel(
            "Xid errors by number",
            "Xid errors per interval, only for GPUs and Xids that had one (the exporter "
            "pre-creates every catalogued Xid at 0).",
            q(
                "sum by (instance, host, gpu, xid) "
                f"(increase(vgpumon_gpu_xid_errors_total{{{HOST}}}[$__rate_interval])) > 0",
                f"{WHO} GPU {{{{gpu}}}} Xid {{{{xid}}}}",
                BARE,
            ),
        ),
        bargauge_panel(
            "vGPU license states",
            "How many vGPUs are in each license state (host side).",
            q(
                f"count by (state) (vgpumon_vgpu_license_state{{{HOST}}} == 1)",
                "{{state}}",
                VGPU,
                instant=True,
            ),
            width=12,
        ),
        table_panel(
            "NVLink links down",
            "NVLink links that are not active, by GPU.",
            q(
                f"vgpumon_gpu_nvlink_up{{{HOST}}} == 0",
                f"{WHO} GPU {{{{gpu}}}} link {{{{link}}}}",
                NVLINK,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("link", "Link"),
            ),
        ),
        table_panel(
            "Guest licenses",
            "License state of each licensable feature inside VMs that run vgpumon themselves "
            "(the guest's view; the host's view is the vGPU license state).",
            q(
                f"vgpumon_guest_license_state{{{HOST}}} == 1",
                f"{WHO} {{{{feature}}}}",
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
        Row("Who holds the GPUs"),
        table_panel(
            "VMs on vGPUs",
            "Every vGPU with the VM that holds it: its name from libvirt (serve --libvirt.uri) "
            "or from its KubeVirt pod (--kubernetes.socket), else NVML's VM id (docs/names.md).",
            q(vm_info(HOST), f"{WHO} {{{{vm_name}}}}", VGPU, instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("vm_name", "VM"),
                Column("vgpu_type", "vGPU type"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
            ),
        ),
        table_panel(
            "Pods on GPUs (Kubernetes)",
            "Containers holding a GPU, MIG device or vGPU, from the kubelet (serve "
            "--kubernetes.socket); KubeVirt VMs by name.",
            q(
                f'vgpumon_gpu_allocation_info{{{HOST}, pod!=""}}',
                "{{namespace}}/{{pod}}",
                VGPU,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("namespace", "Namespace"),
                Column("pod", "Pod"),
                Column("container", "Container"),
                Column("resource", "Resource"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
            ),
        ),
    ),
)
