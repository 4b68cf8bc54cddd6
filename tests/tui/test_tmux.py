"""``vgpumon top --sim kvm-vgpu-timesliced`` in a real terminal (tmux): send keys, read the screen.

The pilot tests drive the app in-process; this one runs the installed command the way a person
does, so start-up, the terminal driver and quitting are covered too.

Each test's pane has a tmux server of its own (``Pane``). One server shared by the module's tests
lost a test to tmux itself: killing a test's session left the server empty, so it began to exit,
and the next test's ``new-session`` reached it as it went ("server exited unexpectedly").
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ci_helpers import tool
from terminal_helpers import Pane

pytestmark = pytest.mark.e2e

VM_OF_VGPU_1 = "6f1c2a7e-93d4-4b7a-8f1e-0c5d9e2b4a11"  # kvm-vgpu-timesliced, GPU 0, vGPU 1


@pytest.fixture(autouse=True, scope="module")
def needs_tmux() -> None:
    tool("tmux", "Debian package tmux")  # skip without it; CI=true fails instead


@pytest.fixture
def top(tmp_path: Path) -> Iterator[Pane]:
    pane = Pane(["--sim", "kvm-vgpu-timesliced"], tmp=tmp_path)
    try:
        yield pane
    finally:
        pane.close()


def restored(pane: Pane) -> None:
    """The terminal is as vgpumon found it: main screen, cursor shown, no mouse reporting."""
    assert pane.flag("#{alternate_on}") == "0"
    assert pane.flag("#{cursor_flag}") == "1"
    assert pane.flag("#{mouse_any_flag}#{mouse_button_flag}#{mouse_all_flag}") == "000"


def overview(screen: str) -> bool:
    return screen.count("vGPU host") >= 3


def ended(screen: str) -> bool:
    return "EXITED-" in screen


def test_top_in_tmux(top: Pane) -> None:
    first = top.wait_for(overview)
    assert "Traceback" not in first
    assert "sim:kvm-vgpu-timesliced" in first and "unlicensed" in first
    top.keys("Enter")
    # The detail's title ("GPU 0  NVIDIA L40S ..."): the host screen also shows "GPU 0" (its
    # graphs) and the VM ids, so those alone would match before Enter has taken effect.
    detail = top.wait_for(lambda s: "GPU 0  NVIDIA L40S" in s and VM_OF_VGPU_1[:8] in s)
    assert "vGPU instances" in detail and "L40S-8Q" in detail and "Traceback" not in detail
    top.keys("Escape")
    top.wait_for(overview)
    top.keys("q")
    done = top.wait_for(ended)
    assert "EXITED-0" in done and "Traceback" not in done


def lines(text: str) -> int:
    return len([line for line in text.splitlines() if line.strip()])


def settled(pane: Pane) -> int:
    """The screen's count of non-blank lines once a second has not changed it (the first paint
    draws the GPU table before the holders' rows and the graphs arrive)."""
    counts = [lines(pane.screen())]
    give_up = time.monotonic() + 60
    while len(counts) < 5 or len(set(counts[-5:])) > 1:
        assert time.monotonic() < give_up, counts
        time.sleep(0.2)
        counts.append(lines(pane.screen()))
    return counts[-1]


def test_arrows_expand_and_fold_in_tmux(top: Pane) -> None:
    top.wait_for(overview)
    rows = settled(top)
    top.keys("Right")
    expanded = top.wait_for(lambda s: "└ v4" in s)
    assert "├ v1" in expanded
    top.keys("Left")
    top.wait_for(lambda s: "└ v4" not in s)
    assert settled(top) == rows
    top.keys("q")
    top.wait_for(ended)
    restored(top)


def test_ctrl_c_quits_and_restores_the_terminal(top: Pane) -> None:
    top.wait_for(overview)
    assert top.flag("#{alternate_on}") == "1"
    top.keys("C-c")
    done = top.wait_for(ended)
    assert "Traceback" not in done
    restored(top)


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_signal_quits_and_restores_the_terminal(name: str, top: Pane) -> None:
    top.wait_for(overview)
    os.kill(top.pid, getattr(signal, name))
    done = top.wait_for(ended)
    assert "Traceback" not in done
    restored(top)
