"""One starvation verdict on every screen of ``top`` (docs/verdicts.md): the host screen's badges,
the scheduler screen's verdicts, its starved count and its contention line say the same.

On the big bench host's pattern (48 vGPUs a GPU at equal share, each asking for 1-5 %) nobody is
starved, though the vGPUs asking 1 % get exactly that, under half their due; on
``vgpu-contention`` vGPU 3 gets 9 % of a third due while it waits for more: starved everywhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tui_helpers import plain, settle

from vgpumon.tui.screens.scheduler import CONTENTION_TITLE, NO_CONTENTION
from vgpumon.tui.widgets.keyed_table import KeyedTable

ROOT = Path(__file__).resolve().parents[2]
CONTENTION = str(ROOT / "tests/fixtures/scenarios/vgpu-contention.yaml")
BIG = ROOT / "bench/scenarios/vgpu-16x48.yaml"
SIZE = (120, 40)
AFTER = 65.0  # past the one-minute window


@pytest.fixture
def big_host_two_gpus(tmp_path: Path) -> str:
    """The first two GPUs of the 16 x 48 bench host: its pattern, at a test's cost."""
    doc = yaml.safe_load(BIG.read_text(encoding="utf-8"))
    doc["gpus"] = doc["gpus"][:2]
    path = tmp_path / "vgpu-2x48.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def _cells(app: Any, wid: str) -> list[list[str]]:
    table = app.screen.query_one(f"#{wid}", KeyedTable)
    return [plain(table.cells(key)) for key in table.held_keys]


def _starved_cells(rows: list[list[str]]) -> list[list[str]]:
    return [r for r in rows if any("starved" in c.lower() for c in r)]


async def _host_tree(pilot: Any) -> list[list[str]]:
    await pilot.press("t")  # the tree: GPUs with their vGPUs
    await settle(pilot)
    return _cells(pilot.app, "gpus")


async def test_the_starved_vgpu_is_starved_on_host_and_scheduler_screens(sim_host: Any) -> None:
    host = sim_host(CONTENTION)
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.run_to(AFTER, cycle_every=1.0)
        await settle(pilot)
        rows = await _host_tree(pilot)
        starved = _starved_cells(rows)
        # The GPU row (its badge) and vGPU 3's row, nothing else.
        assert [r[0] for r in starved] == ["0", "└ v3"], rows
        await pilot.press("2")
        await settle(pilot)
        shares = {r[1]: r for r in _cells(app, "shares")}
        assert [v for v, r in shares.items() if "STARVED" in r] == ["3"]
        (sched,) = _cells(app, "schedulers")
        assert sched[-1] == "1"  # one starved vGPU on the scheduler
        title = str(app.screen.query_one("#contention-title").render())
        assert title == CONTENTION_TITLE
        contention = _cells(app, "contention")
        assert {r[1].split()[0] for r in contention} == {"3"}


async def test_vgpus_that_get_what_they_ask_for_are_never_starved(
    sim_host: Any, big_host_two_gpus: str
) -> None:
    host = sim_host(big_host_two_gpus)
    app = host.app()
    async with app.run_test(size=SIZE) as pilot:
        await host.run_to(AFTER, cycle_every=1.0)
        await settle(pilot)
        assert _starved_cells(await _host_tree(pilot)) == []
        await pilot.press("2")
        await settle(pilot)
        assert _starved_cells(_cells(app, "shares")) == []
        assert [r[-1] for r in _cells(app, "schedulers")] == ["—", "—"]
        assert str(app.screen.query_one("#contention-title").render()) == NO_CONTENTION
