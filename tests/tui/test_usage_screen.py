"""The usage screen (since start, and Prometheus' last hour and day), the idle badge and its filter
term on the host screen, and contention on the scheduler screen (docs/verdicts.md, docs/tui.md)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tui_helpers import plain, settle

from vgpumon.collect.metering import MeteringConfig, MeteringStage
from vgpumon.commands.top import metering_stage
from vgpumon.sources.usage import UsageReport, UsageRow
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view.badges import IDLE_VGPU_AFTER_SECONDS

SIZE = (120, 40)
CONTENTION = str(Path(__file__).parents[1] / "fixtures/scenarios/vgpu-contention.yaml")


async def apply_filter(pilot: Any, text: str) -> None:
    await pilot.press("slash")
    pilot.app.screen.query_one("#filter").value = text
    await pilot.press("enter")
    await settle(pilot)


def metered(sim_host: Any, scenario: str) -> Any:
    return sim_host(scenario, enrichers=[MeteringStage(MeteringConfig())])


def table(app: Any, wid: str) -> KeyedTable:
    return app.screen.query_one(f"#{wid}", KeyedTable)


def text(app: Any, wid: str) -> list[list[str]]:
    t = table(app, wid)
    return [plain(t.cells(key)) for key in t.held_keys]


async def test_usage_since_start_by_vm_and_by_namespace(sim_host: Any) -> None:
    host = metered(sim_host, "metering-known-load")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        for t in range(0, 101, 2):
            await host.at(t)
        await pilot.press("u")
        await settle(pilot)
        rows = text(app, "usage")
        # vGPU 1 ran at 50 % for 100 s: 50 busy seconds, 0.0139 GPU-hours, first by GPU-hours.
        vm1 = app.hosts["local"].snapshot.gpus[0].vgpu_instances[0].vm_id
        assert rows[0][0] == vm1 and rows[0][1] == "0.01"
        assert len(rows) == 3
        title = str(app.screen.query_one("#usage-title").render())
        assert "Usage by vm, since start (this host)" in title
        await pilot.press("b")  # by pod: the simulator's processes are in no pod
        await settle(pilot)
        assert text(app, "usage") == []
        assert "nothing metered by pod" in str(app.screen.query_one("#usage-title").render())
        await pilot.press("w")  # no Prometheus: since start is the only window
        await settle(pilot)
        assert "since start" in str(app.screen.query_one("#usage-title").render())


class FakeUsage:
    """Prometheus' answer for the hourly windows: one row per call, named for the window."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, float, float]] = []

    async def report(self, by: str, start: float, end: float) -> UsageReport:
        self.asked.append((by, start, end))
        hours = (end - start) / 3600
        return UsageReport(by, start, end, (UsageRow((f"{by}-{hours:g}h",), {"gpu_hours": 2.0}),))


async def test_usage_over_the_last_hour_and_day_from_prometheus(sim_host: Any) -> None:
    host = metered(sim_host, "metering-known-load")
    usage = FakeUsage()
    app = host.app(usage=usage)
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await pilot.press("u")
        await pilot.press("w")  # last hour
        await settle(pilot)
        await settle(pilot)
        assert [r[0] for r in text(app, "usage")] == ["vm-1h"]
        by, start, end = usage.asked[-1]
        assert by == "vm" and end - start == 3600 and end % 3600 == 0  # whole hours
        await pilot.press("w")  # last day
        await settle(pilot)
        await settle(pilot)
        assert [r[0] for r in text(app, "usage")] == ["vm-24h"]
        assert "all hosts Prometheus meters" in str(app.screen.query_one("#usage-title").render())


async def test_a_prometheus_failure_is_a_line_not_a_crash(sim_host: Any) -> None:
    class Down:
        async def report(self, by: str, start: float, end: float) -> UsageReport:
            raise OSError("connection refused")

    host = metered(sim_host, "metering-known-load")
    app = host.app(usage=Down())
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await pilot.press("u", "w")
        await settle(pilot)
        await settle(pilot)
        assert "connection refused" in str(app.screen.query_one("#usage-title").render())
        assert text(app, "usage") == []


async def test_an_idle_vgpu_is_badged_and_found_by_badge_idle(sim_host: Any) -> None:
    host = metered(sim_host, "metering-known-load")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        # vGPU 3 never works: idle from the start, past the badge's time (cycles 3 s apart, so
        # every interval is integrated).
        t = 0.0
        while t <= IDLE_VGPU_AFTER_SECONDS + 6:
            await host.at(t)
            t += 3.0
        await settle(pilot)
        snap = app.hosts["local"].snapshot
        gpu0 = f"local/{snap.gpus[0].uuid}"
        gpus = table(app, "gpus")
        badges = plain(gpus.cells(gpu0))
        assert any("idle" in cell for cell in badges)
        await apply_filter(pilot, "badge:idle")
        assert gpus.held_keys == [gpu0]
        await pilot.press("t")
        await settle(pilot)
        # The GPU matches by its own badge, so all its vGPUs show; only vGPU 3 carries the badge
        # (vGPUs 1 and 2 stopped working at 100 s: idle, but not yet for the badge's time).
        idle = [k for k in gpus.held_keys if any("idle" in c for c in plain(gpus.cells(k)))]
        assert idle == [gpu0, f"{gpu0}/vgpu/3"]


async def test_the_scheduler_screen_names_who_took_a_starved_vgpus_time(sim_host: Any) -> None:
    host = sim_host(CONTENTION)
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.run_to(65.0)
        await pilot.press("2")
        await settle(pilot)
        rows = text(app, "contention")
        assert {r[1].split()[0] for r in rows} == {"3"}  # the starved vGPU
        assert sorted(r[4].split()[0] for r in rows) == ["1", "2"]  # its neighbours above due
        assert all(r[5].startswith("+") for r in rows)


async def test_no_contention_is_said_in_one_line(sim_host: Any) -> None:
    host = sim_host("capacity-l40s-homogeneous")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.run_to(65.0)
        await pilot.press("2")
        await settle(pilot)
        title = str(app.screen.query_one("#contention-title").render())
        assert title == "Contention: no vGPU starved in the last minute"
        assert not table(app, "contention").display


async def test_no_verdict_yet_is_said_with_why(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(3)
        await pilot.press("2")
        await settle(pilot)
        title = str(app.screen.query_one("#contention-title").render())
        assert title.endswith("no verdict: window too short"), title
        assert not table(app, "contention").display


def test_top_meters_this_host_and_reads_proc_only_through_real_nvml() -> None:
    sim = metering_stage(argparse.Namespace(interval=1.0, sim="metering-known-load"))
    real = metering_stage(argparse.Namespace(interval=2.0, sim=None))
    assert isinstance(sim, MeteringStage) and isinstance(real, MeteringStage)
    assert (sim.config.proc, real.config.proc) == (None, "/proc")
    assert real.config.interval_seconds == 2.0
