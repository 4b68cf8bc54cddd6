"""SVG snapshots of every screen at 80×24 and 120×40 on a vGPU, a MIG, a bare-metal host, a
fleet and a fleet of the capacity scenarios, and of the "too small" message (that VM, license and
share are on screen at both sizes is asserted in test_first_minute.py; these pictures catch
everything else).

The simulator runs on a manual clock and the app draws only when told (no background sampling),
so each picture is the same on every run. Update after an intended change with
``pytest tests/tui/test_screens_snapshots.py --snapshot-update`` and review the SVG diffs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from tui_helpers import PodsOf, SimHost, fleet, settle

from vgpumon.collect.metering import MeteringConfig, MeteringStage
from vgpumon.tui.app import VgpumonApp, create_app
from vgpumon.view.filter import parse

SIZES = [(80, 24), (120, 40)]
CONTENTION = str(Path(__file__).parents[1] / "fixtures/scenarios/vgpu-contention.yaml")
Steps = Callable[[Any], Awaitable[None]]


def scenario_app(
    scenario: str,
    keys: tuple[str, ...] = (),
    *,
    at: tuple[float, ...] = (0, 1, 2),
    deadline: float = 5.0,
    pods: bool = False,
    metering: bool = False,
    until: float | None = None,
) -> tuple[VgpumonApp, Steps]:
    enrichers: list[Any] = [PodsOf()] if pods else []
    if metering:  # usage counters, idle holders, contention (as top runs it on this host)
        enrichers.append(MeteringStage(MeteringConfig()))
    host = SimHost(scenario, deadline=deadline, enrichers=enrichers)
    app = host.app()

    async def before(pilot: Any) -> None:
        if until is not None:  # scheduler logs read as the poller does: share verdicts
            await host.run_to(until)
        else:
            for t in at:
                await host.at(t)
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)

    return app, before


def fleet_app(
    hosts: tuple[tuple[str, str], ...] = (
        ("kvm-01", "kvm-vgpu-timesliced"),
        ("mig-01", "a100-mig-mixed"),
        ("bare-01", "fault-gpu-lost"),
    ),
    keys: tuple[str, ...] = (),
    query: str = "",
) -> tuple[VgpumonApp, Steps]:
    sims = [SimHost(scenario, host=name) for name, scenario in hosts]
    app = create_app(fleet(sims), start_feed=False)

    async def before(pilot: Any) -> None:
        # Paused while the hosts step, so no half-stepped fleet is ever drawn: a table's columns
        # keep the width of the widest cell they have shown, which would depend on timing.
        await pilot.press("p")
        for t in (0, 1, 12):
            for h in sims:
                await h.at(t)
        await pilot.press("p")
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
            await settle(pilot)
        if query:
            app.set_query(parse(query))
            await settle(pilot)

    return app, before


# The three capacity scenarios with hand-computed answers (docs/capacity.md).
CAPACITY_FLEET = (
    ("homog-01", "capacity-l40s-homogeneous"),
    ("hetero-01", "capacity-l40s-heterogeneous"),
    ("mig-01", "capacity-a100-mig"),
)


SCREENS: dict[str, Callable[[], tuple[VgpumonApp, Steps]]] = {
    "host-vgpu": lambda: scenario_app("kvm-vgpu-timesliced"),
    "host-tree-mig": lambda: scenario_app("a100-mig-mixed", ("t",)),
    "gpu-vgpu": lambda: scenario_app("kvm-vgpu-timesliced", ("enter",)),
    "gpu-mig": lambda: scenario_app("h100-mig-gpm", ("enter",)),
    "scheduler": lambda: scenario_app("kvm-vgpu-timesliced", ("2",), at=tuple(range(8))),
    "licenses": lambda: scenario_app("vgpu-license-expiry", ("3",), at=(0, 5, 12)),
    "events": lambda: scenario_app("fault-gpu-lost", ("4",), at=(0, 12, 41)),
    "help": lambda: scenario_app("kvm-vgpu-timesliced", ("5",)),
    "host-vgpu-tree": lambda: scenario_app("kvm-vgpu-timesliced", ("t",), at=tuple(range(8))),
    "host-baremetal": lambda: scenario_app("baremetal-8xh100"),
    "gpu-baremetal": lambda: scenario_app("baremetal-8xh100", ("enter",)),
    "host-lost-gpu": lambda: scenario_app("fault-gpu-lost", at=(0, 12, 41)),
    "fleet": lambda: fleet_app(),
    # Pods from the kubelet: the pod column appears (whole GPUs, MIG instances, KubeVirt vGPUs).
    "host-tree-pods": lambda: scenario_app("a100-mig-mixed", ("t",), pods=True),
    "gpu-vgpu-pods": lambda: scenario_app("kvm-vgpu-timesliced", ("enter",), pods=True),
    # Usage metering: usage since start by VM.
    "usage": lambda: scenario_app("metering-known-load", ("u",), at=(0, 1, 30), metering=True),
    # The starved vGPU (the collector's verdict after a minute) and who took its time.
    "scheduler-contention": lambda: scenario_app(CONTENTION, ("2",), until=65.0),
    # Capacity: types × hosts, and where one more L40S-8Q fits (best fit first).
    "capacity": lambda: fleet_app(CAPACITY_FLEET, ("6",)),
    "capacity-fits": lambda: fleet_app(CAPACITY_FLEET, ("6",), "fits:l40s-8q"),
}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare: Any, screen: str, size: tuple[int, int]) -> None:
    app, before = SCREENS[screen]()
    assert snap_compare(app, terminal_size=size, run_before=before)


def test_too_small(snap_compare: Any) -> None:
    app, before = scenario_app("kvm-vgpu-timesliced")
    assert snap_compare(app, terminal_size=(36, 9), run_before=before)
