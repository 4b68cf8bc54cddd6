"""``top`` on a big vGPU host (16 GPUs x 48 vGPUs, 784 rows with the tree open) costs what a
screenful costs: a draw builds the rows on screen and no others, a key moves the cursor over
what is already built, the first paint builds a screenful, and quitting never waits on the feed.

The host is a synthetic snapshot told by a hand-driven feed (no sampler: the tests are about
``top``'s own work, and stay fast). Work is counted (row models and cells built, draws), not timed:
the times are the benchmark's (bench/tui_cost.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from tui_helpers import settle

from vgpumon.model import (
    Gpu,
    Memory,
    SamplerHealth,
    Snapshot,
    Utilization,
    VgpuInstance,
    VgpuLicense,
    VgpuScheduler,
    VgpuSchedulerUsage,
    VgpuUtilization,
)
from vgpumon.sources.fleet import this_host
from vgpumon.tui import cells as tui_cells
from vgpumon.tui.app import VgpumonApp, create_app
from vgpumon.tui.screens.base import LiveScreen
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view import rows as view_rows
from vgpumon.view.columns import HOST_TREE_COLUMNS

GPUS, VGPUS = 16, 48
SIZE = (120, 40)
SCREENFUL = SIZE[1]  # rows a table can show at most on this terminal
STUCK_SECONDS = 4.0


def big_host(t: float) -> Snapshot:
    """16 GPUs x 48 vGPUs whose readings move with ``t`` (every snapshot is news)."""
    gib = 1 << 30
    gpus = []
    for g in range(GPUS):
        vgpus = tuple(
            VgpuInstance(
                vgpu_id=g * 100 + i + 1,
                vm_id=f"vm-{g:02d}-{i:02d}",
                type_id=1146,
                type_name="NVIDIA L40S-1B",
                framebuffer_total_bytes=gib,
                framebuffer_used_bytes=int(gib * ((i + t) % 10) / 10),
                utilization=VgpuUtilization(sm=((i + t) % 7) / 100, memory=0.01),
                license=VgpuLicense(licensed=i % 16 != 0, state="licensed"),
            )
            for i in range(VGPUS)
        )
        usage = tuple(VgpuSchedulerUsage(v.vgpu_id, run_seconds_total=t * 0.02) for v in vgpus)
        gpus.append(
            Gpu(
                index=g,
                uuid=f"GPU-{g:04d}",
                name="NVIDIA L40S",
                virtualization_mode="host_vgpu",
                utilization=Utilization(gpu=((g + t) % 10) / 10),
                memory=Memory(total_bytes=48 * gib, used_bytes=int(20 * gib + t)),
                vgpu_instances=vgpus,
                vgpu_schedulers=(VgpuScheduler(policy="equal_share", usage=usage),),
            )
        )
    return Snapshot(
        timestamp=t, gpus=tuple(gpus), source="synthetic", health=SamplerHealth(up=True)
    )


class HandFeed:
    """This host's sampler stood in for: the test tells its snapshots."""

    name = "synthetic"
    latest: Snapshot | None = None
    not_ready_reason: str | None = None

    def __init__(self, stubborn: bool = False) -> None:
        self.listeners: list[Callable[[Snapshot], object]] = []
        self.stubborn = stubborn  # its stop blocks its loop (a driver call that does not return)

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self.listeners.append(listener)

    def refresh(self) -> None:
        pass

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await stop.wait()
        finally:
            if self.stubborn:
                time.sleep(STUCK_SECONDS)

    def tell(self, snapshot: Snapshot) -> None:
        for listener in self.listeners:
            listener(snapshot)


class Built:
    """Counts what ``top`` builds: vGPU row models, table cells, screen draws."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.models = self.cells = self.draws = 0
        init, cell, draw = view_rows.VgpuRow.__init__, tui_cells.cell, LiveScreen.refresh_data

        def counted_init(row: Any, *args: Any, **kwargs: Any) -> None:
            self.models += 1
            init(row, *args, **kwargs)

        def counted_cell(*args: Any, **kwargs: Any) -> Any:
            self.cells += 1
            return cell(*args, **kwargs)

        def counted_draw(screen: LiveScreen) -> None:
            self.draws += 1
            draw(screen)

        monkeypatch.setattr(view_rows.VgpuRow, "__init__", counted_init)
        monkeypatch.setattr(tui_cells, "cell", counted_cell)
        monkeypatch.setattr(LiveScreen, "refresh_data", counted_draw)

    def reset(self) -> None:
        self.models = self.cells = self.draws = 0


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[Built]:
    yield Built(monkeypatch)


def app_over(feed: HandFeed, **kwargs: Any) -> VgpumonApp:
    return create_app(this_host(feed), start_feed=False, **kwargs)


def row_count(app: VgpumonApp) -> int:
    return app.screen.query_one("#gpus", KeyedTable).row_count


async def open_tree(pilot: Any, feed: HandFeed) -> KeyedTable:
    """The host's first reading, with every GPU expanded (``t``); the GPU table."""
    feed.tell(big_host(1.0))
    await settle(pilot)
    await pilot.press("t")
    await settle(pilot)
    return pilot.app.screen.query_one("#gpus", KeyedTable)


