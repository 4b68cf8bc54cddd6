"""Output that cannot be written: one line and a non-zero exit, never a traceback; a reader that
goes away early (``| head``, ``| true``) is not an error, as for other command-line tools."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SNAPSHOT = f"{sys.executable} -m vgpumon.cli snapshot --sim kvm-vgpu-timesliced --interval 0"
RECORD = f"{sys.executable} -m vgpumon.cli record --sim passthrough-guest --interval 0"


def shell(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["", "--json", "--format openmetrics"])
def test_full_disk_is_one_line(fmt: str) -> None:
    result = shell(f"{SNAPSHOT} {fmt} >/dev/full")
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == [
        "vgpumon: error: cannot write output: No space left on device"
    ]


@pytest.mark.parametrize(
    "command",
    [RECORD, f"{SNAPSHOT} --json", f"{SNAPSHOT}"],
    ids=["record", "snapshot-json", "snapshot-table"],
)
def test_closed_stdout_is_one_line(command: str) -> None:
    result = shell(f"{command} >&-")
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == [
        "vgpumon: error: cannot write output: standard output is closed"
    ]


@pytest.mark.parametrize("fmt", ["", "--json", "--format openmetrics"])
def test_reader_leaving_early_is_success(fmt: str) -> None:
    result = shell(f"{SNAPSHOT} {fmt} | true; exit ${{PIPESTATUS[0]}}")
    assert result.returncode == 0, result
    assert result.stderr == ""
