"""vgpumon / Usage: who used how much GPU time, memory and energy (docs/metering.md).

Two halves. *Billing* reads the metering rules' hourly series (packaging/prometheus/
vgpumon-metering.rules.yml) summed over the whole hours of the dashboard's range, exactly as
``vgpumon usage`` does, so the dashboard and an invoice agree; those series are fleet-wide (the
rules sum over exporters), so the exporter variables do not narrow them. *On the selected hosts*
reads the usage counters themselves, narrowed by the variables: per vGPU, MIG instance, process and
pod, idle and dead holders, and the energy no tenant was given.
"""

from __future__ import annotations

from .common import (
    DRIVER,
    GPU_KEYS,
    MIG,
    NEUTRAL,
    ON_OFF,
    ORANGE_ABOVE_ZERO,
    RED_ABOVE_ZERO,
    SCOPE_VARIABLES,
    SEL,
    WHO,
    Board,
    Column,
    Panel,
    Row,
    bargauge_panel,
    by_vm,
    q,
    ratio_panel,
    stat_panel,
    table_panel,
    timeseries_panel,
)
from .common import METERING as MET

GIB_HOUR = "(1073741824 * 3600)"
KWH = "3.6e6"
# The subquery step of the range totals: the rules' hour. A hidden constant so that the tests,
# which scale time down (a scrape a second), can scale it too; Grafana users never change it.
HOUR = ("hour", "1h", "The metering rules' hour: range totals sum their hourly series.")
HOUR_SECONDS = ("hour_seconds", "3600", "The metering rules' hour in seconds.")
VM = "{{vm_name}}"
TITLES = {"tenant": "Tenant", "namespace": "Namespace", "vm": "VM", "pod": "Pod"}
POD = "{{namespace}}/{{pod}}"

# How long unused is bad. A vGPU: under an hour is a pause, the alert fires at 4 hours. A process
# holding memory: a few minutes is a job between steps, the alert fires at 30 minutes.
IDLE_VGPU = ((None, "green"), (3600, "orange"), (4 * 3600, "red"))
IDLE_HOLDER = ((None, "green"), (5 * 60, "orange"), (30 * 60, "red"))
# Energy no tenant got: some is expected (idle time when nobody holds memory, processes outside
# pods); most of the GPU's energy unattributed means the split says little about who used it.
UNATTRIBUTED = ((None, "green"), (0.25, "orange"), (0.5, "red"))


def in_range(rule: str) -> str:
    """An hourly series summed over the whole hours of the dashboard's range: the query
    ``vgpumon usage`` runs (vgpumon.sources.usage.query), with the range's start and length.
    Hours are kept by their time, so Prometheus 2.x (which counts a range's left end in) and
    3.x agree."""
    kept = "vector(time()) - ${hour_seconds} >= ${__from:date:seconds}"
    return f"sum_over_time(({rule} and on () {kept})[$__range:$hour])"


QUANTITIES = (
    ("gpu_hours", "GPU-hours", "none"),
    ("memory_gib_hours", "GiB-hours", "none"),
    ("energy_kwh", "kWh", "kwatth"),
)


def billing_table(by: str, labels: tuple[str, ...], title: str, description: str) -> Panel:
    keys = ", ".join(labels)
    return table_panel(
        title,
        description,
        *(
            q(
                f"sum by ({keys}) ({in_range(f'vgpumon:{by}_{quantity}:increase1h')})",
                name,
                MET,
                instant=True,
            )
            for quantity, name, _ in QUANTITIES
        ),
        columns=(
            *(Column(label, TITLES[label]) for label in labels),
            *(
                Column(f"Value #{chr(ord('A') + i)}", name, unit=unit)
                for i, (_, name, unit) in enumerate(QUANTITIES)
            ),
        ),
    )


def total_stat(quantity: str, title: str, unit: str, what: str) -> Panel:
    return stat_panel(
        title,
        f"{what} in the whole hours of the dashboard's range, all tenants (a fact, not a "
        "judgement: one colour).",
        q(f"sum({in_range(f'vgpumon:tenant_{quantity}:increase1h')})", title, MET, instant=True),
        unit=unit,
        thresholds=NEUTRAL,
        width=8,
    )


def top(by: str, quantity: str, legend: str, title: str, unit: str, what: str) -> Panel:
    return bargauge_panel(
        title,
        f"The ten {what} in the whole hours of the dashboard's range.",
        q(
            f"topk(10, {in_range(f'vgpumon:{by}_{quantity}:increase1h')})",
            legend,
            MET,
            instant=True,
        ),
        unit=unit,
    )


