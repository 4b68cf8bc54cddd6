"""``vgpumon snapshot`` piped or redirected never loses a character: with no terminal to fit, the
tables are as wide as their content (``41%`` was printed ``41``, ``ready`` ``read``, ``A100-10C``
``A100-10``, and VM UUIDs lost their last character, with no ellipsis)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from rich.table import Table
from view_helpers import HANG_FREE, snapshot_of

from vgpumon.view.render import render, snapshot_renderable

WIDE = 10_000


def _tables(renderable: object) -> list[Table]:
    parts = getattr(renderable, "renderables", [renderable])
    return [part for part in parts if isinstance(part, Table)]


def _cells(table: Table) -> list[str]:
    return [str(cell) for column in table.columns for cell in column._cells if str(cell).strip()]


@pytest.mark.parametrize("scenario", HANG_FREE)
def test_redirected_output_has_every_cell_whole(
    scenario: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = snapshot_of(scenario)
    out = io.StringIO()  # not a terminal, as a pipe or a file is
    monkeypatch.setattr(sys, "stdout", out)
    render(snapshot)
    lines = out.getvalue().splitlines()
    for table in _tables(snapshot_renderable(snapshot, WIDE)):
        for cell in _cells(table):
            assert any(cell in line for line in lines), (table.title, cell)
    assert not any(line != line.rstrip() for line in lines), "no padding to a width"


def test_a_pipe_gets_every_value_whole() -> None:
    def run(*extra: str) -> str:
        argv = ["snapshot", "--sim", "kvm-vgpu-timesliced", "--interval", "0", *extra]
        done = subprocess.run(
            [sys.executable, "-m", "vgpumon.cli", *argv],
            stdout=subprocess.PIPE,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    text = run()
    data = json.loads(run("--json"))
    vgpus = [v for g in data["gpus"] for v in g["vgpu_instances"]]
    assert vgpus
    words = set(text.split())
    for v in vgpus:
        assert v["vm_id"] in words, v["vm_id"]
        assert v["type_name"].removeprefix("NVIDIA ") in text, v["type_name"]
    assert "A100-10C" in words and "ready" in words
