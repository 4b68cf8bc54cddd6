"""The vGPU scheduler and licensing tables of ``vgpumon snapshot`` (render.py puts them after its
instance and type tables), built from the scheduler and license rows the terminal UI shows too.

Empty tables are left out (a pass-through or bare-metal host shows none of this).
"""

from __future__ import annotations

from rich.table import Table

from vgpumon.model import Snapshot
from vgpumon.view import format as f
from vgpumon.view import rows as r
from vgpumon.view.columns import LICENSE_COLUMNS, SCHEDULER_COLUMNS
from vgpumon.view.tables import HOST, row_table, titled_table


def _run_time(snapshot: Snapshot) -> Table | None:
    """Run time so far per vGPU (a counter: one snapshot has no rate to show)."""
    table = titled_table("vGPU run time", "gpu", "GI", "vGPU", "run time", "preempted")
    for g in snapshot.gpus:
        for s in g.vgpu_schedulers:
            for u in s.usage:
                table.add_row(
                    str(g.index),
                    f.or_dash(s.gpu_instance_id),
                    str(u.vgpu_id),
                    f"{u.run_seconds_total:.2f} s",
                    f"{u.preemption_seconds_total:.2f} s",
                )
    return table if table.row_count else None


def vgpu_extra_tables(snapshot: Snapshot, wide: bool = False) -> list[Table]:
    out: list[Table] = []
    schedulers = [s for g in snapshot.gpus for s in r.scheduler_rows(HOST, snapshot, g)]
    if schedulers:
        # The starved count needs a share verdict, which a one-shot snapshot has not yet.
        columns = [c for c in SCHEDULER_COLUMNS if c.key != "starved"]
        out.append(row_table("vGPU scheduler", columns, schedulers, wide=wide))
    run_time = _run_time(snapshot)
    if run_time is not None:
        out.append(run_time)
    licenses = r.all_license_rows(HOST, snapshot)
    if licenses:
        lic_columns = [c for c in LICENSE_COLUMNS if c.key != "host"]
        out.append(row_table("Licenses (most urgent first)", lic_columns, licenses, wide=wide))
    return out
