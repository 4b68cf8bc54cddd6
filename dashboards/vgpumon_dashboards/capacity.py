"""vgpumon / Capacity: where the next VM (or MIG instance) can go, what is stranded, and which
vGPUs can be live-migrated away.

The fleet answers read packaging/prometheus/vgpumon-capacity.rules.yml's recording rules; the
per-GPU ones read the capacity families (docs/capacity.md). Counts of different vGPU types on one
GPU are alternatives (six 8Q or three 16Q, not both): panels sum per type, never across types.
"""

from __future__ import annotations

from .common import (
    CAP_HETEROGENEOUS,
    CAP_HOMOGENEOUS,
    CAP_MIG,
    DRIVER,
    FRAGMENTATION,
    GPU_KEYS,
    HOST,
    MIGRATION_LIMITS,
    ORANGE_ABOVE_ZERO,
    READY,
    RED_ABOVE_ZERO,
    ROOM,
    SCOPE_VARIABLES,
    SEL,
    VGPU,
    VGPU_KEYS,
    WHO,
    YES_GOOD,
    Board,
    Column,
    Row,
    bargauge_panel,
    q,
    stat_panel,
    table_panel,
    timeseries_panel,
    value_map,
    vm_info,
)

VGPU_HOSTS = (CAP_HOMOGENEOUS, CAP_HETEROGENEOUS)
GPU = f"{WHO} GPU {{{{gpu}}}}"
# The labels of one row of a table: every query of a table with several keeps exactly these
# (and no metric name, which differs per query), so Grafana's merge puts them on one row.
TYPE_ROW = "cluster, instance, job, host, gpu, uuid, vgpu_type"
PROFILE_ROW = "cluster, instance, job, host, gpu, uuid, gpu_instance_profile"
GPU_ROW = "cluster, instance, job, host, gpu, uuid"
CLUSTER_TYPE_ROW = "cluster, vgpu_type"
BY_TYPE = f"vgpumon:vgpu_type_creatable_instances:by_type{{{SEL}}}"
CLUSTER = 'cluster=~"$cluster"'
MATCHES = value_map({"1": ("same branch", "green"), "0": ("other branch", "orange")})


def row(keys: str, expr: str) -> str:
    """``expr`` as one table row per ``keys``: those labels only, no metric name."""
    return f"max by ({keys}) ({expr})"


def _by_vgpu(expr: str) -> str:
    """A per-vGPU series with its VM's name, type and guest driver (vgpumon_vgpu_info)."""
    return (
        f"({expr})\n* on ({VGPU_KEYS}) group_left (vm_name, vgpu_type, guest_driver_version)\n"
        f"({vm_info(HOST)})"
    )


