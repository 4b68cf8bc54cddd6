"""What a user sees in the first minute of ``vgpumon top`` at 80 and 120 columns: the vGPU identity
on screen, nothing cut at the right edge, arrows that expand, headers that match their cells,
honest graphs and event times, sorting that says what it does, and quitting that always works.

Each test drives the app with Textual's pilot over a simulated host on a manual clock.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

import pytest
from tui_helpers import SimHost, fleet, plain, settle

from vgpumon.feed import HostState, HostUpdate
from vgpumon.model import SamplerHealth
from vgpumon.tui.app import VgpumonApp, create_app
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.screens.gpu import GpuScreen
from vgpumon.tui.screens.host import HostScreen
from vgpumon.tui.widgets.graph import Graph
from vgpumon.tui.widgets.keyed_table import KeyedTable

NARROW, WIDE = (80, 24), (120, 40)


def table(app: Any, wid: str) -> KeyedTable:
    return app.screen.query_one(f"#{wid}", KeyedTable)


def keys(t: KeyedTable) -> list[str]:
    return t.column_keys


def labels(t: KeyedTable) -> list[str]:
    return t.column_labels


def widths(t: KeyedTable) -> list[int]:
    return t.column_widths


def fits(t: KeyedTable) -> bool:
    """Every column of the table is inside the width its container shows (none cut at the right
    edge, a scrolling container's scrollbar included)."""
    parent = t.parent
    room = parent.scrollable_content_region.width if parent is not None else t.size.width
    return sum(widths(t)) <= min(t.size.width, room)


def cell(t: KeyedTable, row_key: str, label: str) -> str:
    """The text of a row's cell under the column headed ``label``."""
    return plain(t.cells(row_key))[labels(t).index(label)]


async def started(host: SimHost, pilot: Any, at: tuple[float, ...] = (0, 1, 2)) -> None:
    for t in at:
        await host.at(t)
    await settle(pilot)


# ---------------------------------------------------------------- 1: vGPU identity on screen


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["80x24", "120x40"])
async def test_vgpu_identity_is_on_screen_and_nothing_is_cut(sim_host: Any, size: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=size) as pilot:
        await started(host, pilot, tuple(range(8)))
        await pilot.press("t")
        await settle(pilot)
        gpus = table(app, "gpus")
        assert {"name", "type", "license", "share"} <= set(keys(gpus)) and fits(gpus)
        await pilot.press("t", "enter")
        await settle(pilot)
        vgpus = table(app, "vgpus")
        assert {"vm", "type", "license", "share"} <= set(keys(vgpus)) and fits(vgpus)
        await pilot.press("2")
        await settle(pilot)
        shares = table(app, "shares")
        assert {"vm", "got", "due", "starved"} <= set(keys(shares)) and fits(shares)


async def test_a_mig_gpus_detail_fits_80_columns(sim_host: Any) -> None:
    host = sim_host("h100-mig-gpm")
    app = host.app()
    async with app.run_test(size=NARROW) as pilot:
        await started(host, pilot)
        await pilot.press("enter")
        await settle(pilot)
        migs = table(app, "migs")
        assert {"gi", "profile", "memory", "sm"} <= set(keys(migs)) and fits(migs)


# ---------------------------------------------------------------- 2: arrows expand and fold


async def test_arrows_expand_and_fold_a_gpu(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=NARROW) as pilot:
        await started(host, pilot)
        gpus = table(app, "gpus")
        before = len(gpus.held_keys)
        await pilot.press("right")
        await settle(pilot)
        assert len(gpus.held_keys) > before
        await pilot.press("left")
        await settle(pilot)
        assert len(gpus.held_keys) == before


# ---------------------------------------------------------------- 3: fleet alarms at 120


