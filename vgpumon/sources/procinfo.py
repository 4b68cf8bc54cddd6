"""What the host knows about a GPU process that NVML does not: its user, command line, CPU share
and resident memory, read from ``/proc`` (Linux; elsewhere every value is absent).

Only meaningful for processes of *this* host: a remote exporter's or a simulated host's process
ids name nothing here, so :func:`vgpumon.tui.app` asks only for a local, real (not simulated)
source. CPU share is the change of ``utime + stime`` between two reads over the wall time between
them, so the first read of a process has none.
"""

from __future__ import annotations

import os
import pwd
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
COMMAND_CHARS = 200  # a command line is cut here: it is shown in one table cell


@dataclass(frozen=True)
class ProcInfo:
    user: str | None = None
    command: str | None = None
    cpu: float | None = None  # share of one core since the previous read
    rss_bytes: int | None = None


class ProcTable:
    """Reads ``/proc/PID`` for the asked pids; keeps only the last CPU time of each."""

    def __init__(self, root: Path = Path("/proc"), clock: Callable[[], float] = time.monotonic):
        self.root = root
        self.clock = clock
        self._cpu: dict[int, tuple[float, float]] = {}  # pid -> (clock, cpu seconds)
        self._users: dict[int, str | None] = {}

    def read(self, pids: Iterable[int]) -> dict[int, ProcInfo]:
        out: dict[int, ProcInfo] = {}
        now = self.clock()
        seen: dict[int, tuple[float, float]] = {}
        for pid in set(pids):
            info = self._one(pid, now, seen)
            if info is not None:
                out[pid] = info
        self._cpu = seen  # processes that went away are forgotten
        return out

    def _one(self, pid: int, now: float, seen: dict[int, tuple[float, float]]) -> ProcInfo | None:
        base = self.root / str(pid)
        try:
            stat = (base / "stat").read_text()
            raw = (base / "cmdline").read_bytes()[: COMMAND_CHARS * 4]
            uid = (base).stat().st_uid
        except OSError:
            return None
        # Fields after the command name (which may hold spaces and parentheses).
        fields = stat[stat.rfind(")") + 2 :].split()
        try:
            cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
            rss = int(fields[21]) * PAGE
        except (IndexError, ValueError):
            return None
        seen[pid] = (now, cpu_s)
        before = self._cpu.get(pid)
        cpu = None
        if before is not None and now > before[0]:
            cpu = max(0.0, (cpu_s - before[1]) / (now - before[0]))
        command = raw.replace(b"\0", b" ").decode(errors="replace").strip()[:COMMAND_CHARS]
        return ProcInfo(self._user(uid), command or None, cpu, rss)

    def _user(self, uid: int) -> str | None:
        if uid not in self._users:
            try:
                self._users[uid] = pwd.getpwuid(uid).pw_name
            except KeyError:
                self._users[uid] = str(uid)
        return self._users[uid]
