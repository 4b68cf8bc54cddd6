"""``vgpumon top --sim kvm-vgpu-timesliced`` in a real terminal (tmux): send keys, read the screen.

The pilot tests drive the app in-process; this one runs the installed command the way a person
does, so start-up, the terminal driver and quitting are covered too.
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ci_helpers import tool

pytestmark = pytest.mark.e2e


# A private tmux server (``-L``): the user's own server, and other test runs on the machine, are
# never touched (a ctrl+c or kill-session sent to a shared server could reach their panes).
SOCKET = f"vgpumon-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True, scope="module")
def needs_tmux() -> Iterator[None]:
    tool("tmux", "Debian package tmux")  # skip without it; CI=true fails instead
    yield
    subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)


VGPUMON = str(Path(sys.executable).with_name("vgpumon"))
VM_OF_VGPU_1 = "6f1c2a7e-93d4-4b7a-8f1e-0c5d9e2b4a11"  # kvm-vgpu-timesliced, GPU 0, vGPU 1


def tmux(*args: str) -> str:
    return subprocess.run(
        ["tmux", "-L", SOCKET, *args], check=True, capture_output=True, text=True
    ).stdout


def start(size: tuple[int, int] = (120, 40), pid_file: Path | None = None) -> str:
    name = f"vgpumon-{uuid.uuid4().hex[:8]}"
    # The inner shell writes vgpumon's pid (for the signal tests) and becomes vgpumon; the outer
    # one says how it ended.
    save = f"echo $$ > {pid_file}; " if pid_file is not None else ""
    command = (
        f"sh -c '{save}exec {VGPUMON} top --sim kvm-vgpu-timesliced'; echo EXITED-$?; sleep 30"
    )
    tmux("new-session", "-d", "-s", name, "-x", str(size[0]), "-y", str(size[1]), command)
    return name


@pytest.fixture
def session() -> Iterator[str]:
    name = start()
    try:
        yield name
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-session", "-t", name], capture_output=True)


def pane(name: str, what: str) -> str:
    return tmux("display-message", "-p", "-t", name, what).strip()


def restored(name: str) -> None:
    """The terminal is as vgpumon found it: main screen, cursor shown, no mouse reporting."""
    assert pane(name, "#{alternate_on}") == "0"
    assert pane(name, "#{cursor_flag}") == "1"
    assert pane(name, "#{mouse_any_flag}#{mouse_button_flag}#{mouse_all_flag}") == "000"


def screen(name: str) -> str:
    return tmux("capture-pane", "-p", "-t", name)


def wait_for(name: str, check: Callable[[str], bool], seconds: float = 60.0) -> str:
    """The screen once ``check`` holds; a generous bound for a loaded machine."""
    give_up = time.monotonic() + seconds
    text = screen(name)
    while not check(text):
        if time.monotonic() > give_up:
            pytest.fail(f"screen never matched; last screen:\n{text}")
        time.sleep(0.2)
        text = screen(name)
    return text


def test_top_in_tmux(session: str) -> None:
    overview = wait_for(session, lambda s: s.count("vGPU host") >= 3)
    assert "Traceback" not in overview
    assert "sim:kvm-vgpu-timesliced" in overview and "unlicensed" in overview
    tmux("send-keys", "-t", session, "Enter")
    # The detail's title ("GPU 0  NVIDIA L40S ..."): the host screen also shows "GPU 0" (its
    # graphs) and the VM ids, so those alone would match before Enter has taken effect.
    detail = wait_for(session, lambda s: "GPU 0  NVIDIA L40S" in s and VM_OF_VGPU_1[:8] in s)
    assert "vGPU instances" in detail and "L40S-8Q" in detail and "Traceback" not in detail
    tmux("send-keys", "-t", session, "Escape")
    wait_for(session, lambda s: s.count("vGPU host") >= 3)
    tmux("send-keys", "-t", session, "q")
    done = wait_for(session, lambda s: "EXITED-" in s)
    assert "EXITED-0" in done and "Traceback" not in done


def lines(text: str) -> int:
    return len([line for line in text.splitlines() if line.strip()])


def settled(name: str) -> int:
    """The screen's count of non-blank lines once a second has not changed it (the first paint
    draws the GPU table before the holders' rows and the graphs arrive)."""
    counts = [lines(screen(name))]
    give_up = time.monotonic() + 60
    while len(counts) < 5 or len(set(counts[-5:])) > 1:
        assert time.monotonic() < give_up, counts
        time.sleep(0.2)
        counts.append(lines(screen(name)))
    return counts[-1]


def test_arrows_expand_and_fold_in_tmux(session: str) -> None:
    wait_for(session, lambda s: s.count("vGPU host") >= 3)
    rows = settled(session)
    tmux("send-keys", "-t", session, "Right")
    expanded = wait_for(session, lambda s: "└ v4" in s)
    assert "├ v1" in expanded
    tmux("send-keys", "-t", session, "Left")
    wait_for(session, lambda s: "└ v4" not in s)
    assert settled(session) == rows
    tmux("send-keys", "-t", session, "q")
    wait_for(session, lambda s: "EXITED-" in s)
    restored(session)


def test_ctrl_c_quits_and_restores_the_terminal(session: str) -> None:
    wait_for(session, lambda s: s.count("vGPU host") >= 3)
    assert pane(session, "#{alternate_on}") == "1"
    tmux("send-keys", "-t", session, "C-c")
    done = wait_for(session, lambda s: "EXITED-" in s)
    assert "Traceback" not in done
    restored(session)


@pytest.mark.parametrize("signal", ["TERM", "HUP"])
def test_a_signal_quits_and_restores_the_terminal(signal: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    name = start(pid_file=pid_file)
    try:
        wait_for(name, lambda s: s.count("vGPU host") >= 3)
        subprocess.run(["kill", f"-{signal}", pid_file.read_text().strip()], check=True)
        done = wait_for(name, lambda s: "EXITED-" in s)
        assert "Traceback" not in done
        restored(name)
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-session", "-t", name], capture_output=True)
