"""The ``process_*`` families: the same bytes as prometheus-client's ProcessCollector gives.

Both read the same fake ``/proc`` (fixed values, so the comparison is exact), and the real one
(names and types only: CPU time moves between two reads).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from vgpumon.metrics.process import PAGESIZE, ProcessFamilies

STAT = (
    "4242 (vgpumon serve) S 1 4242 4242 0 -1 4194560 9000 0 0 0 1234 567 0 0 20 0 7 0 "
    "98765 1234567890 17000 18446744073709551615 1 1 0 0 0 0 0 16781312 17922 0 0 0 17 1 0 0 0 "
    "0 0\n"
)
LIMITS = (
    "Limit                     Soft Limit           Hard Limit           Units     \n"
    "Max cpu time              unlimited            unlimited            seconds   \n"
    "Max open files            1024                 524288               files     \n"
)


def _fake_proc(root: Path, fds: int) -> Path:
    (root / "stat").write_text("cpu  1 2 3\nbtime 1763900000\nprocesses 5\n")
    pid = root / "4242"
    (pid / "fd").mkdir(parents=True)
    (pid / "stat").write_text(STAT)
    (pid / "limits").write_text(LIMITS)
    for i in range(fds):
        (pid / "fd" / str(i)).write_text("")
    return root


def _client(proc: Path) -> tuple[str, str]:
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(pid=lambda: "4242", proc=str(proc), registry=registry)
    om = generate_openmetrics(registry).decode().removesuffix("# EOF\n")
    return generate_latest(registry).decode(), om


def test_same_bytes_as_prometheus_client_for_the_same_proc(tmp_path: Path) -> None:
    proc = _fake_proc(tmp_path, fds=9)
    ours = ProcessFamilies(proc=str(proc), pid="4242")()
    assert ours == _client(proc)
    assert "process_open_fds 9.0\n" in ours[0]
    assert "process_max_fds 1024.0\n" in ours[0]
    cpu = next(
        line for line in ours[1].splitlines() if line.startswith("process_cpu_seconds_total")
    )
    assert float(cpu.split()[1]) == pytest.approx(18.01)  # (1234 + 567) ticks / 100


def test_no_proc_gives_nothing(tmp_path: Path) -> None:
    assert ProcessFamilies(proc=str(tmp_path / "missing"))() == ("", "")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_the_real_process_gives_the_same_families_as_prometheus_client() -> None:
    def families(text: str) -> list[str]:
        return [line for line in text.splitlines() if line.startswith("#")]

    ours = ProcessFamilies()()
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    theirs_text = generate_latest(registry).decode()
    theirs_om = generate_openmetrics(registry).decode().removesuffix("# EOF\n")
    assert families(ours[0]) == families(theirs_text)
    assert families(ours[1]) == families(theirs_om)


def test_the_sampler_process_counts_as_the_exporters(tmp_path: Path) -> None:
    """serve's sampler runs in a child: its CPU, memory and descriptors are the exporter's, and
    the CPU of a child that ended and was waited for stays in (the counter never goes back)."""
    proc = _fake_proc(tmp_path, fds=9)
    alone = dict(
        line.split(" ")
        for line in ProcessFamilies(proc=str(proc), pid="4242")()[0].splitlines()
        if not line.startswith("#")
    )
    task = proc / "4242" / "task" / "4242"
    task.mkdir(parents=True)
    (task / "children").write_text("4343 ")
    child = proc / "4343"
    (child / "fd").mkdir(parents=True)
    for i in range(3):
        (child / "fd" / str(i)).write_text("")
    # 200 + 100 ticks of its own; 2000 virtual bytes, 50 resident pages
    (child / "stat").write_text(STAT.replace("4242 (vgpumon serve)", "4343 (python3)")
                                .replace(" 1234 567 0 0 ", " 200 100 0 0 ")
                                .replace(" 1234567890 17000 ", " 2000 50 "))  # fmt: skip
    # the parent has waited for an earlier child that used 70 + 30 ticks
    (proc / "4242" / "stat").write_text(STAT.replace(" 1234 567 0 0 ", " 1234 567 70 30 "))
    both = dict(
        line.split(" ")
        for line in ProcessFamilies(proc=str(proc), pid="4242")()[0].splitlines()
        if not line.startswith("#")
    )
    assert float(both["process_cpu_seconds_total"]) == pytest.approx(
        float(alone["process_cpu_seconds_total"]) + 3.0 + 1.0
    )
    assert float(both["process_resident_memory_bytes"]) == (17000 + 50) * PAGESIZE
    assert float(both["process_virtual_memory_bytes"]) == 1234567890 + 2000
    assert both["process_open_fds"] == "12.0"
    assert both["process_start_time_seconds"] == alone["process_start_time_seconds"]
    assert both["process_max_fds"] == alone["process_max_fds"]
