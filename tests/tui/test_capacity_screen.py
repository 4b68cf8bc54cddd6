"""The capacity screen (types × hosts), the ``fits:TYPE`` filter (where one more fits, best fit
first) and migration readiness in the GPU screen's vGPU table, on a fleet of the three capacity
scenarios whose answers are worked out by hand in their headers (docs/capacity.md)."""

from __future__ import annotations

from typing import Any

import pytest
from tui_helpers import SimHost, fleet, plain, settle

from vgpumon.tui.app import VgpumonApp, create_app
from vgpumon.tui.screens.capacity import CapacityScreen
from vgpumon.tui.screens.fleet import FleetScreen
from vgpumon.tui.screens.gpu import GpuScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view.filter import parse

NARROW, WIDE = (80, 24), (120, 40)
FLEET = (
    ("homog-01", "capacity-l40s-homogeneous"),
    ("hetero-01", "capacity-l40s-heterogeneous"),
    ("mig-01", "capacity-a100-mig"),
)


def capacity_fleet() -> tuple[VgpumonApp, list[SimHost]]:
    hosts = [SimHost(scenario, host=name) for name, scenario in FLEET]
    return create_app(fleet(hosts), start_feed=False), hosts


async def started(pilot: Any, hosts: list[SimHost]) -> None:
    await pilot.press("p")  # no half-stepped fleet is drawn
    for t in (0, 1, 2):
        for h in hosts:
            await h.at(t)
    await pilot.press("p")
    await settle(pilot)


def table(app: Any, wid: str) -> KeyedTable:
    return app.screen.query_one(f"#{wid}", KeyedTable)


def labels(t: KeyedTable) -> list[str]:
    return t.column_labels


def grid(t: KeyedTable) -> dict[str, dict[str, str]]:
    """{row key: {column label: cell text}}, rows in their order on screen."""
    heads = [label.rstrip(" ▲▼") for label in labels(t)]
    return {key: dict(zip(heads, plain(t.cells(key)), strict=True)) for key in t.held_keys}


@pytest.mark.parametrize("size", [NARROW, WIDE])
async def test_capacity_screen_counts_each_type_on_each_host(size: tuple[int, int]) -> None:
    app, hosts = capacity_fleet()
    async with app.run_test(size=size) as pilot:
        await started(pilot, hosts)
        await pilot.press("6")
        await settle(pilot)
        assert isinstance(app.screen, CapacityScreen)
        cells = grid(table(app, "capacity"))
        # 8Q: 3 more on the half-filled homogeneous L40S (its 1Q neighbour offers 8Q but is
        # held to 1Q), 2 on the heterogeneous one; none of the A100's.
        eight = cells["vGPU/L40S-8Q"]
        assert (eight["fit now"], eight["homog-01"], eight["hetero-01"]) == ("5", "3", "2")
        assert eight["mig-01"] == "—"  # not offered there, not "0"
        assert cells["vGPU/L40S-4Q"]["hetero-01"] == "0"  # offered, at its limit of 3
        assert cells["vGPU/L40S-1Q"]["homog-01"] == "16"
        assert {k: v["mig-01"] for k, v in cells.items() if k.startswith("MIG/")} == {
            "MIG/1g.5gb": "2",
            "MIG/1g.5gb+me": "1",
            "MIG/2g.10gb": "1",
            "MIG/3g.20gb": "0",
            "MIG/4g.20gb": "0",
            "MIG/7g.40gb": "0",
        }
        # Every host column is on screen at 80 columns too.
        assert {"type/profile", "fit now", "homog-01", "hetero-01", "mig-01"} <= {
            label.rstrip(" ▲▼") for label in labels(table(app, "capacity"))
        }


async def test_fits_lists_the_gpus_best_fit_first_and_opens_one() -> None:
    app, hosts = capacity_fleet()
    async with app.run_test(size=WIDE) as pilot:
        await started(pilot, hosts)
        await pilot.press("6")
        app.set_query(parse("fits:l40s-8q"))
        await settle(pilot)
        cells = grid(table(app, "capacity"))
        # Left after one more: 24 - 8 = 16 GiB on the homogeneous L40S, 28 - 8 = 20 GiB on the
        # heterogeneous one: the tighter fit first.
        assert [(c["#"], c["host"], c["GPU"], c["fit now"], c["left after one"]) for c in
                cells.values()] == [
            ("1", "homog-01", "0", "3", "16.0 GiB"),
            ("2", "hetero-01", "0", "2", "20.0 GiB"),
        ]  # fmt: skip
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, GpuScreen)
        snapshot = app.hosts["homog-01"].snapshot
        assert snapshot is not None
        assert (app.screen.host, app.screen.uuid) == ("homog-01", snapshot.gpus[0].uuid)
        # fits: selects GPUs, not the vGPUs on them: the opened GPU lists its three 8Q.
        assert len(table(app, "vgpus").held_keys) == 3


async def test_fits_a_mig_profile_and_nothing_where_none_fits() -> None:
    app, hosts = capacity_fleet()
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, hosts)
        await pilot.press("6")
        app.set_query(parse("fits:2g.10gb"))
        await settle(pilot)
        (row,) = grid(table(app, "capacity")).values()
        assert (row["host"], row["type/profile"], row["fit now"]) == ("mig-01", "2g.10gb", "1")
        assert row["left after one"] == "0 slices"
        app.set_query(parse("fits:l40s-16q"))  # every aligned 16Q block is taken
        await settle(pilot)
        assert grid(table(app, "capacity")) == {}
        assert "fits on no GPU" in str(app.screen.query_one("#title").render())


async def test_fits_on_the_fleet_screen_keeps_the_hosts_with_room() -> None:
    app, hosts = capacity_fleet()
    async with app.run_test(size=NARROW) as pilot:
        await started(pilot, hosts)
        assert isinstance(app.screen, FleetScreen)
        app.set_query(parse("fits:l40s-8q"))
        await settle(pilot)
        assert set(grid(table(app, "hosts"))) == {"homog-01", "hetero-01"}
        app.set_query(parse("fits:1g.5gb"))
        await settle(pilot)
        assert set(grid(table(app, "hosts"))) == {"mig-01"}


async def test_gpu_screen_shows_migration_readiness_per_vgpu() -> None:
    """kvm-vgpu-timesliced's GPU 0 (the exporter's vgpumon_vgpu_migration_ready says the same):
    vGPU 3 cannot migrate and NVML's check names "other"; vGPU 4 has no guest driver loaded, so
    its branch is unknown, but NVML's check names the guest driver. At 160 columns the reasons
    show too, and the migration payload; from 120 the ready column."""
    host = SimHost("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=(160, 50)) as pilot:
        for t in (0, 1, 2):
            await host.at(t)
        await settle(pilot)
        await pilot.press("enter")  # GPU 0
        await settle(pilot)
        cells = grid(table(app, "vgpus"))
        ready = {c["vGPU"]: c["migr"] for c in cells.values()}
        why = {c["vGPU"]: c["migration"] for c in cells.values()}
        assert ready == {"1": "ready", "2": "ready", "3": "no", "4": "no"}
        # what a move would carry (R565+): the simulator's framebuffer in use + 64 MiB
        moves = {c["vGPU"]: c["moves"] for c in cells.values()}
        assert moves == {"1": "6.1 GiB", "2": "3.6 GiB", "3": "1.1 GiB", "4": "576.0 MiB"}
        assert why["1"] == "—"
        assert why["3"] == "vGPU unsupported; limited: other"
        assert why["4"] == "limited: guest driver"