BOARD = Board(
    "vgpumon-capacity",
    "vgpumon / Capacity",
    "Where the next VM or MIG instance can go: creatable vGPUs per type and MIG instances per "
    "profile across the fleet and per cluster, the GPUs where one more fits (best fit first), "
    "stranded framebuffer and fragmentation, MIG profiles and free slices, and migration "
    "readiness per GPU and vGPU.",
    (*SCOPE_VARIABLES, "gpu"),
    (
        Row("Fleet: how many more fit"),
        bargauge_panel(
            "Creatable vGPUs per type",
            "How many more vGPUs of each type the selected GPUs can take now, summed over the "
            "GPUs (recording rule vgpumon:vgpu_type_creatable_instances:by_type). Counts of "
            "different types are alternatives: a GPU with room for six 8Q has room for three "
            "16Q, not both. Orange: no GPU can take one more of the type.",
            q(f"sum by (vgpu_type) ({BY_TYPE})", "{{vgpu_type}}", *VGPU_HOSTS, instant=True),
            thresholds=ROOM,
            width=12,
        ),
        bargauge_panel(
            "Creatable MIG instances per profile",
            "How many more GPU instances of each MIG profile the selected GPUs can take now in "
            "their current layout (NVML's remaining capacity, placement-aware), summed over the "
            "GPUs. Alternatives too: two free slices fit two 1g or one 2g. Orange: none fits.",
            q(
                f"sum by (gpu_instance_profile) (vgpumon_mig_profile_creatable_instances{{{SEL}}})",
                "{{gpu_instance_profile}}",
                CAP_MIG,
                instant=True,
            ),
            thresholds=ROOM,
            width=12,
        ),
        table_panel(
            "vGPU capacity per cluster",
            "Per cluster and vGPU type: how many more fit and on how many GPUs (recording rules "
            "vgpumon:vgpu_type_creatable_instances:cluster_sum and "
            "vgpumon:vgpu_type_hosting_gpus:cluster_count). The cluster is the targets' "
            "`cluster` label; without one the row is the whole fleet's.",
            q(
                row(
                    CLUSTER_TYPE_ROW,
                    f"vgpumon:vgpu_type_creatable_instances:cluster_sum{{{CLUSTER}}}",
                ),
                "{{cluster}} {{vgpu_type}}",
                *VGPU_HOSTS,
                instant=True,
            ),
            q(
                row(CLUSTER_TYPE_ROW, f"vgpumon:vgpu_type_hosting_gpus:cluster_count{{{CLUSTER}}}"),
                "{{cluster}} {{vgpu_type}} GPUs",
                *VGPU_HOSTS,
                instant=True,
            ),
            columns=(
                Column("cluster", "Cluster"),
                Column("vgpu_type", "vGPU type"),
                Column("Value #A", "Creatable now", thresholds=ROOM),
                Column("Value #B", "GPUs with room"),
            ),
            sort_by=("Creatable now", True),
        ),
        table_panel(
            "MIG capacity per cluster",
            "Per cluster and MIG profile: how many more GPU instances fit (recording rule "
            "vgpumon:mig_profile_creatable_instances:cluster_sum; orange: none).",
            q(
                f"vgpumon:mig_profile_creatable_instances:cluster_sum{{{CLUSTER}}}",
                "{{cluster}} {{gpu_instance_profile}}",
                CAP_MIG,
                instant=True,
            ),
            columns=(
                Column("cluster", "Cluster"),
                Column("gpu_instance_profile", "MIG profile"),
                Column("Value", "Creatable now", thresholds=ROOM),
            ),
            sort_by=("Creatable now", True),
            width=8,
        ),
        bargauge_panel(
            "Free MIG slices per cluster",
            "Compute slices no GPU instance holds, per cluster (recording rule "
            "vgpumon:mig_free_slices:cluster_sum). Orange: none free.",
            q(
                f"vgpumon:mig_free_slices:cluster_sum{{{CLUSTER}}}",
                "{{cluster}}",
                CAP_MIG,
                instant=True,
            ),
            thresholds=ROOM,
            width=4,
        ),
        Row("Where one more fits"),
        table_panel(
            "Where one more vGPU fits",
            "Every GPU where one more vGPU of a type can be created now, best fit first: the "
            "least framebuffer left over after placing it, so partly used GPUs fill before empty "
            "ones (vgpumon top's fits:TYPE filter answers the same). Filter a column for one "
            "type.",
            q(
                row(TYPE_ROW, f"{BY_TYPE} > 0"),
                f"{GPU} {{{{vgpu_type}}}}",
                *VGPU_HOSTS,
                instant=True,
            ),
            q(
                f"max by ({TYPE_ROW}) (clamp_min(\n"
                f"  vgpumon_gpu_vgpu_framebuffer_free_bytes{{{SEL}}}\n"
                f"  - on ({GPU_KEYS}) group_right ()\n"
                f"  (vgpumon_vgpu_type_framebuffer_bytes{{{SEL}}}\n"
                f"   * on ({GPU_KEYS}, vgpu_type_id) group_left (vgpu_type)\n"
                f"   vgpumon_vgpu_type_info{{{SEL}}}),\n"
                f"  0))\n"
                f"and on ({TYPE_ROW}) ({BY_TYPE} > 0)",
                f"{GPU} {{{{vgpu_type}}}} left",
                *VGPU_HOSTS,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("vgpu_type", "vGPU type"),
                Column("Value #A", "Creatable now"),
                Column("Value #B", "Framebuffer left after one more", unit="bytes"),
            ),
            sort_by=("Framebuffer left after one more", False),
            width=24,
        ),
        table_panel(
            "Where one more MIG instance fits",
            "Every GPU where one more GPU instance of a MIG profile can be created now, best fit "
            "first: the fewest compute slices left over after placing it.",
            q(
                row(PROFILE_ROW, f"vgpumon_mig_profile_creatable_instances{{{SEL}}} > 0"),
                f"{GPU} {{{{gpu_instance_profile}}}}",
                CAP_MIG,
                instant=True,
            ),
            q(
                f"max by ({PROFILE_ROW}) (clamp_min(\n"
                f"  vgpumon_gpu_mig_free_slices{{{SEL}}}\n"
                f"  - on ({GPU_KEYS}) group_right ()\n"
                f"  vgpumon_mig_profile_slices{{{SEL}}},\n"
                f"  0))\n"
                f"and on ({PROFILE_ROW}) (vgpumon_mig_profile_creatable_instances{{{SEL}}} > 0)",
                f"{GPU} {{{{gpu_instance_profile}}}} left",
                CAP_MIG,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("gpu_instance_profile", "MIG profile"),
                Column("Value #A", "Creatable now"),
                Column("Value #B", "Slices left after one more"),
            ),
            sort_by=("Slices left after one more", False),
            width=24,
        ),
        Row("Stranded framebuffer and fragmentation"),
        stat_panel(
            "Free vGPU framebuffer",
            "Framebuffer of the selected vGPU hosts that no running time-sliced vGPU holds: "
            "what the types could still hand out if the mix allowed.",
            q(
                f"sum(vgpumon_gpu_vgpu_framebuffer_free_bytes{{{HOST}}})",
                "free",
                *VGPU_HOSTS,
                instant=True,
            ),
            unit="bytes",
            width=6,
        ),
        stat_panel(
            "Stranded framebuffer",
            "Free framebuffer that no supported type can use in the current mix (heterogeneous "
            "mode off, or placement gaps): capacity paid for that no VM can get. Orange above 0.",
            q(
                f"sum(vgpumon_gpu_vgpu_framebuffer_stranded_bytes{{{HOST}}})",
                "stranded",
                *VGPU_HOSTS,
                instant=True,
            ),
            unit="bytes",
            thresholds=ORANGE_ABOVE_ZERO,
            width=6,
        ),
        stat_panel(
            "Fragmentation",
            "Share of the free framebuffer that is stranded. Green below 10 %; orange from 10 %; "
            "red from 25 %, where re-packing the vGPUs (or one size per GPU) wins room for more "
            "VMs. Empty where nothing is free: a full GPU is not fragmented.",
            q(
                f"sum(vgpumon_gpu_vgpu_framebuffer_stranded_bytes{{{HOST}}})\n"
                f"/ (sum(vgpumon_gpu_vgpu_framebuffer_free_bytes{{{HOST}}}) > 0)",
                "fragmentation",
                *VGPU_HOSTS,
                instant=True,
            ),
            unit="percentunit",
            thresholds=FRAGMENTATION,
            width=6,
        ),
        stat_panel(
            "Stranded framebuffer, whole fleet",
            "Stranded framebuffer of every vGPU host Prometheus scrapes, whatever the selection "
            "(recording rule vgpumon:vgpu_framebuffer_stranded_bytes:fleet_sum). Orange above 0.",
            q(
                "vgpumon:vgpu_framebuffer_stranded_bytes:fleet_sum",
                "stranded",
                *VGPU_HOSTS,
                instant=True,
            ),
            unit="bytes",
            thresholds=ORANGE_ABOVE_ZERO,
            width=6,
        ),
        table_panel(
            "Fragmentation by GPU",
            "Per GPU: free and stranded framebuffer and the stranded share (recording rule "
            "vgpumon:gpu_vgpu_framebuffer_fragmentation:ratio), worst first. Green below 10 %, "
            "orange from 10 %, red from 25 %.",
            q(
                row(GPU_ROW, f"vgpumon_gpu_vgpu_framebuffer_free_bytes{{{SEL}}}"),
                f"{GPU} free",
                *VGPU_HOSTS,
                instant=True,
            ),
            q(
                row(GPU_ROW, f"vgpumon_gpu_vgpu_framebuffer_stranded_bytes{{{SEL}}}"),
                f"{GPU} stranded",
                *VGPU_HOSTS,
                instant=True,
            ),
            q(
                row(GPU_ROW, f"vgpumon:gpu_vgpu_framebuffer_fragmentation:ratio{{{SEL}}}"),
                f"{GPU} fragmentation",
                *VGPU_HOSTS,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("Value #A", "Free", unit="bytes"),
                Column("Value #B", "Stranded", unit="bytes", thresholds=ORANGE_ABOVE_ZERO),
                Column("Value #C", "Fragmentation", unit="percentunit", thresholds=FRAGMENTATION),
            ),
            sort_by=("Fragmentation", True),
        ),
        timeseries_panel(
            "Fragmentation by cluster",
            "Stranded share of each cluster's free vGPU framebuffer over time (recording rules "
            "vgpumon:vgpu_framebuffer_fragmentation:cluster_ratio, from the clusters' free and "
            "stranded sums). Dashed: 10 % (orange) and 25 % (red).",
            q(
                f"vgpumon:vgpu_framebuffer_fragmentation:cluster_ratio{{{CLUSTER}}}",
                "{{cluster}}",
                *VGPU_HOSTS,
            ),
            q(
                f"vgpumon:vgpu_framebuffer_stranded_bytes:cluster_sum{{{CLUSTER}}}\n"
                f"/ (vgpumon:vgpu_framebuffer_free_bytes:cluster_sum{{{CLUSTER}}} > 0)",
                "{{cluster}} (from the sums)",
                *VGPU_HOSTS,
            ),
            unit="percentunit",
            min=0,
            max=1,
            thresholds=FRAGMENTATION,
        ),
        timeseries_panel(
            "Stranded framebuffer by GPU",
            "Stranded framebuffer of each GPU over time: it appears when the mix of running "
            "vGPUs changes (a VM of another size arrives, or one leaves a gap).",
            q(f"vgpumon_gpu_vgpu_framebuffer_stranded_bytes{{{SEL}}}", GPU, *VGPU_HOSTS),
            unit="bytes",
            thresholds=ORANGE_ABOVE_ZERO,
            width=24,
        ),
        Row("MIG: creatable profiles and free slices"),
        bargauge_panel(
            "Free MIG slices by GPU",
            "Compute slices no GPU instance holds on each MIG GPU. Orange: none free.",
            q(f"vgpumon_gpu_mig_free_slices{{{SEL}}}", GPU, CAP_MIG, instant=True),
            thresholds=ROOM,
            width=8,
        ),
        table_panel(
            "MIG profiles by GPU",
            "Per MIG GPU and GPU instance profile: how many more fit now (orange: none), the "
            "most on an empty GPU, its compute slices and its memory.",
            q(
                row(PROFILE_ROW, f"vgpumon_mig_profile_creatable_instances{{{SEL}}}"),
                f"{GPU} {{{{gpu_instance_profile}}}}",
                CAP_MIG,
                instant=True,
            ),
            q(
                row(PROFILE_ROW, f"vgpumon_mig_profile_max_instances{{{SEL}}}"),
                f"{GPU} {{{{gpu_instance_profile}}}} max",
                CAP_MIG,
                instant=True,
            ),
            q(
                row(PROFILE_ROW, f"vgpumon_mig_profile_slices{{{SEL}}}"),
                f"{GPU} {{{{gpu_instance_profile}}}} slices",
                CAP_MIG,
                instant=True,
            ),
            q(
                row(PROFILE_ROW, f"vgpumon_mig_profile_memory_bytes{{{SEL}}}"),
                f"{GPU} {{{{gpu_instance_profile}}}} memory",
                CAP_MIG,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("gpu_instance_profile", "MIG profile"),
                Column("Value #A", "Creatable now", thresholds=ROOM),
                Column("Value #B", "Most on an empty GPU"),
                Column("Value #C", "Slices"),
                Column("Value #D", "Memory", unit="bytes"),
            ),
            width=16,
        ),
        bargauge_panel(
            "MIG-backed vGPUs per GPU instance",
            "Per GPU instance of a MIG vGPU host (time-sliced MIG-backed vGPUs, R575+): the "
            "vGPUs running in it, and the more of each type that fit in it now (its free "
            "placements). The vGPU host dashboard lists them by type.",
            q(
                f"vgpumon_mig_vgpu_instances{{{SEL}}}",
                f"{GPU} GI {{{{gpu_instance}}}} running",
                DRIVER,
                instant=True,
            ),
            q(
                f"vgpumon_mig_vgpu_type_creatable_instances{{{SEL}}}"
                f" * on ({GPU_KEYS}, vgpu_type_id) group_left (vgpu_type)"
                f" vgpumon_vgpu_type_info{{{SEL}}}",
                f"{GPU} GI {{{{gpu_instance}}}} {{{{vgpu_type}}}} fit",
                DRIVER,
                instant=True,
            ),
            width=24,
        ),
        Row("Migration readiness"),
        stat_panel(
            "vGPUs not ready to migrate",
            "vGPUs whose live migration this host's side would refuse now (the GPU or the vGPU "
            "cannot migrate, the guest driver is of another branch, or NVML's compatibility "
            "check allows less). Orange above 0.",
            q(
                f"count(vgpumon_vgpu_migration_ready{{{HOST}}} == 0) or vector(0)",
                "not ready",
                VGPU,
                instant=True,
            ),
            thresholds=ORANGE_ABOVE_ZERO,
            width=6,
        ),
        stat_panel(
            "GPUs without vGPU migration",
            "vGPU hosts' GPUs that do not support live migration of their vGPUs at all (the "
            "pGPU capability). Orange above 0.",
            q(
                f"count(vgpumon_gpu_vgpu_migration_supported{{{HOST}}} == 0) or vector(0)",
                "GPUs",
                VGPU,
                instant=True,
            ),
            thresholds=ORANGE_ABOVE_ZERO,
            width=6,
        ),
        stat_panel(
            "vGPUs with a migration limit",
            "vGPUs for which NVML's compatibility check names something that limits a move "
            "(host driver, guest driver, GPU, other). Red above 0.",
            q(
                f"count(max by ({VGPU_KEYS}) (vgpumon_vgpu_migration_limit{{{HOST}}}) == 1)"
                " or vector(0)",
                "limited",
                VGPU,
                instant=True,
            ),
            thresholds=RED_ABOVE_ZERO,
            width=6,
        ),
        stat_panel(
            "Guest drivers of another branch",
            "vGPUs whose guest driver is not of the host driver's release branch: the move "
            "needs a matching destination. Orange above 0; vGPUs without a guest driver do not "
            "count.",
            q(
                f"count(vgpumon_vgpu_guest_driver_matches_host{{{HOST}}} == 0) or vector(0)",
                "other branch",
                VGPU,
                instant=True,
            ),
            thresholds=ORANGE_ABOVE_ZERO,
            width=6,
        ),
        table_panel(
            "Migration readiness per GPU",
            "Per vGPU host GPU: whether it supports vGPU migration, and how many of its vGPUs "
            "are ready and not ready to move (red above 0).",
            q(
                row(GPU_ROW, f"vgpumon_gpu_vgpu_migration_supported{{{SEL}}}"),
                f"{GPU} supported",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            q(
                f"sum by ({GPU_ROW}) (vgpumon_vgpu_migration_ready{{{SEL}}})",
                f"{GPU} ready",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            q(
                f"sum by ({GPU_ROW}) (1 - vgpumon_vgpu_migration_ready{{{SEL}}})",
                f"{GPU} not ready",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("gpu", "GPU"),
                Column("Value #A", "Supports vGPU migration", mappings=(YES_GOOD,)),
                Column("Value #B", "vGPUs ready"),
                Column("Value #C", "vGPUs not ready", thresholds=RED_ABOVE_ZERO),
            ),
        ),
        table_panel(
            "What limits a migration",
            "Each vGPU and what NVML's compatibility check (nvmlGetVgpuCompatibility) says "
            "limits its live move: the host driver, the guest driver, the GPU, or other. Empty "
            "while nothing limits any.",
            q(
                _by_vgpu(f"vgpumon_vgpu_migration_limit{{{SEL}}} == 1"),
                "{{vm_name}} {{reason}}",
                VGPU,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("vm_name", "VM"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("reason", "Limited by", mappings=(MIGRATION_LIMITS,)),
            ),
        ),
        table_panel(
            "Migration readiness by vGPU",
            "Every vGPU with its VM: ready to move (red: not), whether the vGPU supports "
            "migration, NVML's compatibility check against this host's GPU, and whether the "
            "guest driver is of the host's branch (empty while no guest driver is loaded).",
            q(
                _by_vgpu(f"vgpumon_vgpu_migration_ready{{{SEL}}}"),
                "{{vm_name}} ready",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            q(
                _by_vgpu(f"vgpumon_vgpu_migration_supported{{{SEL}}}"),
                "{{vm_name}} supported",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            q(
                _by_vgpu(f"vgpumon_vgpu_live_migration_compatible{{{SEL}}}"),
                "{{vm_name}} compatible",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            q(
                _by_vgpu(f"vgpumon_vgpu_guest_driver_matches_host{{{SEL}}}"),
                "{{vm_name}} guest driver",
                VGPU,
                CAP_HETEROGENEOUS,
                instant=True,
            ),
            columns=(
                Column("instance", "Exporter"),
                Column("host", "Agentless host"),
                Column("vm_name", "VM"),
                Column("vgpu_type", "vGPU type"),
                Column("gpu", "GPU"),
                Column("vgpu_id", "vGPU"),
                Column("guest_driver_version", "Guest driver"),
                Column("Value #A", "Ready", mappings=(READY,)),
                Column("Value #B", "vGPU supports migration", mappings=(YES_GOOD,)),
                Column("Value #C", "Compatible with this GPU", mappings=(YES_GOOD,)),
                Column("Value #D", "Guest driver branch", mappings=(MATCHES,)),
            ),
            sort_by=("Ready", False),
            width=24,
        ),
    ),
)
