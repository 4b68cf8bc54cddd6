"""What puts the load on the device for each validate step: real CUDA workers, or the simulator.

A driver turns a step's :class:`StepLoad` into running load and reports the workers as
:class:`WorkerInfo` (PID, SMs, blocks, footprint), which is what the expectations are computed
from. Changes of duty and SM fraction are applied live (the PIDs stay); a different footprint or
process count starts new workers, as :class:`LoadRunner` requires.

:class:`SimDriver` mirrors a ``vgpumon load`` run on the simulator: fresh PIDs on every start,
one block per SM, each process holding its footprint share plus a CUDA context, so the same ladder
and the same checks run without a GPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from vgpumon.errors import VgpumonError
from vgpumon.loadgen.runner import LoadRunner, WorkerInfo
from vgpumon.loadgen.spec import LoadSpec, blocks_for, memory_shares
from vgpumon.validate.readings import Target
from vgpumon.validate.steps import StepLoad

# The memory one CUDA context was seen to hold, the default per-process allowance (the figure and
# its source: docs/measurements.md).
H200_CONTEXT_BYTES = 520 * 1024**2


@runtime_checkable
class LoadDriver(Protocol):
    @property
    def name(self) -> str: ...

    async def apply(self, load: StepLoad | None) -> list[WorkerInfo]:
        """Run this load from now on (``None``: nothing); return the workers running it."""
        ...

    def problem(self) -> str | None:
        """Why the load is not running as asked (a worker died), or None."""
        ...

    def measured_duty(self) -> Mapping[int, float]:
        """Each worker's own latest measurement of its duty, by PID (may be empty)."""
        ...

    async def close(self) -> None: ...


def same_device(worker_uuid: str, target_uuid: str) -> bool:
    """CUDA reports UUIDs without NVML's ``GPU-``/``MIG-`` prefix."""

    def bare(u: str) -> str:
        u = u.strip().lower()
        for prefix in ("gpu-", "mig-"):
            if u.startswith(prefix):
                return u[len(prefix) :]
        return u

    return bare(worker_uuid) == bare(target_uuid)


class RunnerDriver:
    """Real load: :class:`LoadRunner` worker processes on ``device`` (a UUID, preferably)."""

    def __init__(
        self,
        device: str,
        *,
        runner_factory: Callable[..., LoadRunner] = LoadRunner,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = 120.0,
        applied_wait_s: float = 2.0,
    ) -> None:
        self.device = device
        self._factory = runner_factory
        self._env = env
        self._ready_timeout = ready_timeout_s
        self._applied_wait = applied_wait_s
        self._runner: LoadRunner | None = None
        self._shape: tuple[int, int] | None = None  # (memory, processes) of the running load
        self._lock = threading.Lock()
        self._blocks: dict[int, int] = {}
        self._awaiting: set[int] = set()
        self._duty: dict[int, float] = {}

    @property
    def name(self) -> str:
        return f"CUDA load workers on {self.device}"

    def _on_event(self, event: dict[str, Any]) -> None:
        pid = event.get("pid")
        if not isinstance(pid, int):
            return
        kind = event.get("event")
        with self._lock:
            if kind in ("applied", "status", "ready") and isinstance(event.get("blocks"), int):
                self._blocks[pid] = int(event["blocks"])
            if kind == "applied":
                self._awaiting.discard(pid)
            if kind == "status" and isinstance(event.get("duty"), (int, float)):
                self._duty[pid] = float(event["duty"])

    async def apply(self, load: StepLoad | None) -> list[WorkerInfo]:
        if load is None:
            await self._stop()
            return []
        runner = self._runner
        if (
            runner is not None
            and runner.running
            and self._shape
            == (
                load.memory_bytes,
                load.processes,
            )
        ):
            with self._lock:
                self._awaiting = set(runner.pids)
            await asyncio.to_thread(runner.update, duty=load.duty, sm_fraction=load.sm_fraction)
            await self._wait_applied()
        else:
            await self._stop()
            spec = LoadSpec(
                duty=load.duty,
                sm_fraction=load.sm_fraction,
                memory_bytes=load.memory_bytes,
                kernel="spin",
                device=self.device,
                processes=load.processes,
            ).validate()
            kwargs: dict[str, Any] = {
                "on_event": self._on_event,
                "ready_timeout_s": self._ready_timeout,
            }
            if self._env is not None:
                kwargs["env"] = self._env
            runner = self._factory(spec, **kwargs)
            self._runner = runner
            self._shape = (load.memory_bytes, load.processes)
            await asyncio.to_thread(runner.start)
        return self._workers(load)

    async def _wait_applied(self) -> None:
        # The runner returns once every worker applied the change; the "applied" events (with the
        # new block count) reach our callback a moment later, from the reader threads.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._applied_wait
        while loop.time() < deadline:
            with self._lock:
                if not self._awaiting:
                    return
            await asyncio.sleep(0.01)

    def _workers(self, load: StepLoad) -> list[WorkerInfo]:
        assert self._runner is not None
        out = []
        with self._lock:
            for w in self._runner.workers:
                blocks = None if w.pid in self._awaiting else self._blocks.get(w.pid)
                if blocks is None:
                    blocks = blocks_for(load.sm_fraction, w.sm_count) if w.sm_count > 0 else 0
                out.append(dataclasses.replace(w, blocks=blocks))
        return out

    def problem(self) -> str | None:
        runner = self._runner
        if runner is None:
            return None
        if runner.errors:
            return "; ".join(runner.errors)
        for pid, code in zip(runner.pids, runner.returncodes, strict=False):
            if code is not None:
                return f"load worker {pid} exited with status {code} during the step"
        return None

    def measured_duty(self) -> Mapping[int, float]:
        runner = self._runner
        if runner is None:
            return {}
        pids = set(runner.pids)
        with self._lock:
            return {pid: duty for pid, duty in self._duty.items() if pid in pids}

    async def _stop(self) -> None:
        runner, self._runner, self._shape = self._runner, None, None
        if runner is not None:
            await asyncio.to_thread(runner.stop)

    async def close(self) -> None:
        await self._stop()


