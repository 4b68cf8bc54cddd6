"""`vgpumon serve` before the driver is loaded: it serves ``vgpumon_up 0`` and says why.

A DaemonSet or a unit that starts before the NVIDIA driver must not die (issue 12): ``serve``
starts, answers ``/-/healthy``, keeps ``/-/ready`` at 503 naming the NVML error, and retries
``nvmlInit`` with backoff, so it comes up by itself once the driver answers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from export_helpers import free_port

from vgpumon.nvml.loader import ENV_MODULE

# nvmlInit fails until the file "driver-loaded" exists next to this module.
LATE_DRIVER_MODULE = """
import os
import pynvml
from pynvml import *  # noqa: F403 - constants and classes, like a real NVML module

_HERE = os.path.dirname(__file__)


def nvmlInit():
    if not os.path.exists(os.path.join(_HERE, "driver-loaded")):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


def nvmlShutdown():
    pass


def nvmlSystemGetDriverVersion():
    return "580.00"


def nvmlSystemGetNVMLVersion():
    return "13.580.00"


def nvmlSystemGetCudaDriverVersion():
    return 13000


def nvmlDeviceGetCount():
    return 0
"""


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def wait_for(check: Callable[[], bool], proc: subprocess.Popen[bytes], seconds: float) -> None:
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"vgpumon serve exited early ({proc.returncode}): {out}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"condition not met within {seconds} s")


def test_serve_starts_without_a_driver_and_comes_up_when_it_loads(tmp_path: Path) -> None:
    (tmp_path / "late_driver_nvml.py").write_text(LATE_DRIVER_MODULE)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": str(tmp_path),
        ENV_MODULE: "late_driver_nvml",
        "PYTHONUNBUFFERED": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "vgpumon.cli", "serve", "--web.listen-address", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{base}/metrics")[0] == 200, proc, 30)
        assert "\nvgpumon_up 0" in "\n" + get(f"{base}/metrics")[1]
        status, body = get(f"{base}/-/ready")
        assert status == 503
        assert "NVML not initialised" in body and "Driver Not Loaded" in body
        (tmp_path / "driver-loaded").write_text("")
        # the backoff starts at 1 s and doubles: well within 30 s
        wait_for(lambda: get(f"{base}/-/ready")[0] == 200, proc, 30)
        # the body of the new snapshot may be published a moment after readiness
        wait_for(lambda: "\nvgpumon_up 1" in "\n" + get(f"{base}/metrics")[1], proc, 10)
    finally:
        proc.kill()
        proc.wait(timeout=10)
