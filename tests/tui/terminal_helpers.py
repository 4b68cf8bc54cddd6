"""``vgpumon top`` in a real terminal: a tmux pane on a server of its own (``tmux -L``), so
tests running side by side never share one, and the pane's terminal can be killed outright."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

VGPUMON = str(Path(sys.executable).with_name("vgpumon"))
HERE = Path(__file__).parent


class Pane:
    """One tmux server with one pane running ``vgpumon top ARGS`` (through ``sh``, which writes
    the pid and then becomes vgpumon; a second shell says how it ended and keeps the pane)."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        size: tuple[int, int] = (120, 40),
        env: dict[str, str] | None = None,
        tmp: Path,
        shell: bool = False,
    ) -> None:
        self.socket = f"vgpumon-test-{uuid.uuid4().hex[:10]}"
        self.pid_file = tmp / f"{self.socket}.pid"
        assignments = " ".join(f"{k}={_quote(v)}" for k, v in (env or {}).items())
        line = " ".join(_quote(a) for a in [VGPUMON, "top", *args])
        self.shell = shell
        if shell:
            # An interactive shell with job control (ctrl+z, fg), into which vgpumon is typed.
            command = "exec bash --norc --noprofile -i"
        else:
            command = (
                f"sh -c 'echo $$ > {self.pid_file}; exec env {assignments} {line}'; "
                "echo EXITED-$?; sleep 60"
            )
        pythonpath = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            str(size[0]),
            "-y",
            str(size[1]),
            "-e",
            f"PYTHONPATH={pythonpath}",
            command,
        )
        if shell:
            # A command alone (a job stopped inside a list would let the list go on).
            self.keys(f"env {assignments} {line}", "Enter")

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "-f", "/dev/null", *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "top")

    def flag(self, what: str) -> str:
        return self.tmux("display-message", "-p", "-t", "top", what).strip()

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "top", *keys)

    @property
    def pid(self) -> int:
        give_up = time.monotonic() + 30
        while True:
            if self.shell:
                shell = self.flag("#{pane_pid}")
                text = subprocess.run(
                    ["pgrep", "-P", shell, "-f", "vgpumon"], capture_output=True, text=True
                ).stdout.split()
                text = text[0] if text else ""
            else:
                text = self.pid_file.read_text().strip() if self.pid_file.exists() else ""
            if text:
                return int(text)
            if time.monotonic() > give_up:
                pytest.fail("vgpumon never started")
            time.sleep(0.01)

    def wait_for(self, check: Callable[[str], bool], seconds: float = 60.0) -> str:
        """The screen once ``check`` holds (a generous bound for a loaded machine)."""
        give_up = time.monotonic() + seconds
        text = self.screen()
        while not check(text):
            if time.monotonic() > give_up:
                pytest.fail(f"screen never matched; last screen:\n{text}")
            time.sleep(0.1)
            text = self.screen()
        return text

    def kill_terminal(self) -> float:
        """Close the pane's terminal as a closed window does (tmux hangs the pty up and sends
        SIGHUP); returns when it did (monotonic)."""
        self.tmux("kill-server")
        return time.monotonic()

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, check=False)


def _quote(value: str) -> str:
    if re.fullmatch(r"[\w@%+=:,./-]+", value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def ended_after(pid: int, since: float, limit: float = 10.0) -> float:
    """Seconds from ``since`` until ``pid`` ended (``limit`` and SIGKILL if it never does)."""
    while alive(pid):
        if time.monotonic() - since > limit:
            os.kill(pid, 9)
            return float("inf")
        time.sleep(0.005)
    return time.monotonic() - since


@contextmanager
def exporter(scenario: str) -> Iterator[str]:
    """``vgpumon serve --sim SCENARIO`` on a loopback port the OS chose; yields its URL."""
    proc = subprocess.Popen(
        [VGPUMON, "serve", "--sim", scenario, "--web.listen-address", "127.0.0.1:0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        url = None
        for line in proc.stderr:
            found = re.search(r"on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1)
                break
        assert url is not None, "the exporter never said where it serves"
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@contextmanager
def silent_exporters(n: int) -> Iterator[list[str]]:
    """``n`` loopback addresses that accept connections and never answer (a wedged host)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(64)
            socks.append(s)
        yield [f"http://127.0.0.1:{s.getsockname()[1]}" for s in socks]
    finally:
        for s in socks:
            s.close()
