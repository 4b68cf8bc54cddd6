"""The load generator on a real GPU: it runs, NVML attributes it, it stops clean.

Skipped unless cuda-core is installed and NVML sees at least one GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from vgpumon.loadgen.runner import LoadRunner, WorkerInfo, cuda_core_installed
from vgpumon.loadgen.spec import LoadSpec

pytestmark = pytest.mark.gpu

MIB = 1024**2
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def nvml() -> Iterator[ModuleType]:
    if not cuda_core_installed():
        pytest.skip("cuda-core is not installed (the [load] extra)")
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver: {exc}")
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            pytest.skip("NVML sees no GPU")
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def _handle(nvml: ModuleType, worker: WorkerInfo) -> Any:
    for prefix in ("GPU-", "MIG-"):
        try:
            return nvml.nvmlDeviceGetHandleByUUID(prefix + worker.uuid)
        except nvml.NVMLError:
            continue
    pytest.skip(f"NVML has no device with CUDA UUID {worker.uuid}")


def _process_memory(nvml: ModuleType, handle: Any, pid: int) -> int | None:
    for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
        if proc.pid == pid:
            return int(proc.usedGpuMemory or 0)
    return None


def _until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def test_load_is_attributed_to_its_pid_with_its_footprint(nvml: ModuleType) -> None:
    spec = LoadSpec(duty=0.5, memory_bytes=512 * MIB, period_s=0.05)
    with LoadRunner(spec, status_interval_s=0.5) as runner:
        worker = runner.workers[0]
        assert worker.sm_count > 0 and worker.blocks == worker.sm_count
        handle = _handle(nvml, worker)
        assert _until(lambda: (_process_memory(nvml, handle, worker.pid) or 0) >= 512 * MIB, 10)
        assert _until(lambda: runner.statuses()[0] is not None, 5)
        time.sleep(1.2)
        status = runner.statuses()[0]
        assert status is not None
        assert status["duty"] == pytest.approx(0.5, abs=0.05)
        runner.update(duty=1.0, sm_fraction=0.5)
        assert runner.spec.duty == 1.0
    assert _until(lambda: _process_memory(nvml, handle, worker.pid) is None, 10)
    result = runner.results()[0]
    assert result is not None and result["memory_freed"] is True


def test_tensor_and_stream_kernels_run(nvml: ModuleType) -> None:
    spec = LoadSpec(duty=1.0, memory_bytes=256 * MIB, kernel="stream")
    with LoadRunner(spec, status_interval_s=0.3) as runner:
        major = int(runner.workers[0].compute_capability.split(".")[0])
        time.sleep(0.8)
        if major >= 8:
            runner.update(kernel="tensor", warps_per_block=4)
            time.sleep(0.8)
        status = runner.statuses()[0]
        assert status is not None and status["duty"] > 0.9
    assert runner.errors == []


def test_cli_json_lines_give_pids_and_a_clean_exit(nvml: ModuleType) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "vgpumon.cli", "load", "--json", "--duty", "0.3",
         "--duration", "2", "--status-interval", "0.5", "--processes", "2"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    started = next(e for e in events if e["event"] == "started")
    assert len(started["pids"]) == 2
    stopped = [e for e in events if e["event"] == "stopped"]
    assert sorted(e["pid"] for e in stopped) == sorted(started["pids"])
    assert all(e["reason"] == "duration" for e in stopped)
    assert events[-1] == {"event": "exit", "code": 0, "errors": []}
