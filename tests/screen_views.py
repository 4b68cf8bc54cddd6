"""What each screen of ``top`` shows of one host's snapshot, as plain data: every table's cells
(text, style, styled parts, gauge) built by the same row and column code the screens run. Two
snapshots that give the same data here look the same on every screen (tests of the Prometheus
fleet compare a host read from Prometheus with the same host read from its exporter)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vgpumon.model import Snapshot
from vgpumon.sources.usage import GROUPS, report_from_snapshot
from vgpumon.view import rows as vr
from vgpumon.view.capacity import capacity_rows, fit_rows, fitting_names
from vgpumon.view.columns import (
    CAPACITY_COLUMNS,
    FIT_COLUMNS,
    GPU_COLUMNS,
    HOST_COLUMNS,
    HOST_TREE_COLUMNS,
    LICENSE_COLUMNS,
    MIG_COLUMNS,
    PROCESS_COLUMNS,
    SCHEDULER_COLUMNS,
    SHARE_COLUMNS,
    USAGE_COLUMNS,
    VGPU_COLUMNS,
    Column,
    capacity_host_column,
)
from vgpumon.view.events import snapshot_events
from vgpumon.view.metering import usage_lines

HOST = "gpu-7:9839"


def cells(rows: Sequence[Any], columns: Sequence[Column[Any]]) -> list[Any]:
    """What a table shows of ``rows``: each column's text, style and styled parts."""
    return [
        [
            (
                c.cell(r),
                c.style(r) if c.style else None,
                list(c.parts(r)) if c.parts else None,
                c.gauge(r) if c.gauge else None,
            )
            for c in columns
        ]
        for r in rows
    ]


def fleet(s: Snapshot) -> Any:
    row = vr.host_row(HOST, "up", s)
    events = [(e.severity, e.text) for e in snapshot_events(HOST, None, s)]
    return cells([row], HOST_COLUMNS), events


def filtering(s: Snapshot) -> Any:
    return (
        [g.fields for g in vr.gpu_rows(HOST, s)],
        [v.fields for g in s.gpus for v in vr.vgpu_rows(HOST, s, g)],
        [m.fields for g in s.gpus for m in vr.mig_rows(HOST, g, s)],
    )


def scheduler(s: Snapshot) -> Any:
    schedulers = [r for g in s.gpus for r in vr.scheduler_rows(HOST, s, g)]
    shares = [v for g in s.gpus if g.vgpu_schedulers for v in vr.vgpu_rows(HOST, s, g)]
    return fleet(s), cells(schedulers, SCHEDULER_COLUMNS), cells(shares, SHARE_COLUMNS)


def licenses(s: Snapshot) -> Any:
    return fleet(s), cells(vr.all_license_rows(HOST, s), LICENSE_COLUMNS)


def capacity(s: Snapshot) -> Any:
    snaps = [(HOST, s)]
    names = sorted({n for g in s.gpus for n in fitting_names(g)})
    matrix = cells(capacity_rows(snaps), (*CAPACITY_COLUMNS, capacity_host_column(HOST)))
    return fleet(s), filtering(s), matrix, [cells(fit_rows(snaps, n), FIT_COLUMNS) for n in names]


def usage(s: Snapshot) -> Any:
    idle = sum(vr.idle_holders(g) for g in s.gpus)
    dead = sum((g.metering.dead_holders or 0) if g.metering else 0 for g in s.gpus)
    lines = [cells(usage_lines(report_from_snapshot(s, by)), USAGE_COLUMNS) for by in GROUPS]
    return fleet(s), lines, idle, dead


SHOWN: dict[str, Callable[[Snapshot], Any]] = {
    "fleet": fleet,
    "host": fleet,  # the hosts not shown in full; the one shown reads every family
    "events": fleet,
    "scheduler": scheduler,
    "licenses": licenses,
    "capacity": capacity,
    "usage": usage,
}


def host(s: Snapshot) -> Any:
    """A host's own screens: its GPU table (flat and as a tree), each GPU's vGPUs, MIG
    instances and processes."""
    gpus = vr.gpu_rows(HOST, s)
    tree: list[Any] = []
    for g in s.gpus:
        tree += [*vr.mig_rows(HOST, g, s), *vr.vgpu_rows(HOST, s, g)]
    return (
        fleet(s),
        filtering(s),
        cells(gpus, GPU_COLUMNS),
        cells(gpus, HOST_TREE_COLUMNS),
        cells(tree, HOST_TREE_COLUMNS),
        [cells(vr.vgpu_rows(HOST, s, g), VGPU_COLUMNS) for g in s.gpus],
        [cells(vr.mig_rows(HOST, g, s), MIG_COLUMNS) for g in s.gpus],
        [cells(vr.process_rows(HOST, g), PROCESS_COLUMNS) for g in s.gpus],
        scheduler(s),
        licenses(s),
        capacity(s),
        usage(s),
    )


# Every screen, by the feed.SCREENS name of what it reads (vgpumon.sources.prometheus_fleet).
SHOWN: dict[str, Callable[[Snapshot], Any]] = {
    "fleet": fleet,
    "host": fleet,  # the hosts not shown in full; the one shown reads every family
    "events": fleet,
    "scheduler": scheduler,
    "licenses": licenses,
    "capacity": capacity,
    "usage": usage,
}
