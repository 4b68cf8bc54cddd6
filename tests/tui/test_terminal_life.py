"""``top`` and its terminal: it ends within a second when the terminal goes, at any point, in
every mode; SIGTERM ends it as cleanly and as quickly; ctrl+z suspends it as a shell job and ``fg``
draws the whole screen again.

The terminal is a tmux pane; killing its tmux server closes the pty as a closed window or a
dropped SSH session does (the kernel hangs the terminal up and sends SIGHUP). It is killed at
three points of ``top``'s life: right after launch (Python still importing), the moment the app
has taken the terminal (alternate screen on, first paint pending: the point where a write to the
dead terminal used to block it for good), and after the first paint with data on screen. The
modes: this host (an NVML module posing as the driver), ``--sim``, ``--url`` and a 50-host
``--targets`` fleet whose hosts mostly never answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ci_helpers import tool
from terminal_helpers import Pane, alive, ended_after, exporter, silent_exporters

pytestmark = pytest.mark.e2e

LIMIT = 1.0  # seconds from the terminal's loss (or SIGTERM) to the process's end


@pytest.fixture(autouse=True, scope="module")
def needs_tmux() -> None:
    tool("tmux", "Debian package tmux")  # skip without it; CI=true fails instead


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with exporter("kvm-vgpu-timesliced") as found:
        yield found


@pytest.fixture(scope="module")
def targets(url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """50 hosts: the exporter and 49 that accept connections and never answer."""
    with silent_exporters(49) as silent:
        path = tmp_path_factory.mktemp("fleet") / "targets.txt"
        path.write_text("\n".join([url, *silent]) + "\n")
        yield path


def mode_args(mode: str, request: pytest.FixtureRequest) -> list[str]:
    if mode == "local":
        return ["--nvml-module", "local_nvml"]
    if mode == "sim":
        return ["--sim", "kvm-vgpu-timesliced"]
    if mode == "url":
        return ["--url", request.getfixturevalue("url")]
    return ["--targets", str(request.getfixturevalue("targets"))]


# What the screen shows once data is there, per mode.
PAINTED: dict[str, Callable[[str], bool]] = {
    "local": lambda s: s.count("vGPU host") >= 3,
    "sim": lambda s: s.count("vGPU host") >= 3,
    "url": lambda s: s.count("vGPU host") >= 3,
    "targets": lambda s: "50 hosts" in s and "127.0.0.1" in s,
}


@pytest.mark.parametrize("mode", ["local", "sim", "url", "targets"])
def test_top_ends_within_a_second_when_its_terminal_goes(
    mode: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    args = mode_args(mode, request)
    # The three points run side by side, each in a terminal of its own.
    launched, taken, painted = (Pane(args, tmp=tmp_path) for _ in range(3))
    try:
        times: dict[str, float] = {}
        pid = launched.pid
        times["at launch"] = ended_after(pid, launched.kill_terminal())

        pid = taken.pid
        give_up = time.monotonic() + 60
        while taken.flag("#{alternate_on}") != "1":
            assert alive(pid), "top ended before taking the terminal"
            assert time.monotonic() < give_up, taken.screen()
            time.sleep(0.005)
        times["terminal taken"] = ended_after(pid, taken.kill_terminal())

        pid = painted.pid
        painted.wait_for(PAINTED[mode])
        times["after the first paint"] = ended_after(pid, painted.kill_terminal())
        slow = {point: round(t, 2) for point, t in times.items() if t > LIMIT}
        assert not slow, f"top outlived its terminal by these many seconds: {slow}"
    finally:
        for pane in (launched, taken, painted):
            pane.close()


@pytest.mark.parametrize("signal", ["TERM", "HUP"])
def test_a_signal_with_the_terminal_there_ends_top_within_a_second(
    signal: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """SIGTERM, or SIGHUP sent while the terminal stays: a clean quit that gives the terminal its
    screen back, within the second; the fleet, whose hosts hold connections open, too."""
    pane = Pane(mode_args("targets", request), tmp=tmp_path)
    try:
        pid = pane.pid
        pane.wait_for(PAINTED["targets"])
        import os
        import signal as signals

        sent = time.monotonic()
        os.kill(pid, getattr(signals, f"SIG{signal}"))
        took = ended_after(pid, sent)
        assert took <= LIMIT, f"SIG{signal}: top took {took:.2f} s"
        done = pane.wait_for(lambda s: "EXITED-" in s)
        assert "Traceback" not in done
        assert pane.flag("#{alternate_on}") == "0"
        assert pane.flag("#{cursor_flag}") == "1"
        assert pane.flag("#{mouse_any_flag}#{mouse_button_flag}#{mouse_all_flag}") == "000"
    finally:
        pane.close()


@pytest.mark.parametrize("how", ["ctrl+z", "SIGTSTP"])
def test_suspend_and_fg_redraw_the_whole_screen(how: str, tmp_path: Path) -> None:
    """ctrl+z (the terminal is raw, so it arrives as a key) or a SIGTSTP from outside: the shell
    gets its terminal and ``fg`` gives ``top`` a complete screen, not only what changed since."""
    pane = Pane(["--sim", "kvm-vgpu-timesliced"], tmp=tmp_path, shell=True)
    try:
        full = pane.wait_for(PAINTED["sim"])
        lines = len([line for line in full.splitlines() if line.strip()])
        if how == "ctrl+z":
            pane.keys("C-z")
        else:
            import os
            import signal

            os.kill(pane.pid, signal.SIGTSTP)
        pane.wait_for(lambda s: "Stopped" in s and pane.flag("#{alternate_on}") == "0")
        pane.keys("fg", "Enter")
        back = pane.wait_for(lambda s: pane.flag("#{alternate_on}") == "1" and "vGPU host" in s)
        # The screen is complete at once (the simulated host changes little between readings).
        time.sleep(1.0)
        back = pane.screen()
        assert back.count("vGPU host") >= 3, back
        assert "VMs on the GPUs" in back and "vgpumon top" in back, back
        assert len([line for line in back.splitlines() if line.strip()]) >= lines - 1, back
        pane.keys("q")
        pane.wait_for(lambda s: pane.flag("#{alternate_on}") == "0")
        pane.keys("echo EXITED-$?", "Enter")
        pane.wait_for(lambda s: "EXITED-0" in s)
    finally:
        pane.close()
