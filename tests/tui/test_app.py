"""``vgpumon top`` driven with Textual's pilot over the built-in simulated hosts.

Expectations come from the snapshot the same source produced (the model), never from an earlier
screen: the screen must show what the sampler read.
"""

from __future__ import annotations

from typing import Any

from tui_helpers import plain, settle

from vgpumon.sources.history import History
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.screens.events import EventsScreen
from vgpumon.tui.screens.gpu import GpuScreen
from vgpumon.tui.screens.host import HostScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import format as f

SIZE = (120, 40)


def table(app: Any, wid: str) -> KeyedTable:
    return app.screen.query_one(f"#{wid}", KeyedTable)


def column(t: KeyedTable, key: str, row_key: str) -> str:
    index = t.column_keys.index(key)
    return plain(t.cells(row_key))[index]


async def test_drill_into_a_vgpu_host_gpu_shows_each_vms_license_and_type(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        assert isinstance(app.screen, HostScreen)
        snap = app.hosts["local"].snapshot
        gpu = snap.gpus[0]
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, GpuScreen) and app.screen.uuid == gpu.uuid
        vgpus = table(app, "vgpus")
        assert len(vgpus.held_keys) == len(gpu.vgpu_instances) == 4
        states = set()
        for v in gpu.vgpu_instances:
            key = f"local/{gpu.uuid}/vgpu/{v.vgpu_id}"
            # No VM name in this scenario: NVML's VM id, shortened (the screen is 120 wide).
            assert column(vgpus, "vm", key) == f.or_dash(v.vm_id)[:8] + "…"
            assert column(vgpus, "type", key) == f.vgpu_type(v.type_name)
            assert column(vgpus, "license", key) == f.license_short(v.license.state)
            states.add(v.license.state)
        assert {"licensed", "unlicensed_restricted", None} <= states  # all kinds were read
        await pilot.press("escape")
        assert isinstance(app.screen, HostScreen)


async def test_a_mig_gpu_expands_in_place_into_its_instances_and_folds(sim_host: Any) -> None:
    host = sim_host("a100-mig-mixed")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        gpus = table(app, "gpus")
        mig_gpu = next(g for g in app.hosts["local"].snapshot.gpus if g.mig_mode_current)
        gpu_key = f"local/{mig_gpu.uuid}"
        assert gpus.held_keys[0] == gpu_key and len(gpus.held_keys) == 2
        await pilot.press("l")
        await settle(pilot)
        children = [f"{gpu_key}/gi/{gi.id}" for gi in mig_gpu.mig_instances]
        assert len(children) == 4
        assert gpus.held_keys[1 : 1 + len(children)] == children  # right under its GPU
        profile = column(gpus, "type", children[0])
        assert profile == mig_gpu.mig_instances[0].profile_name
        await pilot.press("down", "h")
        await settle(pilot)
        assert gpus.held_keys == [gpu_key, f"local/{app.hosts['local'].snapshot.gpus[1].uuid}"]
        await pilot.press("t")  # tree: everything expanded
        await settle(pilot)
        assert set(children) <= set(gpus.held_keys)


async def apply_filter(pilot: Any, text: str) -> None:
    await pilot.press("slash")
    bar = pilot.app.screen.query_one("#filter")
    bar.value = text
    await pilot.press("enter")
    await settle(pilot)


