"""``top`` over real exporters on loopback: one that goes away and comes back, and a fleet of
three with one stopped mid-test. The screen keeps working while hosts fail."""

from __future__ import annotations

from tui_helpers import Exporter, plain, until

from vgpumon.feed import HostState
from vgpumon.sources.remote import Connection, RemoteTarget, remote_fleet
from vgpumon.tui.app import create_app
from vgpumon.tui.screens.fleet import FleetScreen
from vgpumon.tui.screens.host import HostScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable

FAST = Connection(timeout_seconds=2.0)


async def test_a_remote_host_that_disconnects_and_comes_back() -> None:
    exporter = await Exporter("kvm-vgpu-timesliced").start()
    target = RemoteTarget(exporter.url, name="kvm-01")
    app = create_app(remote_fleet([target], FAST, interval_seconds=0.2))
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            assert isinstance(app.screen, HostScreen)
            gpus = app.screen.query_one("#gpus", KeyedTable)
            await until(pilot, lambda: len(gpus.held_keys) == 3)
            await exporter.stop()
            await until(pilot, lambda: app.hosts["kvm-01"].state is HostState.UNREACHABLE)

            def title() -> str:
                return str(app.screen.query_one("#title").render())

            # The screen and the event log follow the state at their next draw, not at once.
            await until(pilot, lambda: "unreachable" in title() and "last known data" in title())
            assert len(gpus.held_keys) == 3  # the last known GPUs stay on screen
            await until(pilot, lambda: any("unreachable" in e.text for _, e in app.events))
            await exporter.start()  # same port
            await until(pilot, lambda: app.hosts["kvm-01"].state is HostState.UP)
            await until(pilot, lambda: any("reachable again" in e.text for _, e in app.events))
            await until(pilot, lambda: "unreachable" not in title())
    finally:
        await exporter.stop()


async def test_a_fleet_of_three_with_one_stopped() -> None:
    exporters = [
        await Exporter(s).start()
        for s in ("kvm-vgpu-timesliced", "a100-mig-mixed", "passthrough-guest")
    ]
    names = ["kvm-01", "mig-01", "pt-01"]
    targets = [RemoteTarget(e.url, name=n) for e, n in zip(exporters, names, strict=True)]
    app = create_app(remote_fleet(targets, FAST, interval_seconds=0.2))
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            assert isinstance(app.screen, FleetScreen)
            hosts = app.screen.query_one("#hosts", KeyedTable)

            def states() -> list[str]:
                return [plain(hosts.cells(n))[1] for n in names if hosts.cells(n)]

            await until(pilot, lambda: states() == ["up", "up", "up"])
            await exporters[1].stop()
            await until(pilot, lambda: states()[1].startswith("unreachable"))
            assert states()[0] == "up" and states()[2] == "up"
            assert "2/3 hosts up" in app.sub_title
            await pilot.press("enter")  # the first host opens while another is down
            await until(pilot, lambda: isinstance(app.screen, HostScreen))
            assert isinstance(app.screen, HostScreen) and app.screen.host == "kvm-01"
            gpus = app.screen.query_one("#gpus", KeyedTable)
            await until(pilot, lambda: len(gpus.held_keys) == 3)
    finally:
        for e in exporters:
            await e.stop()


async def test_a_host_that_goes_down_comes_first_and_the_columns_hold_still() -> None:
    """A host that went down stayed where it was (below the fold at 50 hosts), and every column
    shifted right as its state became ``unreachable``."""
    exporters = [await Exporter("kvm-vgpu-timesliced").start() for _ in range(3)]
    names = ["a-01", "b-01", "c-01"]
    targets = [RemoteTarget(e.url, name=n) for e, n in zip(exporters, names, strict=True)]
    app = create_app(remote_fleet(targets, FAST, interval_seconds=0.2))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            hosts = app.screen.query_one("#hosts", KeyedTable)

            def order() -> list[str]:
                return list(hosts.held_keys)

            def widths() -> list[int]:
                return list(hosts.column_widths)

            def state(name: str) -> str:
                return plain(hosts.cells(name))[1] if hosts.cells(name) else ""

            await until(pilot, lambda: all(state(n) == "up" for n in names))
            assert order() == names
            before = widths()
            await exporters[2].stop()
            await until(pilot, lambda: state("c-01").startswith("unreachable"))
            assert widths() == before
            await until(pilot, lambda: order()[0] == "c-01")  # the problem host first
            assert order() == ["c-01", "a-01", "b-01"]
    finally:
        for e in exporters:
            await e.stop()