class SimDriver:
    """Load on a simulated GPU or MIG device, through :mod:`vgpumon.sim.live`.

    Several processes time-slice: the simulated GPU is busy for the union of their phases,
    modelled as independent (1 − Π(1 − duty)), and each process reads its own duty.
    """

    def __init__(
        self,
        module: Any,
        target: Target,
        *,
        context_bytes: int = H200_CONTEXT_BYTES,
        first_pid: int = 41000,
    ) -> None:
        self.module = module
        self.target = target
        self.context_bytes = context_bytes
        self._next_pid = first_pid
        self._workers: list[WorkerInfo] = []
        self._shape: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return f"simulated load on {self.target.load_device}"

    async def apply(self, load: StepLoad | None) -> list[WorkerInfo]:
        from vgpumon.sim import live

        if load is None:
            live.clear(self.module, self.target.gpu_index, self.target.mig_uuid)
            self._workers, self._shape = [], None
            return []
        sm_count = live.sm_count(self.module, self.target.gpu_index, self.target.mig_uuid)
        blocks = blocks_for(load.sm_fraction, sm_count)
        if self._shape != (load.memory_bytes, load.processes):
            bare = self.target.load_device.split("-", 1)[1]
            self._workers = []
            for rank, share in enumerate(memory_shares(load.memory_bytes, load.processes)):
                self._workers.append(
                    WorkerInfo(
                        rank=rank,
                        pid=self._next_pid,
                        name=self.target.name or "simulated GPU",
                        uuid=bare,
                        sm_count=sm_count,
                        compute_capability="",
                        blocks=blocks,
                        threads_per_block=32,
                        memory_bytes=share,
                        sm_clock_hz=0,
                        ready_event={},
                    )
                )
                self._next_pid += 1
            self._shape = (load.memory_bytes, load.processes)
        self._workers = [dataclasses.replace(w, blocks=blocks) for w in self._workers]
        union = 1.0 - math.prod(1.0 - load.duty for _ in self._workers)
        live.set_load(
            self.module,
            self.target.gpu_index,
            duty=min(1.0, union),
            sm_fraction=blocks / sm_count,
            processes=[
                live.LiveProcess(
                    pid=w.pid,
                    memory_bytes=w.memory_bytes + self.context_bytes,
                    name="vgpumon-load",
                    sm_utilization=load.duty,
                )
                for w in self._workers
            ],
            mig_uuid=self.target.mig_uuid,
        )
        return list(self._workers)

    def problem(self) -> str | None:
        return None

    def measured_duty(self) -> Mapping[int, float]:
        return {}

    async def close(self) -> None:
        from vgpumon.sim import live

        with contextlib.suppress(VgpumonError):
            live.clear(self.module, self.target.gpu_index, self.target.mig_uuid)
