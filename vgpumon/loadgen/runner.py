"""Start, steer and stop load worker processes: the API behind ``vgpumon load`` and ``validate``.

Load always runs in child processes, even one: their PIDs are what NVML attributes memory and
utilization to (so validate can check process attribution), a device is chosen by giving the
child ``CUDA_VISIBLE_DEVICES`` (the one way that works for MIG devices too), and a worker that
crashes or hangs can be killed without taking the caller's CUDA state with it. Workers run in their
own session so a terminal's Ctrl-C reaches only the controller, which stops them in order.

Typical ladder::

    with LoadRunner(LoadSpec(duty=0.25, memory_bytes=1 << 30)) as runner:
        pids = runner.pids
        for duty in (0.25, 0.5, 0.75, 1.0):
            runner.update(duty=duty)      # returns once every worker applied it
            ...sample NVML...
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import IO, Any

from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.install_hints import install_hint
from vgpumon.loadgen.driver import CHANGEABLE
from vgpumon.loadgen.spec import LoadSpec, memory_shares, visible_devices_for

EventCallback = Callable[[dict[str, Any]], None]


def cuda_core_installed() -> bool:
    """Whether some release of cuda-core can be imported (without importing it)."""
    for name in ("cuda.core", "cuda.core.experimental"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


@dataclass(frozen=True)
class WorkerInfo:
    """A worker that reported ready: its PID and what it found on the device."""

    rank: int
    pid: int
    name: str
    uuid: str
    sm_count: int
    compute_capability: str
    blocks: int
    threads_per_block: int
    memory_bytes: int
    sm_clock_hz: int
    ready_event: Mapping[str, Any] = field(repr=False)

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> WorkerInfo:
        return cls(
            rank=int(event["rank"]),
            pid=int(event["pid"]),
            name=str(event.get("name", "")),
            uuid=str(event.get("uuid", "")),
            sm_count=int(event.get("sm_count", 0)),
            compute_capability=str(event.get("compute_capability", "")),
            blocks=int(event.get("blocks", 0)),
            threads_per_block=int(event.get("threads_per_block", 0)),
            memory_bytes=int(event.get("memory_bytes", 0)),
            sm_clock_hz=int(event.get("sm_clock_hz", 0)),
            ready_event=dict(event),
        )


class _Worker:
    """One child process and what its stdout said so far (written by its reader thread)."""

    def __init__(self, rank: int, proc: subprocess.Popen[str]) -> None:
        self.rank = rank
        self.proc = proc
        self.cond = threading.Condition()
        self.ready: dict[str, Any] | None = None
        self.error: str | None = None
        self.stopped: dict[str, Any] | None = None
        self.status: dict[str, Any] | None = None
        self.answers: dict[int, dict[str, Any]] = {}
        self.closed = False
        self.thread: threading.Thread | None = None

    def send(self, message: Mapping[str, Any]) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.closed:
            return
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            stdin.write(json.dumps(message) + "\n")
            stdin.flush()

    def close_stdin(self) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.closed:
            with contextlib.suppress(BrokenPipeError, OSError, ValueError):
                stdin.close()


class LoadRunner:
    """Runs a :class:`LoadSpec` in ``spec.processes`` worker processes.

    ``on_event`` is called, from reader threads, with every event a worker prints (``ready``,
    ``status``, ``applied``, ``rejected``, ``stopped``, ``error``; see
    :mod:`vgpumon.loadgen.worker`), each carrying ``pid`` and ``rank``. ``worker_command`` replaces
    ``python -m vgpumon.loadgen.worker`` (the spec, rank and status interval are appended).
    """

    def __init__(
        self,
        spec: LoadSpec,
        *,
        status_interval_s: float = 1.0,
        ready_timeout_s: float = 120.0,
        on_event: EventCallback | None = None,
        worker_command: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.spec = spec.validate()
        self._status_interval = status_interval_s
        self._ready_timeout = ready_timeout_s
        self._on_event = on_event
        self._custom_worker = worker_command is not None
        self._command = list(worker_command or [sys.executable, "-m", "vgpumon.loadgen.worker"])
        self._env = dict(os.environ if env is None else env)
        self._workers: list[_Worker] = []
        self._seq = 0
        self._started = False

    # --------------------------------------------------------------------------- lifecycle

    def start(self) -> list[int]:
        """Start the workers; return their PIDs once every one is loading the GPU.

        Raises :class:`VgpumonError` (after stopping any that did start) when cuda-core is missing,
        a worker reports an error (no driver, no GPU, out of memory…), exits early, or is not ready
        within ``ready_timeout_s``.
        """
        if self._started:
            raise VgpumonError("this load is already started")
        if not self._custom_worker and not cuda_core_installed():
            raise VgpumonError(f"cuda-core is not installed: {install_hint('load')}")
        self._started = True
        visible = visible_devices_for(self.spec.device, self._env.get("CUDA_VISIBLE_DEVICES"))
        env = {**self._env, "CUDA_VISIBLE_DEVICES": visible, "PYTHONUNBUFFERED": "1"}
        shares = memory_shares(self.spec.memory_bytes, self.spec.processes)
        try:
            for rank, share in enumerate(shares):
                worker_spec = replace(self.spec, memory_bytes=share, processes=1)
                argv = [
                    *self._command,
                    "--spec",
                    json.dumps(worker_spec.to_dict()),
                    "--rank",
                    str(rank),
                    "--status-interval",
                    str(self._status_interval),
                ]
                proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    bufsize=1,
                    env=env,
                    start_new_session=True,
                )
                worker = _Worker(rank, proc)
                worker.thread = threading.Thread(
                    target=self._read, args=(worker,), name=f"load-worker-{rank}", daemon=True
                )
                worker.thread.start()
                self._workers.append(worker)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.pids

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._ready_timeout
        for worker in self._workers:
            with worker.cond:
                while worker.ready is None and worker.error is None and not worker.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise VgpumonError(
                            f"load worker {worker.proc.pid} was not ready within "
                            f"{self._ready_timeout:g} s"
                        )
                    worker.cond.wait(min(left, 0.5))
                if worker.error is not None:
                    raise VgpumonError(worker.error)
                if worker.ready is None:
                    code = worker.proc.wait()
                    raise VgpumonError(
                        f"load worker {worker.proc.pid} exited with status {code} before it was "
                        "ready (its messages are above)"
                    )

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop every worker (stdin closed + SIGTERM, SIGKILL after ``timeout_s``); idempotent."""
        for worker in self._workers:
            if worker.proc.poll() is None:
                worker.send({"cmd": "stop"})
                worker.close_stdin()
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for worker in self._workers:
            try:
                worker.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.kill()
                worker.proc.wait()
            worker.close_stdin()
            if worker.thread is not None:
                worker.thread.join(5.0)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for the workers to end by themselves (duration over); True if all have."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for worker in self._workers:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                worker.proc.wait(left)
            except subprocess.TimeoutExpired:
                return False
        for worker in self._workers:
            if worker.thread is not None:
                worker.thread.join(5.0)
        return True

    def __enter__(self) -> LoadRunner:
        if not self._started:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------------------- steering

    def update(self, *, timeout_s: float = 10.0, **changes: Any) -> None:
        """Change duty, sm_fraction, kernel, warps_per_block or period_s of the running load.

        Returns once every worker applied the change at a period boundary; raises
        :class:`VgpumonError` if a worker rejects it (an unsupported kernel) or does not answer.
        Memory, device and process count cannot change: start a new runner for those.
        """
        unknown = sorted(set(changes) - set(CHANGEABLE))
        if unknown:
            raise ConfigError(
                f"cannot change {', '.join(unknown)} of a running load "
                f"(only {', '.join(CHANGEABLE)})"
            )
        new_spec = self.spec.with_changes(**changes)
        self._seq += 1
        seq = self._seq
        for worker in self._workers:
            worker.send({"cmd": "set", "seq": seq, "changes": changes})
        deadline = time.monotonic() + timeout_s
        for worker in self._workers:
            with worker.cond:
                while seq not in worker.answers and not worker.closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise VgpumonError(
                            f"load worker {worker.proc.pid} did not apply the change within "
                            f"{timeout_s:g} s"
                        )
                    worker.cond.wait(min(left, 0.5))
                answer = worker.answers.get(seq)
            if answer is None:
                raise VgpumonError(
                    worker.error or f"load worker {worker.proc.pid} exited during the change"
                )
            if answer.get("event") == "rejected":
                raise VgpumonError(str(answer.get("message")))
        self.spec = new_spec

    # ------------------------------------------------------------------------------- state

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    @property
    def workers(self) -> list[WorkerInfo]:
        """The workers that reported ready, by rank."""
        return [WorkerInfo.from_event(w.ready) for w in self._workers if w.ready is not None]

    def statuses(self) -> list[dict[str, Any] | None]:
        """Each worker's latest ``status`` event (measured duty, SM clock), by rank."""
        return [None if w.status is None else dict(w.status) for w in self._workers]

    def results(self) -> list[dict[str, Any] | None]:
        """Each worker's ``stopped`` summary, by rank (``None`` where it did not stop cleanly)."""
        return [None if w.stopped is None else dict(w.stopped) for w in self._workers]

    @property
    def errors(self) -> list[str]:
        return [w.error for w in self._workers if w.error is not None]

    @property
    def returncodes(self) -> list[int | None]:
        return [w.proc.poll() for w in self._workers]

    @property
    def running(self) -> bool:
        return any(w.proc.poll() is None for w in self._workers)

    # ----------------------------------------------------------------------------- reading

    def _read(self, worker: _Worker) -> None:
        stream: IO[str] | None = worker.proc.stdout
        try:
            if stream is None:
                return
            for line in stream:
                event = _parse_event(line, worker)
                if event is None:
                    continue
                with worker.cond:
                    kind = event.get("event")
                    if kind == "ready":
                        worker.ready = event
                    elif kind == "error":
                        worker.error = str(event.get("message", "load worker failed"))
                    elif kind == "status":
                        worker.status = event
                    elif kind == "stopped":
                        worker.stopped = event
                    elif kind in ("applied", "rejected") and isinstance(event.get("seq"), int):
                        worker.answers[event["seq"]] = event
                    worker.cond.notify_all()
                if self._on_event is not None:
                    self._on_event(event)
        finally:
            with worker.cond:
                worker.closed = True
                worker.cond.notify_all()


def _parse_event(line: str, worker: _Worker) -> dict[str, Any] | None:
    text = line.strip()
    if not text:
        return None
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        event = None
    if not isinstance(event, dict) or "event" not in event:
        return {"event": "output", "line": text, "pid": worker.proc.pid, "rank": worker.rank}
    event.setdefault("pid", worker.proc.pid)
    event.setdefault("rank", worker.rank)
    return event
