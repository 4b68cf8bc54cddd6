"""The vGPU scheduler and licensing tables of ``vgpumon snapshot`` (beside render.py's instance
and type tables).

Kept next to the readers that produce the data, so the table and the model fields change together;
:mod:`vgpumon.collect.render` adds them after its vGPU tables. Empty tables are left out (a
pass-through or bare-metal host shows none of this).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

from rich.table import Table

from vgpumon.collect.render import DASH, flag, text, titled_table
from vgpumon.model import Gpu, VgpuScheduler


def _seconds(value: float | None, unit: str = "ms", scale: float = 1e3) -> str:
    return DASH if value is None else f"{value * scale:g} {unit}"


def _when(ts: float | None) -> str:
    if ts is None:
        return DASH
    return datetime.datetime.fromtimestamp(ts, tz=datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"
    )


def _expiry(timestamp: float | None, status: str | None) -> str:
    """The expiry date where there is one, else the expiry status (permanent, not applicable)."""
    return _when(timestamp) if timestamp else text(status)


def _share(s: VgpuScheduler) -> str:
    """Run time so far, per vGPU, as ``id:seconds``."""
    if not s.usage:
        return DASH
    return " ".join(f"{u.vgpu_id}:{u.run_seconds_total:.2f}s" for u in s.usage)


def scheduler_table(gpus: Iterable[Gpu]) -> Table | None:
    table = titled_table(
        "vGPU scheduler", "gpu", "gpu instance", "policy", "ARR", "time slice", "avg factor",
        "log entries (missed)", "run time per vGPU",
    )  # fmt: skip
    for g in gpus:
        for s in g.vgpu_schedulers:
            table.add_row(
                str(g.index),
                text(s.gpu_instance_id),
                text(s.policy),
                flag(s.arr_enabled),
                _seconds(s.timeslice_seconds),
                text(s.average_factor),
                f"{s.log_entries_total} ({s.log_entries_missed_total})",
                _share(s),
            )
    return table if table.row_count else None


def license_table(gpus: Iterable[Gpu]) -> Table | None:
    """Host side per vGPU (expiry only; the state is in the instance table) and guest features."""
    table = titled_table(
        "vGPU licenses", "gpu", "vgpu id / feature", "licensed", "state", "expires", "product"
    )
    for g in gpus:
        for v in g.vgpu_instances:
            lic = v.license
            if lic.state is None and lic.licensed is None:
                continue
            table.add_row(
                str(g.index),
                str(v.vgpu_id),
                flag(lic.licensed, "yes", "no"),
                text(lic.state),
                _expiry(lic.expiry_timestamp_seconds, lic.expiry_status),
                DASH,
            )
        for f in g.guest_licenses:
            table.add_row(
                str(g.index),
                f.feature,
                flag(f.licensed, "yes", "no"),
                text(f.state),
                _expiry(f.expiry_timestamp_seconds, f.expiry_status),
                text(f.product_name),
            )
    return table if table.row_count else None


def vgpu_extra_tables(gpus: Iterable[Gpu]) -> list[Table]:
    gpus = list(gpus)
    return [t for t in (scheduler_table(gpus), license_table(gpus)) if t is not None]
