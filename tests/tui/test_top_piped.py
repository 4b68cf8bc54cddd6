"""``vgpumon top`` whose output is not a terminal (``top | cat``, ``top > file``): one reading as
text, then exit; no screen drawn into the pipe."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from terminal_helpers import VGPUMON, exporter

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with exporter("kvm-vgpu-timesliced") as found:
        yield found


def top(*args: str) -> subprocess.CompletedProcess[str]:
    # stdin stays a terminal-less pipe too; the bound is generous for a loaded machine.
    return subprocess.run(
        [VGPUMON, "top", *args], capture_output=True, text=True, timeout=90, stdin=subprocess.PIPE
    )


def test_one_host_prints_as_snapshot_prints() -> None:
    done = top("--sim", "kvm-vgpu-timesliced")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\x1b" not in out  # no screen, no colours: text
    assert out.startswith("sim:kvm-vgpu-timesliced  driver ")
    for section in ("GPUs", "Activity", "Processes", "vGPU instances", "vGPU scheduler"):
        assert f"\n{section}\n" in out, out


def test_a_fleet_prints_a_row_per_host_problems_first(url: str, tmp_path: Path) -> None:
    refused = "http://127.0.0.1:1"
    targets = tmp_path / "targets.txt"
    targets.write_text(f"{url}\n{refused}\n")
    done = top("--targets", str(targets))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "127.0.0.1:" in line]
    assert len(lines) == 2
    assert "127.0.0.1:1 " in lines[0] and "unreachable" in lines[0]  # the problem host first
    assert url.removeprefix("http://") in lines[1] and " up " in lines[1]


def test_a_lone_host_that_does_not_answer_is_one_line() -> None:
    done = top("--url", "http://127.0.0.1:1")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "127.0.0.1:1" in done.stderr
