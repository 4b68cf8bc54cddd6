"""The systemd unit: ``systemd-analyze verify`` is clean and ``security`` rates it 2.0 or better.

Both run offline on the unit file (no systemd as PID 1 needed). ``verify`` checks that ExecStart's
program exists, so the check runs on a copy whose ExecStart points at this checkout's vgpumon.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from ci_helpers import tool

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "vgpumon.service"
INSTALLED = "/opt/vgpumon/bin/vgpumon"
# systemd-analyze security's exposure, 0 (locked down) to 10 (unprotected), times ten.
THRESHOLD = 20


def systemd_analyze() -> str:
    return tool("systemd-analyze", "Debian package systemd")


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


DEFAULTS = UNIT.parent / "vgpumon.default"


def test_arguments_come_from_the_environment_file() -> None:
    """Deployments edit /etc/default/vgpumon, not the unit (the file is optional)."""
    text = UNIT.read_text(encoding="utf-8")
    assert "EnvironmentFile=-/etc/default/vgpumon" in text
    (exec_start,) = re.findall(r"^ExecStart=(.+)$", text, re.M)
    assert exec_start == f"{INSTALLED} serve $VGPUMON_ARGS"
    assert re.search(r"^Environment=VGPUMON_ARGS=\S", text, re.M), "a default without the file"
    assert re.search(r'^VGPUMON_ARGS="[^"]+"$', DEFAULTS.read_text(encoding="utf-8"), re.M)


def _get(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_reload_rereads_the_web_config_the_arguments_name(tmp_path: Path) -> None:
    """What the unit's reload comment says: SIGHUP (ExecReload) re-reads --web.config.file.

    Runs serve with the example arguments of vgpumon.default (files moved to tmp_path), adds a
    basic-auth user to the web config, sends the unit's reload signal and sees 401 without
    credentials where the scrape answered 200 before."""
    import signal
    import time

    import bcrypt
    from export_helpers import free_port

    text = UNIT.read_text(encoding="utf-8")
    assert re.search(r"^ExecReload=/bin/kill -HUP \$MAINPID$", text, re.M)
    (example,) = re.findall(r'^#\s+VGPUMON_ARGS="(.+)"$', DEFAULTS.read_text(), re.M)
    args = shlex.split(example.replace("/etc/vgpumon", str(tmp_path)))
    assert any(a.startswith("--config=") for a in args)
    assert any(a.startswith("--web.config.file=") for a in args)
    (tmp_path / "config.yml").write_text("interval: 1\n")
    web_config = tmp_path / "web-config.yml"
    web_config.write_text("{}\n")
    port = free_port()
    args = [a for a in args if not a.startswith("--web.listen-address")] + [
        f"--web.listen-address=127.0.0.1:{port}"
    ]
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpumon.cli", "serve", "--sim", "passthrough-guest", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            try:
                if _get(url) == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert _get(url) == 200, (tmp_path / "serve.log").read_text()
        hashed = bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=4)).decode()
        web_config.write_text(f"basic_auth_users:\n  prometheus: {hashed}\n")
        proc.send_signal(signal.SIGHUP)
        give_up = time.monotonic() + 15
        while _get(url) != 401 and time.monotonic() < give_up:
            time.sleep(0.2)
        assert _get(url) == 401, (tmp_path / "serve.log").read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
