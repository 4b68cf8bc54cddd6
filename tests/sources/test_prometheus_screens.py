"""What each screen reads from Prometheus is enough for it: every scenario rebuilt from a screen's
families alone (vgpumon.sources.prometheus_fleet.SCREEN_FAMILIES) gives that screen the same rows
(values, badges, verdicts, event log) as the snapshot rebuilt from every family."""

from __future__ import annotations

import dataclasses

import pytest
from export_helpers import rich_snapshot
from rebuild_helpers import OPTIONS, Samples, as_input, from_golden, rendered
from screen_views import SHOWN, filtering

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
