"""The README's two commands, as written, in a fresh copy of the repository and a fresh virtual
environment, as a new user runs them (without the optional extras, without CI=true): the
quickstart serves the simulated host, and the test command installs and runs the tests.

Slow (two installs from PyPI and a Prometheus end-to-end run), so it runs in CI only
(``CI=true``); elsewhere it skips and says so. The test command's pytest is narrowed through
``PYTEST_ADDOPTS`` to the tests that broke for a new user (the dashboards' end-to-end data check
without the libvirt extra, collection under any extra) plus a collection of the whole suite: the
whole suite already runs once in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from ci_helpers import in_ci

from vgpumon.config.table import DEFAULT_PORT

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
INSTALL_SECONDS = 900
SERVE_SECONDS = 120
# What the inner run of the test command runs (the whole suite is this CI run's own).
NARROWED = (
    "tests/e2e/test_dashboards_e2e.py tests/repo/test_readme.py tests/config/test_settings_table.py"
)

pytestmark = pytest.mark.skipif(
    not in_ci(), reason="slow (fresh installs from PyPI): runs in CI only (CI=true)"
)


def _commands() -> tuple[str, str]:
    blocks = [b.strip() for b in re.findall(r"```sh\n(.*?)```", README, flags=re.S)]
    quickstart = next(b for b in blocks if "vgpumon serve --sim" in b)
    test = next(b for b in blocks if ".venv/bin/pytest" in b)
    return quickstart, test


def _user_env() -> dict[str, str]:
    """A developer's environment: not CI (missing extras skip), nothing of this test run."""
    drop = ("CI", "PYTEST_ADDOPTS", "PYTHONPATH", "VIRTUAL_ENV", "PYTEST_CURRENT_TEST")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("VGPUMON_")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))
    )
    return env


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files (tracked, and new ones not ignored), as a clean clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    copy = tmp_path_factory.mktemp("readme") / "vgpumon"
    for name in listed.stdout.decode().split("\0"):
        source = ROOT / name
        if name and source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


def _metrics() -> str | None:
    try:
        with urllib.request.urlopen(f"http://localhost:{DEFAULT_PORT}/metrics", timeout=5) as r:
            return str(r.read().decode())
    except OSError:
        return None


def test_the_quickstart_serves_the_simulated_host(checkout: Path) -> None:
    quickstart, _ = _commands()
    assert _metrics() is None, f"port {DEFAULT_PORT} is taken: the quickstart needs it"
    log = checkout / "quickstart.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["bash", "-c", quickstart],
            cwd=checkout,
            env=_user_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        give_up = time.monotonic() + INSTALL_SECONDS + SERVE_SECONDS
        text = None
        while time.monotonic() < give_up and proc.poll() is None:
            text = _metrics()
            if text and "vgpumon_vgpu_" in text:
                break
            time.sleep(1.0)
        assert proc.poll() is None, log.read_text()[-4000:]
        assert text and "vgpumon_vgpu_utilization_ratio" in text, log.read_text()[-4000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


def test_the_test_command_installs_and_passes(checkout: Path) -> None:
    _, command = _commands()
    env = _user_env()
    env["PYTEST_ADDOPTS"] = f"-p no:cacheprovider -q {NARROWED}"
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=INSTALL_SECONDS,
        check=False,
    )
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert re.search(r"\d+ passed", done.stdout), tail
    # The whole suite collects in that environment (no extra's absence is a collection error).
    collected = subprocess.run(
        [str(checkout / ".venv/bin/pytest"), "-p", "no:cacheprovider", "-q", "--collect-only"],
        cwd=checkout,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert collected.returncode == 0, (collected.stdout + collected.stderr)[-4000:]