async def test_filter_with_field_terms(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        snap = app.hosts["local"].snapshot
        keys = {g.index: f"local/{g.uuid}" for g in snap.gpus}
        gpus = table(app, "gpus")
        await apply_filter(pilot, "type:A100")
        assert gpus.held_keys == [keys[2]]
        await apply_filter(pilot, "license:unlicensed")  # GPU 0's and GPU 2's vGPUs
        assert gpus.held_keys == [keys[0], keys[2]]
        vm = snap.gpus[1].vgpu_instances[0].vm_id
        await apply_filter(pilot, f"vm:{vm[:8]}")
        assert gpus.held_keys == [keys[1]]
        await pilot.press("t")
        await settle(pilot)
        # Only the matching vGPU shows under its GPU.
        assert gpus.held_keys == [
            keys[1],
            f"{keys[1]}/vgpu/{snap.gpus[1].vgpu_instances[0].vgpu_id}",
        ]
        await apply_filter(pilot, "bogus:1")  # unknown field: refused, the filter stays
        assert str(app.filter_query) == f"vm:{vm[:8]}"
        await apply_filter(pilot, "")
        assert len(gpus.held_keys) > 3


async def test_filter_mode_term_on_a_mixed_mig_host(sim_host: Any) -> None:
    host = sim_host("a100-mig-mixed")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        await apply_filter(pilot, "mode:mig")
        mig = next(g for g in app.hosts["local"].snapshot.gpus if g.mig_mode_current)
        assert table(app, "gpus").held_keys == [f"local/{mig.uuid}"]


async def test_sort_cycles_and_reverses(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen)
        for _ in range(20):  # memory is on screen at 120 columns: s reaches it
            if screen.sort_key == "memory":
                break
            await pilot.press("s")
            await settle(pilot)
        assert screen.sort_key == "memory"
        snap = app.hosts["local"].snapshot

        def by_memory(reverse: bool) -> list[str]:
            ratio = lambda g: g.memory.used_bytes / g.memory.total_bytes  # noqa: E731
            return [f"local/{g.uuid}" for g in sorted(snap.gpus, key=ratio, reverse=reverse)]

        # Load-like columns start with the largest.
        assert table(app, "gpus").held_keys == by_memory(True)
        await pilot.press("S")
        await settle(pilot)
        assert table(app, "gpus").held_keys == by_memory(False)


async def test_pause_freezes_the_screen_and_resume_catches_up(sim_host: Any) -> None:
    host = sim_host("vgpu-license-expiry")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.at(0)
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        gpus = table(app, "gpus")
        snap = app.hosts["local"].snapshot
        key = f"local/{snap.gpus[0].uuid}/vgpu/31"
        before = column(gpus, "license", key)  # the vGPU's license state in the tree
        await pilot.press("p")
        assert app.paused and "PAUSED" in app.sub_title
        await host.at(10)  # vGPU 31: uninitialized -> licensed by now
        await settle(pilot)
        assert column(gpus, "license", key) == before
        await pilot.press("p")
        await settle(pilot)
        after = app.hosts["local"].snapshot.gpus[0].vgpu_instances[0]
        assert column(gpus, "license", key) == f.license_short(after.license.state) != before


async def test_a_lost_gpu_is_badged_and_logged(sim_host: Any) -> None:
    host = sim_host("fault-gpu-lost")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.at(0)
        await host.at(12)
        await settle(pilot)
        snap = app.hosts["local"].snapshot
        lost = next(g for g in snap.gpus if not g.up)
        assert lost.index == 2
        assert "lost" in column(table(app, "gpus"), "badges", f"local/{lost.uuid}")
        assert any("GPU 2 lost" in e.text for _, e in app.events)
        await pilot.press("4")
        await settle(pilot)
        assert isinstance(app.screen, EventsScreen)
        texts = [plain(table(app, "events").cells(k))[3] for k in table(app, "events").held_keys]
        assert any("GPU 2 lost" in t for t in texts)


async def test_a_hung_gpu_is_badged(sim_host: Any) -> None:
    host = sim_host("fault-hang", deadline=0.5)
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.at(0)
        await settle(pilot)
        snap = app.hosts["local"].snapshot
        assert snap.health.hung_gpus
        hung = next(g for g in snap.gpus if g.uuid in snap.health.hung_gpus)
        assert "hung" in column(table(app, "gpus"), "badges", f"local/{hung.uuid}")
        others = [g for g in snap.gpus if g.uuid != hung.uuid]
        for g in others:
            assert "hung" not in column(table(app, "gpus"), "badges", f"local/{g.uuid}")


async def test_tables_update_by_key_never_by_clearing(sim_host: Any) -> None:
    host = sim_host("vgpu-license-expiry")
    app = host.app()
    async with app.run_test(size=(240, 40)) as pilot:
        await host.at(0)
        await settle(pilot)
        await pilot.press("t")
        await settle(pilot)
        gpus = table(app, "gpus")
        await pilot.press("down")
        await settle(pilot)
        keys, cursor = gpus.held_keys, gpus.highlighted_key
        assert cursor is not None and cursor != keys[0]
        before = gpus.updates
        await host.at(10)  # license states change
        await settle(pilot)
        # The same rows by key, the cursor on the same row: a table emptied and refilled would
        # put the cursor back on the first row.
        assert gpus.held_keys == keys
        assert gpus.highlighted_key == cursor
        assert gpus.updates > before  # readings changed and reached the cells


async def test_the_tree_takes_the_graphs_rows(sim_host: Any) -> None:
    """The tree hides the holders and the graphs (a 16 x 48 host's tree needs every row); the
    graphs' own show/hide must not override that once they were shown."""
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(1)
        await settle(pilot)
        graphs = app.screen.query_one("#host-graphs")
        assert graphs.display  # tall enough for them
        await pilot.press("t")
        await settle(pilot)
        await host.cycles(1)
        await settle(pilot)
        assert not graphs.display
        await pilot.press("t")
        await settle(pilot)
        assert graphs.display


async def test_hidden_screens_do_no_work(sim_host: Any, monkeypatch: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(1)
        await settle(pilot)
        drawn: list[str] = []
        original = LiveScreen.refresh_data

        def spy(self: LiveScreen) -> None:
            drawn.append(type(self).__name__)
            original(self)

        monkeypatch.setattr(LiveScreen, "refresh_data", spy)
        await pilot.press("3")
        await settle(pilot)
        drawn.clear()
        await host.cycles(2)
        await settle(pilot)
        assert drawn and set(drawn) == {"LicensesScreen"}


async def test_too_small_terminal_says_so(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=(30, 8)) as pilot:
        await host.cycles(1)
        await settle(pilot)
        message = app.screen.query_one("#too-small")
        assert message.display and app.screen.has_class("-too-small")
        assert "too small" in str(message.render())


async def test_monochrome_theme_and_palette_actions(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app(theme="vgpumon-mono")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        # Alarms bold and in reverse video or underlined: no colour to tell them by.
        assert app.palette.error == "bold reverse" and app.palette.warning == "bold underline"
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Pause / resume", "Filter", "Show scheduler", "Show licenses"} <= titles


async def test_scheduler_screen_shows_shares_from_the_history(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app(history=History())
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(6)
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        shares = table(app, "shares")
        snap = app.hosts["local"].snapshot
        fixed = snap.gpus[2]  # fixed share: three A100-10C, 4 fit: 25 % due each
        for v in fixed.vgpu_instances:
            assert column(shares, "due", f"local/{fixed.uuid}/vgpu/{v.vgpu_id}") == "25%"
        received = [column(shares, "got", f"local/{fixed.uuid}/vgpu/{v.vgpu_id}")
                    for v in fixed.vgpu_instances]  # fmt: skip
        assert all(r != f.DASH for r in received)


async def test_pod_column_shows_who_holds_each_device_only_where_the_kubelet_said(
    sim_host: Any,
) -> None:
    from tui_helpers import PodsOf

    host = sim_host("kvm-vgpu-timesliced", enrichers=[PodsOf()])
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        snap = app.hosts["local"].snapshot
        gpu = snap.gpus[0]
        await pilot.press("enter")
        await settle(pilot)
        vgpus = table(app, "vgpus")
        held = {a.vgpu_id: a for a in snap.allocations if a.gpu_uuid == gpu.uuid}
        assert held, "the stand-in kubelet gave this GPU's vGPUs to pods"
        for v in gpu.vgpu_instances:
            key = f"local/{gpu.uuid}/vgpu/{v.vgpu_id}"
            a = held.get(v.vgpu_id)
            assert column(vgpus, "pod", key) == (f"{a.namespace}/{a.pod}" if a else f.DASH)
            # KubeVirt: the VM column names the VM, the pod column its virt-launcher pod
            assert column(vgpus, "vm", key) == (a.vm_name if a else f.or_dash(v.vm_id)[:8] + "…")


async def test_no_pod_column_without_pods(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        assert "pod" not in table(app, "gpus").column_keys
        await pilot.press("enter")
        await settle(pilot)
        assert "pod" not in table(app, "vgpus").column_keys
