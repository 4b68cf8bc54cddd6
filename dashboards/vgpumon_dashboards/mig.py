"""vgpumon / MIG: GPU instances, their memory and GPM activity, their compute instances."""

from __future__ import annotations

from .common import (
    MIG,
    ON_OFF,
    SCOPE_VARIABLES,
    SEL,
    WHO,
    Board,
    Column,
    Panel,
    q,
    ratio_panel,
    stat_panel,
    table_panel,
    timeseries_panel,
)

GI = f"{WHO} GPU {{{{gpu}}}} GI {{{{gpu_instance}}}}"


def _gpm(title: str, description: str, family: str, legend: str = GI, width: int = 12) -> Panel:
    return ratio_panel(title, description, q(f"{family}{{{SEL}}}", legend, MIG), width=width)


BOARD = Board(
    "vgpumon-mig",
    "vgpumon / MIG",
    "MIG GPU instances: memory, GPM SM, DRAM, tensor, pipe and graphics activity, and their "
    "compute instances.",
    (*SCOPE_VARIABLES, "gpu"),
    (
        stat_panel(
            "MIG mode",
            "Whether MIG is enabled on each GPU now (blue: on).",
            q(
                f"vgpumon_gpu_mig_mode_enabled{{{SEL}}}",
                f"{WHO} GPU {{{{gpu}}}}",
                MIG,
                instant=True,
            ),
            mappings=(ON_OFF,),
            width=8,
        ),
        table_panel(
            "Compute instances",
            "Every compute instance with its GPU instance profile, MIG UUID and placement.",
            q(f"vgpumon_mig_instance_info{{{SEL}}}", "{{mig_uuid}}", MIG, instant=True),
            columns=(
                Column("instance", "Exporter"),
                Column("gpu", "GPU"),
                Column("gpu_instance", "GPU instance"),
                Column("compute_instance", "Compute instance"),
                Column("profile", "Profile"),
                Column("placement_start", "Placement start"),
                Column("placement_size", "Placement size"),
                Column("mig_uuid", "MIG UUID"),
            ),
            width=16,
        ),
        timeseries_panel(
            "GPU instance memory used",
            "Memory in use in each GPU instance, and its size. In use counts what MIG-backed "
            "vGPUs' guests hold, which NVML's own figure (the \"NVML\" lines) leaves out.",
            q(f"vgpumon_mig_memory_in_use_bytes{{{SEL}}}", GI, MIG),
            q(f"vgpumon_mig_memory_used_bytes{{{SEL}}}", f"{GI} NVML", MIG),
            q(f"vgpumon_mig_memory_total_bytes{{{SEL}}}", f"{GI} total", MIG),
            unit="bytes",
        ),
        ratio_panel(
            "GPU instance memory used (of the instance)",
            "Fraction of each GPU instance's memory in use; the nearly-full alert fires above "
            "95 %.",
            q(f"vgpumon:mig_memory_used:ratio{{{SEL}}}", GI, MIG),
        ),
        _gpm(
            "SM active by GPU instance",
            "Fraction of time the instance's SMs had work (GPM, Hopper and newer).",
            "vgpumon_mig_sm_active_ratio",
        ),
        _gpm(
            "SM occupancy by GPU instance",
            "Warps resident on the instance's SMs, as a fraction of the maximum (GPM).",
            "vgpumon_mig_sm_occupancy_ratio",
        ),
        _gpm(
            "DRAM active by GPU instance",
            "Fraction of time the instance's memory interface was busy (GPM).",
            "vgpumon_mig_dram_active_ratio",
        ),
        _gpm(
            "Tensor active by GPU instance",
            "Fraction of time the instance's tensor cores were busy (GPM).",
            "vgpumon_mig_tensor_active_ratio",
        ),
        _gpm(
            "Pipe activity by GPU instance",
            "Floating-point pipes (FP16, FP32, FP64, tensor) of each GPU instance (GPM).",
            "vgpumon_mig_pipe_active_ratio",
            legend=f"{GI} {{{{pipe}}}}",
        ),
        _gpm(
            "Graphics active by GPU instance",
            "Fraction of time the instance's graphics engine was busy (GPM).",
            "vgpumon_mig_graphics_active_ratio",
        ),
    ),
)
