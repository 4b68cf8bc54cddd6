"""``vgpumon top --sim kvm-vgpu-timesliced`` in a real terminal (tmux): send keys, read the screen.

The pilot tests drive the app in-process; this one runs the installed command the way a person
does, so start-up, the terminal driver and quitting are covered too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (apt-get install tmux)"),
]
VGPUMON = str(Path(sys.executable).with_name("vgpumon"))
VM_OF_VGPU_1 = "6f1c2a7e-93d4-4b7a-8f1e-0c5d9e2b4a11"  # kvm-vgpu-timesliced, GPU 0, vGPU 1


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def session() -> Iterator[str]:
    name = f"vgpumon-{uuid.uuid4().hex[:8]}"
    command = f"{VGPUMON} top --sim kvm-vgpu-timesliced; echo EXITED-$?; sleep 30"
    tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", command)
    try:
        yield name
    finally:
        subprocess.run(["tmux", "kill-session", "-t", name], capture_output=True)


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
    detail = wait_for(session, lambda s: VM_OF_VGPU_1 in s)
    assert "vGPU instances" in detail and "L40S-8Q" in detail and "Traceback" not in detail
    tmux("send-keys", "-t", session, "Escape")
    wait_for(session, lambda s: s.count("vGPU host") >= 3)
    tmux("send-keys", "-t", session, "q")
    done = wait_for(session, lambda s: "EXITED-" in s)
    assert "EXITED-0" in done and "Traceback" not in done