def three_hosts() -> tuple[VgpumonApp, list[SimHost]]:
    hosts = [
        SimHost("kvm-vgpu-timesliced", host="kvm-01"),
        SimHost("a100-mig-mixed", host="mig-01"),
        SimHost("fault-gpu-lost", host="bare-01"),
    ]
    app = create_app(fleet(hosts), start_feed=False)
    return app, hosts


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["80x24", "120x40"])
async def test_fleet_alarm_columns_stay_on_screen(size: Any) -> None:
    app, hosts = three_hosts()
    async with app.run_test(size=size) as pilot:
        for t in (0, 1, 12):
            for h in hosts:
                await h.at(t)
        await settle(pilot)
        t = table(app, "hosts")
        assert {"host", "state", "lic", "xid", "lost"} <= set(keys(t)) and fits(t)


# ---------------------------------------------------------------- 4: widths shrink again


@pytest.mark.parametrize("size", [NARROW, WIDE], ids=["80x24", "120x40"])
async def test_column_widths_follow_what_is_shown_now(sim_host: Any, size: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=size) as pilot:
        await started(host, pilot)
        gpus = table(app, "gpus")
        first = (keys(gpus), widths(gpus))
        await pilot.press("l")  # expand: the VMs' names are wider than anything on a GPU row
        await settle(pilot)
        await pilot.press("h")
        await settle(pilot)
        assert (keys(gpus), widths(gpus)) == first


# ---------------------------------------------------------------- 5: tree headers match


async def test_tree_rows_sit_under_headers_that_name_them(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=WIDE) as pilot:
        await started(host, pilot)
        await pilot.press("t")
        await settle(pilot)
        gpus = table(app, "gpus")
        snap = app.hosts["local"].snapshot
        assert snap is not None
        gpu = snap.gpus[0]
        v = next(v for v in gpu.vgpu_instances if v.license.state == "unlicensed_restricted")
        key = f"local/{gpu.uuid}/vgpu/{v.vgpu_id}"
        assert cell(gpus, key, "license") == "unlic (restr)"
        assert cell(gpus, key, "name/VM").startswith((v.vm_id or "?")[:8])
        assert cell(gpus, key, "mode/type") == "L40S-2B"
    mig = sim_host("a100-mig-mixed")
    app = mig.app()
    async with app.run_test(size=WIDE) as pilot:
        await started(mig, pilot)
        await pilot.press("t")
        await settle(pilot)
        gpus = table(app, "gpus")
        snap = app.hosts["local"].snapshot
        assert snap is not None
        gpu = next(g for g in snap.gpus if g.mig_instances)
        gi = gpu.mig_instances[0]
        key = f"local/{gpu.uuid}/gi/{gi.id}"
        assert cell(gpus, key, "mode/type") == gi.profile_name
        assert "MIG instance" not in plain(gpus.cells(key))


# ---------------------------------------------------------------- 6, 7: lost GPU detail


async def test_a_lost_gpus_detail_says_lost_and_stale_and_invents_no_axis(sim_host: Any) -> None:
    host = sim_host("fault-gpu-lost")
    app = host.app()
    async with app.run_test(size=WIDE) as pilot:
        await started(host, pilot, (0, 12, 41))
        snap = app.hosts["local"].snapshot
        assert snap is not None
        lost = next(g for g in snap.gpus if not g.up)
        app.push_screen(GpuScreen("local", lost.uuid))
        await settle(pilot)
        title = app.screen.query_one("#title").render()
        assert "lost" in str(title) and "stale" in str(title)
        power = app.screen.query_one("#g-power", Graph)
        head, scale = power.heading()
        assert "stale" in head and "0W–1W" not in scale
        text = power.render().plain
        assert "█" not in text  # no bar against a made-up range


def test_a_graph_without_a_top_draws_no_bars_and_says_why() -> None:
    graph = Graph("power", lambda v: "—" if v is None else f"{v:.0f}W", hi=None)
    graph.show([(1.0, 300.0), (2.0, None)], 2.0, None)
    head, scale = graph.heading()
    assert scale == "no range: limit unknown"
    assert head == "power — (last 300W)"


# ---------------------------------------------------------------- 8: wedged sampler


