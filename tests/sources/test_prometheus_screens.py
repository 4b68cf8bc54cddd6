"""What each screen reads from Prometheus is enough for it: every scenario rebuilt from a screen's
families alone (vgpumon.sources.prometheus_fleet.SCREEN_FAMILIES) gives that screen the same rows
(values, badges, verdicts, event log) as the snapshot rebuilt from every family."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from export_helpers import rich_snapshot
from rebuild_helpers import OPTIONS, Samples, as_input, from_golden, rendered

from vgpumon import sim
from vgpumon.feed import SCREENS
from vgpumon.metrics import rebuild as rb
from vgpumon.model import (
    GpuMetering,
    ProcessMeter,
    Snapshot,
    VgpuMeter,
    VgpuScheduler,
    VgpuShare,
)
from vgpumon.sources import prometheus_fleet as pf
from vgpumon.sources.usage import GROUPS, report_from_snapshot
from vgpumon.view import rows as vr
from vgpumon.view.capacity import capacity_rows, fit_rows, fitting_names
from vgpumon.view.columns import (
    CAPACITY_COLUMNS,
    FIT_COLUMNS,
    HOST_COLUMNS,
    LICENSE_COLUMNS,
    SCHEDULER_COLUMNS,
    SHARE_COLUMNS,
    USAGE_COLUMNS,
    Column,
    capacity_host_column,
)
from vgpumon.view.events import snapshot_events
from vgpumon.view.metering import usage_lines

HOST = "gpu-7:9839"


def with_verdicts(snapshot: Snapshot) -> Snapshot:
    """The rich host with every badge's verdict set: the sampler wedged, a starved vGPU, an idle
    vGPU and an idle process (the metering stage's counts)."""
    gpus = []
    for g in snapshot.gpus:
        if g.up and g.vgpu_instances:
            v = g.vgpu_instances[0]
            share = VgpuShare(v.vgpu_id, "starved", due=0.5, received=0.1, waited=0.4)
            scheduler = VgpuScheduler(
                policy="equal_share", share_window_seconds=60.0, shares=(share,)
            )
            g = dataclasses.replace(g, vgpu_schedulers=(scheduler,))
            metering = GpuMetering(
                vgpus=(VgpuMeter(v.vgpu_id, idle_seconds=3 * 3600.0),),
                processes=(ProcessMeter(4242, "train", idle_seconds=3600.0),),
                longest_idle_holder_seconds=3600.0,
                dead_holders=1,
                dead_holder_memory_bytes=1 << 30,
            )
            g = dataclasses.replace(g, metering=metering)
        gpus.append(g)
    health = dataclasses.replace(snapshot.health, wedged=True)
    return dataclasses.replace(snapshot, gpus=tuple(gpus), health=health)


def corpus() -> list[tuple[str, Samples]]:
    out = [(name, from_golden(name)) for name in sorted(sim.builtin_scenarios())]
    out.append(("rich", as_input(rendered(rich_snapshot(), OPTIONS))))
    out.append(("verdicts", as_input(rendered(with_verdicts(rich_snapshot()), OPTIONS))))
    return out


CORPUS = corpus()


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


def test_every_screen_says_what_it_reads() -> None:
    assert set(SHOWN) == set(SCREENS) == set(pf.SCREEN_FAMILIES)


@pytest.mark.parametrize("screen", [*SCREENS, "filter"])
@pytest.mark.parametrize(("name", "samples"), CORPUS, ids=[n for n, _ in CORPUS])
def test_a_screen_s_families_give_it_what_every_family_gives(
    screen: str, name: str, samples: Samples
) -> None:
    families = pf.FILTER if screen == "filter" else pf.SCREEN_FAMILIES[screen]
    shown = filtering if screen == "filter" else SHOWN[screen]
    everything = rb.rebuild(samples)
    subset = rb.rebuild({k: v for k, v in samples.items() if k in families})
    assert shown(subset) == shown(everything)
