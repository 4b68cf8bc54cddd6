"""The habits an operator brings from htop and nvitop: the footer names help as ``?``, the help
screen explains the columns and badges, Home/End/PgUp/PgDn move the cursor, Enter and → act on
the row under the cursor of the focused table, ``s`` sorts the focused table."""

from __future__ import annotations

from typing import Any

from tui_helpers import SimHost, fleet, settle

from vgpumon.tui.app import create_app
from vgpumon.tui.screens.gpu import GpuScreen
from vgpumon.tui.screens.help import HelpScreen
from vgpumon.tui.screens.host import HostScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable

SIZE = (120, 40)


def labels(table: KeyedTable) -> list[str]:
    return list(table.column_labels)


def column_keys(table: KeyedTable) -> list[str]:
    return list(table.column_keys)


def screen_text(app: Any) -> list[str]:
    return ["".join(seg.text for seg in strip) for strip in app.screen._compositor.render_strips()]


async def test_the_footer_names_help_as_the_question_mark(sim_host: Any) -> None:
    """The footer said ``5 help`` (a screen number) though ``?`` and F1 open it."""
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=(80, 24)) as pilot:
        await host.cycles(2)
        await settle(pilot)
        footer = screen_text(app)[-1]
        assert "? help" in footer and "5 help" not in footer, footer
        for key in ("question_mark", "f1", "5"):
            await pilot.press("escape", key)
            await settle(pilot)
            assert isinstance(app.screen, HelpScreen), key


async def test_the_footer_names_enter_where_it_opens_something_even_at_80_columns() -> None:
    """Enter opens a host (fleet) and a GPU (host screen), but the footer never said so: the
    focused table's own Enter binding, hidden, hid the screen's. At 80 columns the keys that
    matter stay on the line (Textual's palette corner took their room)."""
    hosts = [SimHost("kvm-vgpu-timesliced", host="kvm-01"), SimHost("a100-mig-mixed", host="m")]
    app = create_app(fleet(hosts), start_feed=False)
    async with app.run_test(size=(80, 24)) as pilot:
        for h in hosts:
            await h.cycles(2)
        await settle(pilot)
        footer = screen_text(app)[-1]
        assert "⏎ open" in footer and "? help" in footer and "q quit" in footer, footer
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, HostScreen)
        footer = screen_text(app)[-1]
        for shown in ("⏎ open", "→ expand", "q quit", "/ filter", "? help"):
            assert shown in footer, (shown, footer)
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, GpuScreen)
        assert "⏎ open" not in screen_text(app)[-1]  # nothing there to open


async def test_help_has_a_legend_of_columns_and_badges(sim_host: Any) -> None:
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        await settle(pilot)
        scroll = app.screen.query_one("VerticalScroll")
        seen: list[str] = []
        for _ in range(60):  # page through the help screen
            seen += screen_text(app)
            if scroll.scroll_y >= scroll.max_scroll_y:
                break
            scroll.scroll_page_down(animate=False)
            await settle(pilot)
        text = "\n".join(seen)
        assert "share/due" in text and "GPU time the vGPU got / was due" in text
        assert "unlicensed" in text and "a vGPU runs without a license" in text


async def test_home_end_and_pages_move_the_cursor(sim_host: Any) -> None:
    """Home and End did nothing (DataTable scrolls sideways on them in row mode)."""
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=(80, 14)) as pilot:
        await host.cycles(2)
        await pilot.press("t")  # the tree: every GPU with its vGPUs, more rows than fit
        await settle(pilot)
        gpus = app.screen.query_one("#gpus", KeyedTable)
        rows = len(gpus.held_keys)
        assert rows > gpus.size.height
        await pilot.press("end")
        await settle(pilot)
        assert gpus.cursor_row == rows - 1
        await pilot.press("home")
        await settle(pilot)
        assert gpus.cursor_row == 0
        await pilot.press("pagedown")
        await settle(pilot)
        assert gpus.cursor_row > 3
        down = gpus.cursor_row
        await pilot.press("pageup")
        await settle(pilot)
        assert gpus.cursor_row < down


async def test_enter_and_right_act_on_the_focused_tables_row(sim_host: Any) -> None:
    """Enter on a VM row opened the GPU the GPU table's cursor was on (a GPU 0 VM opened GPU 2),
    and → expanded that GPU too."""
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, HostScreen)
        snap = app.hosts["local"].snapshot
        first, last = snap.gpus[0], snap.gpus[-1]
        gpus = screen.query_one("#gpus", KeyedTable)
        gpus.move_cursor(row=len(gpus.held_keys) - 1)  # the GPU table's cursor on the last GPU
        holders = screen.query_one("#holders", KeyedTable)
        holders.focus()
        await settle(pilot)
        row = next(i for i, k in enumerate(holders.held_keys) if f"/{first.uuid}/" in k)
        holders.move_cursor(row=row)  # a VM of the first GPU
        await settle(pilot)
        await pilot.press("right")
        await settle(pilot)
        assert screen.expanded == {f"local/{first.uuid}"}, screen.expanded
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, GpuScreen) and app.screen.uuid == first.uuid != last.uuid


async def test_sort_sorts_the_focused_table(sim_host: Any) -> None:
    """``s`` with the VM table focused sorted the GPU table: VMs could not be sorted."""
    host = sim_host("kvm-vgpu-timesliced")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        gpus = app.screen.query_one("#gpus", KeyedTable)
        holders = app.screen.query_one("#holders", KeyedTable)
        gpu_order = list(gpus.held_keys)
        holders.focus()
        await settle(pilot)
        orders = set()
        for _ in range(4):  # the holders' columns in turn
            await pilot.press("s")
            await settle(pilot)
            orders.add(tuple(holders.held_keys))
            assert any(label.endswith(("▲", "▼")) for label in labels(holders)), labels(holders)
            assert not any(label.endswith(("▲", "▼")) for label in labels(gpus))
            assert list(gpus.held_keys) == gpu_order
        assert len(orders) > 1  # some column orders the VMs differently


async def test_the_host_screen_lists_every_holder_under_its_gpu(sim_host: Any) -> None:
    """A bare-metal GPU's python3 beside a MIG GPU appeared nowhere until that GPU was opened:
    the host screen listed one kind of holder only."""
    host = sim_host("a100-mig-mixed")
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.cycles(2)
        await settle(pilot)
        snap = app.hosts["local"].snapshot
        mig, bare = snap.gpus
        holders = app.screen.query_one("#holders", KeyedTable)
        keys = list(holders.held_keys)
        assert [k for k in keys if k.startswith(f"local/{mig.uuid}/gi/")], keys
        assert f"local/{bare.uuid}/pid/3101/compute" in keys or any(
            k.startswith(f"local/{bare.uuid}/pid/3101/") for k in keys
        ), keys
        # Each GPU's holders together, GPU by GPU.
        gpus_in_order = [k.split("/")[1] for k in keys]
        assert gpus_in_order == sorted(gpus_in_order, key=[g.uuid for g in snap.gpus].index)
        # Kinds mix: a kind column says which each row is.
        assert "kind" in [str(c) for c in column_keys(holders)]
