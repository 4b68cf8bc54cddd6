"""One load process: ``python -m vgpumon.loadgen.worker --spec JSON --rank N``.

Started by :class:`vgpumon.loadgen.runner.LoadRunner` with ``CUDA_VISIBLE_DEVICES`` naming the one
device it loads, so the worker always uses CUDA device 0. It speaks JSON lines:

* stdout, one object per line, each with ``event``, ``pid``, ``rank`` and ``time`` (Unix seconds):
  ``ready`` (device facts, launch geometry, footprint, SM clock), ``status`` (measured duty each
  status interval), ``applied``/``rejected`` (answers to ``set``), ``stopped`` (summary, after the
  memory was freed), ``error`` (one-line message; the exit status is then 2).
* stdin: ``{"cmd": "set", "seq": n, "changes": {...}}`` changes duty, SM fraction, kernel, warps per
  block or period; ``{"cmd": "stop"}`` stops. End of input also stops: a worker whose controller
  died must not keep loading a GPU nobody watches.

SIGTERM, SIGINT and SIGHUP stop it cleanly (kernels drained, memory freed) within one launch.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Sequence
from types import FrameType
from typing import Any, TextIO

from vgpumon.errors import VgpumonError
from vgpumon.loadgen.backend import CudaBackend, CudaCallError, describe_failure, import_cuda_core
from vgpumon.loadgen.driver import DutyCycleDriver
from vgpumon.loadgen.spec import LoadSpec, blocks_for


class _Emitter:
    """Thread-safe JSON-line writer; a vanished reader turns into a stop request."""

    def __init__(self, stream: TextIO, rank: int, stop: threading.Event) -> None:
        self._stream = stream
        self._rank = rank
        self._stop = stop
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any]) -> None:
        record = {**event, "pid": os.getpid(), "rank": self._rank, "time": round(time.time(), 3)}
        line = json.dumps(record, separators=(",", ":"))
        with self._lock:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self._stop.set()


class _StopState:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason = "stopped"

    def request(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()


def _read_commands(stdin: TextIO, commands: queue.Queue[dict[str, Any]], stop: _StopState) -> None:
    for line in stdin:
        line = line.strip()
        if not line:
            continue
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(message, dict):
            continue
        if message.get("cmd") == "stop":
            stop.request("stop command")
        elif message.get("cmd") == "set":
            commands.put({"seq": message.get("seq"), "changes": message.get("changes") or {}})
    stop.request("controller closed stdin")


def _install_signals(stop: _StopState) -> None:
    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.request(f"signal {signal.Signals(signum).name}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vgpumon.loadgen.worker")
    parser.add_argument("--spec", required=True, help="LoadSpec as JSON (this worker's share)")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--status-interval", type=float, default=1.0)
    args = parser.parse_args(argv)

    stop = _StopState()
    emit = _Emitter(sys.stdout, args.rank, stop.event)
    _install_signals(stop)
    commands: queue.Queue[dict[str, Any]] = queue.Queue()
    threading.Thread(
        target=_read_commands, args=(sys.stdin, commands, stop), name="commands", daemon=True
    ).start()

    backend = None
    try:
        try:
            spec = LoadSpec.from_dict(json.loads(args.spec))
        except json.JSONDecodeError as exc:
            raise VgpumonError(f"bad --spec JSON: {exc}") from None
        backend = CudaBackend(spec.memory_bytes, spec.device)
        facts = backend.facts
        if not backend.supports(spec.kernel):
            raise VgpumonError(
                f"the {spec.kernel} kernel needs compute capability 8.0 or newer; "
                f"{facts.name} is {facts.compute_capability[0]}.{facts.compute_capability[1]}"
            )
        clock_hz = backend.calibrate()
        emit(
            {
                "event": "ready",
                "device": spec.device,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "name": facts.name,
                "uuid": facts.uuid,
                "sm_count": facts.sm_count,
                "compute_capability": "{}.{}".format(*facts.compute_capability),
                "memory_total_bytes": facts.memory_total_bytes,
                "memory_bytes": spec.memory_bytes,
                "kernel": spec.kernel,
                "duty": spec.duty,
                "sm_fraction": spec.sm_fraction,
                "blocks": blocks_for(spec.sm_fraction, facts.sm_count),
                "threads_per_block": spec.threads_per_block,
                "period_s": spec.period_s,
                "duration_s": spec.duration_s,
                "sm_clock_hz": round(clock_hz),
                "globaltimer_ok": backend.timer_ok,
                "cuda_core": getattr(import_cuda_core(), "__version__", None),
            }
        )
        driver = DutyCycleDriver(
            backend,
            spec,
            sm_count=facts.sm_count,
            clock_hz=clock_hz,
            emit=emit,
            commands=commands,
            status_interval_s=args.status_interval,
        )
        summary = driver.run(stop.event)
        if summary["reason"] == "stopped":
            summary["reason"] = stop.reason
        backend.close()
        backend = None
        emit({"event": "stopped", **summary, "memory_freed": True})
        return 0
    except VgpumonError as err:
        emit({"event": "error", "message": str(err)})
        return err.exit_code
    except Exception as exc:
        # CUDA failing mid-run (a lost GPU, an Xid) is the user's to know, in one line; anything
        # else is a bug and keeps its traceback.
        if not (isinstance(exc, CudaCallError) or type(exc).__module__.startswith("cuda")):
            raise
        failure = describe_failure(
            exc, "running the load", os.environ.get("CUDA_VISIBLE_DEVICES", "0")
        )
        emit({"event": "error", "message": str(failure)})
        return failure.exit_code
    finally:
        if backend is not None:
            backend.close()


if __name__ == "__main__":
    sys.exit(main())
