"""The exporter's own ``process_*`` families (CPU, memory, file descriptors, start time).

Every Prometheus client library exports these under the same names, and dashboards and alerts
(``process_resident_memory_bytes``, ``rate(process_cpu_seconds_total[5m])``) expect them. They used
to come from prometheus-client's ``ProcessCollector`` on a private registry, rendered with its
encoders once per snapshot, which built ``Metric`` objects, validated names and ran two encoders for
six families on every render (on a small host, more than rendering vgpumon's own families:
docs/measurements.md), so here the same six families are read from ``/proc`` and formatted directly:
two small file reads and a directory listing, then string formatting.

The output is byte-identical to prometheus-client's text and OpenMetrics output for the same
``/proc`` contents (tests/metrics/test_process.py reads a fake ``/proc`` both ways). Like
prometheus-client, it gives nothing where ``/proc`` cannot be read (not Linux).
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

    def __call__(self) -> tuple[str, str]:
        if not self._btime:  # no /proc: nothing, as prometheus-client gives
            return "", ""
        parts: list[tuple[str, str]] = []
        try:
            with open(self._dir / "stat", "rb") as stat:
                fields = stat.read().split(b")")[-1].split()
            parts.append(
                _gauge("virtual_memory_bytes", "Virtual memory size in bytes.", float(fields[20]))
            )
            parts.append(
                _gauge(
                    "resident_memory_bytes",
                    "Resident memory size in bytes.",
                    float(fields[21]) * PAGESIZE,
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
                    float(fields[11]) / self._ticks + float(fields[12]) / self._ticks,
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
            parts.append(_gauge("open_fds", "Number of open file descriptors.", open_fds))
            if max_fds is not None:
                parts.append(_gauge("max_fds", "Maximum number of open file descriptors.", max_fds))
        except OSError:
            pass
        return "".join(p[0] for p in parts), "".join(p[1] for p in parts)