VMS = "VMs that used the most GPU time"
PODS = "pods that used the most GPU time"
TENANTS = "tenants given the most energy"


def increase(family: str, scale: str = "") -> str:
    expr = f"increase({family}{{{SEL}}}[$__range])"
    return f"{expr} / {scale}" if scale else expr


BOARD = Board(
    "vgpumon-usage",
    "vgpumon / Usage",
    "Who used how much: GPU-hours, memory GiB-hours and kWh per tenant, namespace, VM and pod "
    "over the dashboard's range (from the metering rules, as vgpumon usage prints for an "
    "invoice), top consumers, and on the selected hosts the usage counters per vGPU, MIG "
    "instance, process and pod, idle and dead holders, and the energy no tenant was given.",
    (*SCOPE_VARIABLES, "gpu", "vm"),
    (
        Row("Billing: whole hours of the range, all exporters (metering rules)"),
        total_stat(
            "gpu_hours", "GPU-hours", "none", "GPU time (one GPU fully busy for an hour: 1)"
        ),
        total_stat("memory_gib_hours", "Memory GiB-hours", "none", "GPU memory held over time"),
        total_stat("energy_kwh", "Energy", "kwatth", "GPU energy given to tenants"),
        billing_table(
            "tenant",
            ("tenant",),
            "By tenant",
            "Per tenant (the mapping of namespaces and VMs in the rules' group "
            "vgpumon.metering.tenants; an unmapped namespace or VM is its own tenant). Sums the "
            "rules' hourly series over the whole hours of the range, as vgpumon usage does.",
        ),
        billing_table(
            "namespace",
            ("namespace",),
            "By namespace",
            "Per Kubernetes namespace: its pods' processes on shared GPUs "
            "(serve --process-series in the host PID namespace).",
        ),
        billing_table(
            "vm",
            ("vm",),
            "By VM",
            "Per VM holding a vGPU: libvirt's or KubeVirt's name where known, else NVML's VM id.",
        ),
        billing_table(
            "pod",
            ("namespace", "pod"),
            "By pod",
            "Per pod: the sum of its containers' processes on shared GPUs.",
        ),
        table_panel(
            "How the busy counters are metered",
            "Per GPU and busy counter, the method it grew by (docs/metering.md gives each "
            "one's error bound): accounting (the driver's per-process integral; turn it on "
            "with nvidia-smi -am 1 to bill processes and pods exactly), accounting_average, "
            "process_samples (cannot bill a time-sliced GPU), vgpu_samples, gpm; and whether "
            "accounting mode is on.",
            q(f"vgpumon_gpu_metering_method{{{SEL}}}", "method", MET, DRIVER, instant=True),
            q(
                f"vgpumon_gpu_accounting_mode_enabled{{{SEL}}}",
                "accounting",
                MET,
                DRIVER,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("gpu", "GPU"),
                Column("counter", "Counter"),
                Column("method", "Method"),
                Column("Value #B", "Accounting mode", mappings=(ON_OFF,)),
            ),
            width=24,
        ),
        Row("Top consumers"),
        top("vm", "gpu_hours", "{{vm}}", "Top VMs by GPU-hours", "none", VMS),
        top("pod", "gpu_hours", POD, "Top pods by GPU-hours", "none", PODS),
        top("tenant", "energy_kwh", "{{tenant}}", "Top tenants by energy", "kwatth", TENANTS),
        timeseries_panel(
            "GPU-hours per hour by tenant",
            "Each point is the GPU time a tenant used in the hour before it (the rules' hourly "
            "series): the shape of demand over the day.",
            q("vgpumon:tenant_gpu_hours:increase1h", "{{tenant}}", MET),
        ),
        timeseries_panel(
            "Energy per hour by tenant",
            "Each point is the energy a tenant was given in the hour before it.",
            q("vgpumon:tenant_energy_kwh:increase1h", "{{tenant}}", MET),
            unit="kwatth",
        ),
        Row("Usage on the selected hosts (usage counters)"),
        ratio_panel(
            "GPU busy by VM",
            "Share of the GPU each VM's vGPU kept busy (rate of its busy seconds: SM utilization "
            "integrated at the sampling cadence).",
            q(by_vm(f"rate(vgpumon_vgpu_busy_seconds_total{{{SEL}}}[$__rate_interval])"), VM, MET),
        ),
        timeseries_panel(
            "Power by tenant",
            "Each VM's and pod's share of the GPU's power (rate of their energy counters: busy "
            "time first, idle power by framebuffer held; docs/metering.md).",
            q(
                by_vm(f"rate(vgpumon_vgpu_energy_joules_total{{{SEL}}}[$__rate_interval])"),
                VM,
                MET,
            ),
            q(
                "sum by (namespace, pod) "
                f"(rate(vgpumon_pod_energy_joules_total{{{SEL}}}[$__rate_interval]))",
                POD,
                MET,
            ),
            q(
                f"rate(vgpumon_mig_energy_joules_total{{{SEL}}}[$__rate_interval])",
                f"{WHO} GPU {{{{gpu}}}} instance {{{{gpu_instance}}}}",
                MIG,
            ),
            unit="watt",
        ),
        table_panel(
            "vGPUs: usage in range",
            "Per vGPU over the dashboard's range, from its counters: GPU-hours (SM utilization x "
            "time), GiB-hours of framebuffer used, and its share of the GPU's energy.",
            q(by_vm(increase("vgpumon_vgpu_busy_seconds_total", "3600")), VM, MET, instant=True),
            q(
                by_vm(increase("vgpumon_vgpu_framebuffer_byte_seconds_total", GIB_HOUR)),
                VM,
                MET,
                instant=True,
            ),
            q(by_vm(increase("vgpumon_vgpu_energy_joules_total", KWH)), VM, MET, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("Value #A", "GPU-hours"),
                Column("Value #B", "GiB-hours"),
                Column("Value #C", "kWh", unit="kwatth"),
            ),
        ),
        table_panel(
            "MIG instances: usage in range",
            "Per MIG GPU instance over the range: SM-hours in the instance's own SMs (GPM SM "
            "activity x time: a 3g instance fully busy for an hour is 1, as a 7g), GiB-hours of "
            "its memory used, and its share of the GPU's energy.",
            q(increase("vgpumon_mig_sm_active_seconds_total", "3600"), "SM", MIG, instant=True),
            q(
                increase("vgpumon_mig_memory_byte_seconds_total", GIB_HOUR),
                "memory",
                MIG,
                instant=True,
            ),
            q(increase("vgpumon_mig_energy_joules_total", KWH), "energy", MIG, instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("gpu", "GPU"),
                Column("gpu_instance", "GPU instance"),
                Column("Value #A", "SM-hours"),
                Column("Value #B", "GiB-hours"),
                Column("Value #C", "kWh", unit="kwatth"),
            ),
        ),
        table_panel(
            "Processes: usage in range",
            "Per GPU process over the range (serve --process-series): GPU-hours (its SM "
            "utilization x time) and GiB-hours of memory held.",
            q(increase("vgpumon_process_busy_seconds_total", "3600"), "busy", MET, instant=True),
            q(
                increase("vgpumon_process_memory_byte_seconds_total", GIB_HOUR),
                "memory",
                MET,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("gpu", "GPU"),
                Column("pid", "PID"),
                Column("process_name", "Process"),
                Column("Value #A", "GPU-hours"),
                Column("Value #B", "GiB-hours"),
            ),
        ),
        table_panel(
            "Pods: usage in range",
            "Per container on a shared GPU over the range (its processes mapped through their "
            "cgroups; needs the host PID namespace): GPU-hours, GiB-hours and its share of the "
            "GPU's energy.",
            q(increase("vgpumon_pod_busy_seconds_total", "3600"), "busy", MET, instant=True),
            q(
                increase("vgpumon_pod_memory_byte_seconds_total", GIB_HOUR),
                "memory",
                MET,
                instant=True,
            ),
            q(increase("vgpumon_pod_energy_joules_total", KWH), "energy", MET, instant=True),
            columns=(
                Column("namespace", "Namespace"),
                Column("pod", "Pod"),
                Column("container", "Container"),
                Column("gpu", "GPU"),
                Column("Value #A", "GPU-hours"),
                Column("Value #B", "GiB-hours"),
                Column("Value #C", "kWh", unit="kwatth"),
            ),
        ),
        Row("Idle and dead holders"),
        table_panel(
            "Idle vGPUs",
            "vGPUs that are licensed and whose VM runs, yet stayed under the idle SM ratio "
            "(--metering.idle-ratio) without a break: they hold a license and framebuffer others "
            "could use. Green under an hour, orange from an hour, red from the alert's 4 hours.",
            q(by_vm(f"vgpumon_vgpu_idle_seconds{{{SEL}}} > 0"), VM, MET, instant=True),
            columns=(
                Column("vm_name", "VM"),
                Column("vgpu_type", "vGPU type"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("Value", "Idle for", unit="s", thresholds=IDLE_VGPU),
            ),
        ),
        table_panel(
            "Processes holding memory without using the GPU",
            "Processes that held GPU memory with an SM utilization of 0 without a break (serve "
            "--process-series). Green under 5 minutes, orange from 5, red from the alert's 30.",
            q(f"vgpumon_process_idle_seconds{{{SEL}}} > 0", "idle", MET, instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("gpu", "GPU"),
                Column("pid", "PID"),
                Column("process_name", "Process"),
                Column("Value", "Idle for", unit="s", thresholds=IDLE_HOLDER),
            ),
        ),
        bargauge_panel(
            "Longest idle memory holder per GPU",
            "Per GPU, how long its longest-idle process has held memory without using the GPU "
            "(also without per-process series). Green under 5 minutes, orange from 5, red from "
            "the alert's 30.",
            q(
                f"vgpumon_gpu_longest_idle_holder_seconds{{{SEL}}}",
                f"{WHO} GPU {{{{gpu}}}}",
                MET,
                instant=True,
            ),
            thresholds=IDLE_HOLDER,
            unit="s",
        ),
        stat_panel(
            "Dead holder processes",
            "Processes NVML lists on a GPU that no longer exist on the host: their memory is not "
            "freed until the driver lets go (red above 0; only where vgpumon sees the host's "
            "PIDs).",
            q(f"sum(vgpumon_gpu_dead_holder_processes{{{SEL}}})", "dead", MET, instant=True),
            thresholds=RED_ABOVE_ZERO,
            width=4,
            height=8,
        ),
        bargauge_panel(
            "Memory held by dead processes",
            "Per GPU, the memory NVML still charges to processes that no longer exist (red above "
            "0).",
            q(
                f"vgpumon_gpu_dead_holder_memory_bytes{{{SEL}}}",
                f"{WHO} GPU {{{{gpu}}}}",
                MET,
                instant=True,
            ),
            thresholds=RED_ABOVE_ZERO,
            unit="bytes",
            width=4,
        ),
        Row("Energy accounting"),
        timeseries_panel(
            "Energy given and not given to tenants",
            "The GPU's power as metered (rate of its energy counter's increase since metering "
            "began) and, per kind of tenant (vgpu, mig, pod), the part no tenant of that kind was "
            "given: idle time when nobody holds memory, processes outside any pod, sampling gaps.",
            q(
                f"rate(vgpumon_gpu_metered_energy_joules_total{{{SEL}}}[$__rate_interval])",
                f"{WHO} GPU {{{{gpu}}}} metered",
                MET,
            ),
            q(
                f"rate(vgpumon_gpu_unattributed_energy_joules_total{{{SEL}}}[$__rate_interval])",
                f"{WHO} GPU {{{{gpu}}}} unattributed ({{{{kind}}}})",
                MET,
            ),
            unit="watt",
        ),
        bargauge_panel(
            "Unattributed share of energy in range",
            "Per GPU and kind of tenant, the fraction of the GPU's metered energy over the range "
            "that no tenant was given. Green under 25 %, orange from 25 %, red from half: the "
            "split then says little about who used the GPU.",
            q(
                f"sum by ({GPU_KEYS}, kind) "
                f"(increase(vgpumon_gpu_unattributed_energy_joules_total{{{SEL}}}[$__range]))\n"
                f"/ on ({GPU_KEYS}) group_left ()\n"
                f"sum by ({GPU_KEYS}) "
                f"(increase(vgpumon_gpu_metered_energy_joules_total{{{SEL}}}[$__range]))",
                f"{WHO} GPU {{{{gpu}}}} {{{{kind}}}}",
                MET,
                instant=True,
            ),
            thresholds=UNATTRIBUTED,
            unit="percentunit",
            width=6,
        ),
        bargauge_panel(
            "Time not metered in range",
            "Per GPU, sampling gaps over the range that were not integrated (a wedged sampler, a "
            "GPU that was down): nothing is invented for them (orange above 0).",
            q(
                f"increase(vgpumon_gpu_unmetered_seconds_total{{{SEL}}}[$__range])",
                f"{WHO} GPU {{{{gpu}}}}",
                MET,
                instant=True,
            ),
            thresholds=ORANGE_ABOVE_ZERO,
            unit="s",
            width=6,
        ),
    ),
    constants=(HOUR, HOUR_SECONDS),
)
