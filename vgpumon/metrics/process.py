"""The exporter's own ``process_*`` families (CPU, memory, file descriptors, start time).

Every Prometheus client library exports these under the same names, and dashboards and alerts
(``process_resident_memory_bytes``, ``rate(process_cpu_seconds_total[5m])``) expect them. They used
to come from prometheus-client's ``ProcessCollector`` on a private registry, rendered with its
encoders once per snapshot, which built ``Metric`` objects, validated names and ran two encoders for
six families on every render (on a small host, more than rendering vgpumon's own families:
docs/measurements.md), so here the same six families are read from ``/proc`` and formatted directly:
two small file reads and a directory listing, then string formatting.

The output is byte-identical to prometheus-client's text and OpenMetrics output for the same
``/proc`` contents of a process without children (tests/metrics/test_process.py reads a fake
``/proc`` both ways). Like prometheus-client, it gives nothing where ``/proc`` cannot be read (not
Linux).

One difference, on purpose: ``serve`` on a large host is two processes, the server and its sampler
process (vgpumon.collect.placement), and an operator who watches the exporter's CPU and memory
means both. So CPU time, resident and virtual memory and open file descriptors are the sums over
the process and its live children, and the CPU time of children that ended and were waited for
(a sampler process started again) stays in, so the counter never goes back. The start time and
the descriptor limit are the process's own.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from vgpumon.metrics.gofloat import go_float

try:
    import resource

    PAGESIZE = resource.getpagesize()
except ImportError:  # not Unix
    PAGESIZE = 4096

PREFIX = "process_"


def _gauge(name: str, help_text: str, value: float) -> tuple[str, str]:
    head = f"# HELP {PREFIX}{name} {help_text}\n# TYPE {PREFIX}{name} gauge\n"
    line = f"{PREFIX}{name} {go_float(value)}\n"
    return head + line, head + line


def _counter(name: str, help_text: str, value: float) -> tuple[str, str]:
    """(text, OpenMetrics): text names the family ``…_total``, OpenMetrics names it without."""
    line = f"{PREFIX}{name}_total {go_float(value)}\n"
    text = f"# HELP {PREFIX}{name}_total {help_text}\n# TYPE {PREFIX}{name}_total counter\n"
    om = f"# HELP {PREFIX}{name} {help_text}\n# TYPE {PREFIX}{name} counter\n"
    return text + line, om + line


class ProcessFamilies:
    """Callable giving (text, OpenMetrics) of the ``process_*`` families of process ``pid``."""

    def __init__(self, proc: str = "/proc", pid: str = "self") -> None:
        self._dir = Path(proc) / pid
        ticks = 100.0
        with contextlib.suppress(ValueError, OSError, AttributeError):
            ticks = float(os.sysconf("SC_CLK_TCK"))
        self._ticks = ticks
        self._btime = 0.0
        try:
            with open(Path(proc) / "stat", "rb") as stat:
                for line in stat:
                    if line.startswith(b"btime "):
                        self._btime = float(line.split()[1])
                        break
        except OSError:
            pass

    def _children(self) -> list[Path]:
        """The ``/proc`` folders of the process's live children (none where the kernel does not
        list them)."""
        out: list[Path] = []
        try:
            tasks = list((self._dir / "task").iterdir())
        except OSError:
            return out
        for task in tasks:
            try:
                pids = (task / "children").read_bytes().split()
            except OSError:
                continue
            out += [self._dir.parent / pid.decode() for pid in pids]
        return out

    @staticmethod
    def _stat(folder: Path) -> list[bytes]:
        with open(folder / "stat", "rb") as stat:
            return stat.read().split(b")")[-1].split()

    def __call__(self) -> tuple[str, str]:
        if not self._btime:  # no /proc: nothing, as prometheus-client gives
            return "", ""
        parts: list[tuple[str, str]] = []
        children = self._children()
        try:
            fields = self._stat(self._dir)
            # fields (after the name): 11/12 user/system ticks, 13/14 those of children waited
            # for, 19 start ticks, 20 virtual bytes, 21 resident pages
            virtual, resident = float(fields[20]), float(fields[21])
            others = float(fields[13]) + float(fields[14])  # ticks of others than itself
            for child in children:
                try:
                    theirs = self._stat(child)
                except OSError:  # it ended meanwhile: its time is its parent's once waited for
                    continue
                virtual += float(theirs[20])
                resident += float(theirs[21])
                others += float(theirs[11]) + float(theirs[12])
            # as prometheus-client adds them (the same float for a process without children)
            cpu = float(fields[11]) / self._ticks + float(fields[12]) / self._ticks
            if others:
                cpu += others / self._ticks
            parts.append(_gauge("virtual_memory_bytes", "Virtual memory size in bytes.", virtual))
            parts.append(
                _gauge(
                    "resident_memory_bytes", "Resident memory size in bytes.", resident * PAGESIZE
                )
            )
            parts.append(
                _gauge(
                    "start_time_seconds",
                    "Start time of the process since unix epoch in seconds.",
                    float(fields[19]) / self._ticks + self._btime,
                )
            )
            parts.append(
                _counter(
                    "cpu_seconds",
                    "Total user and system CPU time spent in seconds.",
                    cpu,
                )
            )
        except OSError:
            pass
        try:
            max_fds: float | None = None
            with open(self._dir / "limits", "rb") as limits:
                for line in limits:
                    if line.startswith(b"Max open file"):
                        max_fds = float(line.split()[3])
                        break
            open_fds = len(os.listdir(self._dir / "fd"))
            for child in children:
                with contextlib.suppress(OSError):
                    open_fds += len(os.listdir(child / "fd"))
            parts.append(_gauge("open_fds", "Number of open file descriptors.", open_fds))
            if max_fds is not None:
                parts.append(_gauge("max_fds", "Maximum number of open file descriptors.", max_fds))
        except OSError:
            pass
        return "".join(p[0] for p in parts), "".join(p[1] for p in parts)
