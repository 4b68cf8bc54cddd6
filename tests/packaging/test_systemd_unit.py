"""The systemd unit: ``systemd-analyze verify`` is clean and ``security`` rates it 2.0 or better.

Both run offline on the unit file (no systemd as PID 1 needed). ``verify`` checks that ExecStart's
program exists, so the check runs on a copy whose ExecStart points at this checkout's vgpumon.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "vgpumon.service"
INSTALLED = "/opt/vgpumon/bin/vgpumon"
# systemd-analyze security's exposure, 0 (locked down) to 10 (unprotected), times ten.
THRESHOLD = 20


def systemd_analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is required in CI (Debian package systemd; see .ci/run)")
        pytest.skip("systemd-analyze not installed (apt-get install systemd)")
    return found


@pytest.fixture
def unit(tmp_path: Path) -> Path:
    text = UNIT.read_text(encoding="utf-8")
    assert f"ExecStart={INSTALLED} " in text
    program = Path(sys.executable).parent / "vgpumon"
    assert program.exists(), "the checkout's venv has the vgpumon entry point"
    copy = tmp_path / UNIT.name
    copy.write_text(text.replace(INSTALLED, str(program)))
    return copy


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [systemd_analyze(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_systemd_analyze_verify_is_clean(unit: Path) -> None:
    result = analyze("verify", str(unit))
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


def test_systemd_analyze_security_rates_the_unit_ok(unit: Path) -> None:
    result = analyze("security", "--offline=true", f"--threshold={THRESHOLD}", str(unit))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    score = re.search(r"Overall exposure level for \S+: ([0-9.]+)", output)
    assert score is not None, output[-2000:]
    assert float(score.group(1)) <= THRESHOLD / 10


def test_a_weakened_unit_fails_the_security_threshold(unit: Path) -> None:
    """The threshold can fail: the same unit without its sandboxing is rated far worse."""
    keep = ("[Unit]", "[Service]", "[Install]", "Description=", "ExecStart=", "WantedBy=")
    lines = unit.read_text().splitlines()
    unit.write_text("\n".join(line for line in lines if line.startswith(keep)) + "\n")
    result = analyze("security", "--offline=true", f"--threshold={THRESHOLD}", str(unit))
    assert result.returncode != 0


def test_the_unit_runs_as_the_sysusers_user() -> None:
    text = UNIT.read_text(encoding="utf-8")
    sysusers = (UNIT.parent / "vgpumon.sysusers.conf").read_text(encoding="utf-8")
    assert "User=vgpumon" in text
    assert re.search(r"^u vgpumon ", sysusers, re.M)
    for setting in ("ProtectSystem=strict", "NoNewPrivileges=yes", "DevicePolicy=closed"):
        assert setting in text
