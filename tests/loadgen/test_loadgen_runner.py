"""LoadRunner's process handling, against a stand-in worker that speaks the worker's JSON protocol.

The stand-in replaces only the GPU part: the runner's spawning, environment, footprint split,
ready/error/exit handling, ``set`` round trips and stopping are the real code.
"""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.loadgen.runner import LoadRunner, cuda_core_installed
from vgpumon.loadgen.spec import LoadSpec

STAND_IN = textwrap.dedent(
    r"""
    import json, os, signal, sys, threading, time
    args = sys.argv[1:]
    spec = json.loads(args[args.index("--spec") + 1])
    rank = int(args[args.index("--rank") + 1])
    mode = os.environ.get("STAND_IN_MODE", "ok")

    lock = threading.Lock()

    def emit(**event):
        event.update(pid=os.getpid(), rank=rank)
        with lock:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()

    if mode == "error":
        emit(event="error", message="no CUDA GPU found for device 0: stand-in")
        sys.exit(2)
    if mode == "crash":
        sys.exit(3)
    if mode == "hang":
        time.sleep(60)
    stop = threading.Event()
    reason = []
    signal.signal(signal.SIGTERM, lambda *a: (reason.append("SIGTERM"), stop.set()))
    emit(event="ready", name="Stand-in GPU", uuid="0000", sm_count=132,
         compute_capability="9.0", blocks=round(spec["sm_fraction"] * 132),
         threads_per_block=32 * spec["warps_per_block"], memory_bytes=spec["memory_bytes"],
         sm_clock_hz=1980000000, processes=spec["processes"],
         cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"))

    def read():
        for line in sys.stdin:
            msg = json.loads(line)
            if msg["cmd"] == "set":
                if msg["changes"].get("kernel") == "tensor":
                    emit(event="rejected", seq=msg["seq"], message="no tensor kernel here")
                else:
                    emit(event="applied", seq=msg["seq"], **msg["changes"])
            elif msg["cmd"] == "stop":
                reason.append("stop command")
                stop.set()
        reason.append("stdin closed")
        stop.set()

    threading.Thread(target=read, daemon=True).start()
    t0 = time.time()
    while not stop.is_set():
        if spec["duration_s"] is not None and time.time() - t0 >= spec["duration_s"]:
            reason.append("duration")
            break
        emit(event="status", duty=spec["duty"])
        stop.wait(0.05)
    emit(event="stopped", reason=reason[0], memory_freed=True)
    """
)


@pytest.fixture
def stand_in(tmp_path: Path) -> list[str]:
    script = tmp_path / "stand_in_worker.py"
    script.write_text(STAND_IN)
    return [sys.executable, str(script)]


def _env(mode: str = "ok", **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return {**env, "STAND_IN_MODE": mode, **extra}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_reports_pids_and_splits_memory(stand_in: list[str]) -> None:
    events: list[dict[str, Any]] = []
    spec = LoadSpec(duty=0.5, memory_bytes=10 * 1024**2 + 3, processes=3, device="1")
    runner = LoadRunner(spec, worker_command=stand_in, env=_env(), on_event=events.append)
    with runner:
        pids = runner.pids
        assert len(set(pids)) == 3
        assert all(_alive(pid) for pid in pids)
        workers = runner.workers
        assert [w.pid for w in workers] == pids
        assert [w.rank for w in workers] == [0, 1, 2]
        assert sum(w.memory_bytes for w in workers) == 10 * 1024**2 + 3
        assert workers[0].memory_bytes == workers[1].memory_bytes + 1
        assert {w.ready_event["processes"] for w in workers} == {1}
        assert {w.ready_event["cuda_visible_devices"] for w in workers} == {"1"}
        time.sleep(0.2)
        assert all(s is not None and s["duty"] == 0.5 for s in runner.statuses())
    assert not runner.running
    assert not any(_alive(pid) for pid in pids)
    reasons = [r["reason"] for r in runner.results() if r]
    assert len(reasons) == 3 and set(reasons) <= {"stop command", "SIGTERM"}
    assert {e["event"] for e in events} >= {"ready", "status", "stopped"}


def test_index_is_resolved_against_callers_visible_devices(stand_in: list[str]) -> None:
    uuid = "GPU-5b3c0d5e-1a2b-3c4d-5e6f-7a8b9c0d1e2f"
    env = _env(CUDA_VISIBLE_DEVICES=f"3,{uuid}")
    with LoadRunner(LoadSpec(device="1"), worker_command=stand_in, env=env) as runner:
        assert runner.workers[0].ready_event["cuda_visible_devices"] == uuid


def test_update_round_trips_and_rejections_raise(stand_in: list[str]) -> None:
    with LoadRunner(LoadSpec(duty=0.25), worker_command=stand_in, env=_env()) as runner:
        runner.update(duty=0.75, sm_fraction=0.5)
        assert (runner.spec.duty, runner.spec.sm_fraction) == (0.75, 0.5)
        with pytest.raises(VgpumonError, match="no tensor kernel"):
            runner.update(kernel="tensor")
        assert runner.spec.kernel == "spin"
        with pytest.raises(ConfigError, match="memory_bytes"):
            runner.update(memory_bytes=1)
        with pytest.raises(ConfigError, match="duty"):
            runner.update(duty=3.0)


def test_duration_ends_workers_by_themselves(stand_in: list[str]) -> None:
    runner = LoadRunner(LoadSpec(duration_s=0.3), worker_command=stand_in, env=_env())
    runner.start()
    assert runner.wait(10.0)
    assert runner.results()[0] is not None and runner.results()[0]["reason"] == "duration"
    assert runner.returncodes == [0]
    runner.stop()


def test_worker_error_becomes_one_line_vgpumon_error(stand_in: list[str]) -> None:
    runner = LoadRunner(LoadSpec(processes=2), worker_command=stand_in, env=_env("error"))
    with pytest.raises(VgpumonError, match="no CUDA GPU found") as info:
        runner.start()
    assert "\n" not in str(info.value)
    assert not runner.running


def test_worker_exiting_early_is_reported(stand_in: list[str]) -> None:
    runner = LoadRunner(LoadSpec(), worker_command=stand_in, env=_env("crash"))
    with pytest.raises(VgpumonError, match="exited with status 3"):
        runner.start()


def test_worker_not_ready_in_time_is_killed(stand_in: list[str]) -> None:
    runner = LoadRunner(LoadSpec(), worker_command=stand_in, env=_env("hang"), ready_timeout_s=0.5)
    with pytest.raises(VgpumonError, match="not ready within"):
        runner.start()
    assert not runner.running


def test_missing_cuda_core_is_reported_before_any_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("vgpumon.loadgen.runner.cuda_core_installed", lambda: False)
    runner = LoadRunner(LoadSpec())
    with pytest.raises(VgpumonError, match=r"install the \[load\] extra: "):
        runner.start()
    assert runner.pids == []


def test_cuda_core_probe_survives_a_blocked_cuda_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda", None)
    assert cuda_core_installed() is False
