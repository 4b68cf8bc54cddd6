"""`vgpumon serve` on a large host answers while its sampler keeps the interpreter (issue 31,
finding 1).

CPython runs one thread's Python at a time. A sampler thread busy with Python (the collectors of a
768-vGPU host, the simulated driver) kept the event loop of the same process from answering for
the length of its work: one block of about 270 ms per cycle on a 16 GPU x 48 vGPU host. Here the
NVML module of a vGPU host holds the interpreter for 1.5 s in one of every cycle's calls, the way
a long stretch of the sampler's Python does, only longer and without a single switch: a scrape
must still be answered at once, because a large host's sampler runs in a process of its own
(vgpumon.collect.placement).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from export_helpers import free_port

from vgpumon.nvml.loader import ENV_MODULE

# The simulator, except that the temperature call holds the interpreter for 1.5 s (ctypes.PyDLL
# keeps the GIL while the foreign function runs; CDLL, pynvml's way, releases it).
HOLDING_MODULE = """
import ctypes

import vgpumon.sim as sim

_sim = sim.create("kvm-vgpu-timesliced")
_hold = ctypes.PyDLL(None).usleep


def __getattr__(name):
    return getattr(_sim, name)


def nvmlDeviceGetTemperature(*args):
    _hold(1_500_000)
    return _sim.nvmlDeviceGetTemperature(*args)
"""


def test_scrapes_are_answered_while_the_sampler_holds_the_interpreter(tmp_path: Path) -> None:
    (tmp_path / "holding_nvml.py").write_text(HOLDING_MODULE)
    port = free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]),
        ENV_MODULE: "holding_nvml",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--interval",
            "1",
            "--deadline",
            "10",
            "--log.level",
            "info",
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the first cycle here, then the move (the host is a vGPU host)
            if "the sampler runs in a process of its own now" in line:
                break
        else:
            raise AssertionError("the sampler did not move")
        # Eight scrapes over 2.4 s: with the interpreter held 1.5 s of every 1.5-2.5 s, a sampler
        # in this process would leave most of them waiting a second and more.
        slowest = 0.0
        for _ in range(8):
            began = time.monotonic()
            with urllib.request.urlopen(base + "/metrics", timeout=10) as resp:
                assert resp.status == 200 and b"vgpumon_gpu_temperature_celsius" in resp.read()
            slowest = max(slowest, time.monotonic() - began)
            time.sleep(0.3)
        assert slowest < 0.5, f"a scrape waited {slowest:.2f} s for the sampler"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