async def test_a_wedged_sampler_is_logged_at_the_time_it_happened(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app(clock=lambda: 5000.0)
    async with app.run_test(size=WIDE) as pilot:
        await started(host, pilot)
        old = app.hosts["local"]
        assert old.snapshot is not None
        wedged = dataclasses.replace(
            old.snapshot, health=SamplerHealth(up=False, wedged=True, cycles_total=3)
        )
        app._take(dataclasses.replace(old, snapshot=wedged, sequence=old.sequence + 1))
        events = [e for _, e in app.events if "wedged" in e.text]
        assert events and events[0].timestamp == 5000.0
        await settle(pilot)
        gpus = table(app, "gpus")
        assert "stale" in plain(gpus.cells(gpus.held_keys[0]))[keys(gpus).index("badges")]


# ---------------------------------------------------------------- 9: sorting


async def test_sort_shows_its_column_cycles_visible_columns_and_starts_largest(
    sim_host: Any,
) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=NARROW) as pilot:
        await started(host, pilot)
        gpus = table(app, "gpus")
        seen = []
        for _ in range(len(keys(gpus)) + 1):
            await pilot.press("s")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, LiveScreen)
            seen.append(screen.sort_key)
            assert screen.sort_key in keys(gpus)
            marked = [label for label in labels(gpus) if label.endswith(("▲", "▼"))]
            assert len(marked) == 1
            if screen.sort_key == "util":
                assert marked[0].endswith("▼") and screen.sort_reverse
        assert "pod" not in seen
        await pilot.press("4")  # the event log has nothing to sort: no s in its footer
        await settle(pilot)
        # Hidden (False), not disabled (None): a disabled key is drawn dimmed, below 4.5:1.
        assert app.screen.check_action("sort_next", ()) is False


# ---------------------------------------------------------------- 10: memory stays bounded


async def test_cached_cells_follow_the_rows_not_the_run_time(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=WIDE) as pilot:
        await started(host, pilot)
        await pilot.press("t")
        for t in range(3, 40):
            await host.at(t)
            await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen)
        rows = len(table(app, "gpus").held_keys) + len(table(app, "holders").held_keys)
        assert len(screen.cell_cache._cells) <= rows


# ---------------------------------------------------------------- 11: quitting


async def test_ctrl_c_quits(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=NARROW) as pilot:
        await started(host, pilot)
        assert app.return_code is None
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert app.return_code == 0


# ---------------------------------------------------------------- 12: the empty rows, times


async def test_the_host_screen_lists_what_holds_the_gpus(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=NARROW) as pilot:
        await started(host, pilot, tuple(range(8)))
        snap = app.hosts["local"].snapshot
        assert snap is not None
        holders = table(app, "holders")
        assert len(holders.held_keys) == sum(len(g.vgpu_instances) for g in snap.gpus)
        assert {"vm", "license", "share"} <= set(keys(holders)) and fits(holders)
        assert holders.region.bottom <= 23  # on screen, above the footer


async def test_the_host_screen_graphs_its_gpus_when_there_is_room(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=WIDE) as pilot:
        await started(host, pilot)
        graphs = [g for g in app.screen.query(Graph) if g.display]
        assert len(graphs) == 3 and all(g.region.height >= 4 for g in graphs)


async def test_a_host_that_never_answered_gets_the_time_its_events_happened() -> None:
    host = SimHost("kvm-vgpu-timesliced")
    app = host.app(clock=lambda: 7200.0)
    async with app.run_test(size=WIDE) as pilot:
        app._take(HostUpdate("far", HostState.UNREACHABLE, error="connection refused", sequence=1))
        await settle(pilot)
        far = [e for _, e in app.events if e.host == "far"]
        assert far and far[0].timestamp == 7200.0
        when = datetime.datetime.fromtimestamp(far[0].timestamp, tz=datetime.timezone.utc)
        assert f"{when:%H:%M:%S}" == "02:00:00"