async def test_a_draw_of_the_open_tree_builds_only_the_rows_on_screen(built: Built) -> None:
    feed = HandFeed()
    app = app_over(feed)
    async with app.run_test(size=SIZE) as pilot:
        await open_tree(pilot, feed)
        assert row_count(app) == GPUS * (VGPUS + 1)
        for t in (2.0, 3.0, 4.0):
            built.reset()
            feed.tell(big_host(t))  # every row's readings changed
            await settle(pilot)
            assert built.draws >= 1
            # A screenful of vGPU rows and their cells, not the host's 768.
            assert built.models <= SCREENFUL, built.models
            # Every candidate column of the rows on screen is measured (base.show_rows), then
            # only those that fit are shown: bound by the candidates, not the columns shown.
            columns = len(HOST_TREE_COLUMNS)
            assert built.cells <= (SCREENFUL + GPUS) * columns * built.draws, built.cells


async def test_the_first_paint_builds_a_screenful(built: Built) -> None:
    """The first reading of a big host shows its GPUs and the vGPUs that fit under them; the
    other vGPUs are not built for a screen that cannot show them."""
    feed = HandFeed()
    app = app_over(feed)
    async with app.run_test(size=SIZE) as pilot:
        built.reset()
        feed.tell(big_host(1.0))
        await settle(pilot)
        assert row_count(app) == GPUS
        assert built.models <= SCREENFUL, built.models
        assert built.cells <= 2 * SCREENFUL * 16, built.cells  # two tables of at most 16 columns


async def test_a_key_moves_over_what_is_built_and_redraws_nothing(built: Built) -> None:
    """Down-arrows past the bottom of the screen scroll the table: rows that come into view are
    drawn from what the last draw made, with no draw of the screen (a key never waits on one)."""
    feed = HandFeed()
    app = app_over(feed)
    async with app.run_test(size=SIZE) as pilot:
        table = await open_tree(pilot, feed)
        built.reset()
        for _ in range(2 * SCREENFUL):
            await pilot.press("down")
        await pilot.pause()
        assert table.cursor_row == 2 * SCREENFUL and table.scroll_y > 0
        assert built.draws == 0
        assert table.highlighted_key == table.held_keys[2 * SCREENFUL]
        # What scrolled into view was built then: its cells are the current ones.
        assert built.models <= 2 * SCREENFUL


async def test_quitting_does_not_wait_for_the_feed() -> None:
    """A feed that does not stop (a cycle stuck in the driver) never holds the terminal: the app
    ends at once; the wait for the feed comes after, bounded (``stop_feed``)."""
    feed = HandFeed(stubborn=True)
    app = create_app(this_host(feed))  # the feed on its own thread, as top runs it
    async with app.run_test(size=SIZE) as pilot:
        feed.tell(big_host(1.0))
        await pilot.pause()
        started = time.monotonic()
    ended = time.monotonic() - started
    assert ended < STUCK_SECONDS - 1, ended  # a generous bound: waiting would be the whole stop
    assert app.stop_feed(0.2) is False  # still stuck: given up after the bound
    assert app.stop_feed(2 * STUCK_SECONDS) is True


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
async def test_the_scheduler_screen_gives_the_shares_the_room(size: tuple[int, int]) -> None:
    """On 16 GPUs the schedulers' table (one row per GPU) took 13 of an 80x24 screen's lines and
    left the vGPUs' shares, what the screen is for, four. The schedulers get a third of the
    height and scroll; the shares table gets most of the rest."""
    feed = HandFeed()
    app = app_over(feed)
    async with app.run_test(size=size) as pilot:
        feed.tell(big_host(1.0))
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        schedulers = app.screen.query_one("#schedulers", KeyedTable)
        shares = app.screen.query_one("#shares", KeyedTable)
        assert schedulers.row_count == GPUS and shares.row_count == GPUS * VGPUS
        shown = shares.scrollable_content_region.height - 1  # its header row
        assert shown >= size[1] // 3, (shown, schedulers.region.height)
        assert shares.region.height > schedulers.region.height
        assert shares.region.bottom <= size[1] - 1  # on screen, above the footer
