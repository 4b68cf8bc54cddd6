"""Where ``serve``'s sampler runs: in the serving process while the host is small, in a process of
its own (:mod:`vgpumon.collect.sampler_process`) once the host is large.

Both layouts keep the event loop answering; they differ in what they cost. The sampler's Python
holds the interpreter, and an event loop in the same process waits for it at each system call
(up to the switch interval each time, often several while many threads are busy). How much Python
a cycle is grows with what the host has: a bare GPU is about thirty NVML calls and a few hundred
microseconds of Python, where a 16 GPU x 48 vGPU host is some 5,900 calls and a hundred
milliseconds and more. A second process costs a second interpreter, and next to NVML's own
footprint that is what decides whether a small exporter stays smaller than its peers (about 30 MB
resident on top of one process that loads NVML). So:

* **small host** (at most :data:`SMALL_HOST_GPUS` GPUs, none in vGPU host mode, none with MIG
  enabled): the sampler stays in the serving process. Its Python per cycle is small and broken
  up by NVML calls, which let the interpreter go (bench/results/ measures the loop's stalls);
* **large host** (anything else, including a vGPU host with no VM running yet, which may run 48
  vGPUs per GPU an hour later): the sampler runs in a process of its own from its first cycle.

Which a host is, is decided before the first cycle, from a few NVML calls on the sampler built
here (:func:`large_by_nvml`: the GPU count, and on at most :data:`SMALL_HOST_GPUS` GPUs their
virtualization and MIG modes). A first cycle of a large host run here would hold the interpreter
for as long as it lasts (seconds on a 16 x 48 host), while the server already answers. So a
large host's sampler here never cycles: the sampler process is launched at once, builds its own
sampler while this process starts serving, and the one here is closed (NVML is shut down here).
Until the process's first snapshot, ``/-/ready`` says the first cycle is not done, as always.

Where NVML does not say before a cycle (the driver not loaded yet: a DaemonSet started first),
the sampler starts here and moves as soon as a snapshot shows a large host. Until the sampler
process's first snapshot the sampler here goes on, so nothing served is missing in between, and
then it closes. The move is one way; what a sampler accumulates (metering's counters, GPM's
previous sample) starts again in the new process, as after a restart. A sampler process that
cannot be started leaves the sampler here, as on a small host.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vgpumon.collect.sampler_process import SamplerProcess, SamplerStartFailed
from vgpumon.collect.threads import daemon_thread
from vgpumon.feed import tell
from vgpumon.model import Snapshot
from vgpumon.nvml.enums import VIRTUALIZATION_MODES

if TYPE_CHECKING:
    from vgpumon.collect.recipe import SamplerRecipe
    from vgpumon.collect.sampler import Sampler

log = logging.getLogger(__name__)

SMALL_HOST_GPUS = 2
# How long the probe before the first cycle may take before the host counts as not known
# (a driver that does not answer: the sampler's own deadline then deals with it).
PROBE_TIMEOUT_SECONDS = 2.0


def is_large(count: int, modes: Iterable[tuple[str | None, bool | None]]) -> bool:
    """The one rule (module docstring): more than :data:`SMALL_HOST_GPUS` GPUs, or a GPU in vGPU
    host mode or with MIG enabled. ``modes`` holds each GPU's virtualization mode (as
    ``VIRTUALIZATION_MODES`` names it) and current MIG mode, None where not known."""
    return count > SMALL_HOST_GPUS or any(virt == "host_vgpu" or bool(mig) for virt, mig in modes)


def large_by_nvml(module: Any) -> bool | None:
    """:func:`is_large` from NVML before any cycle; None when NVML does not say (not
    initialised, the count or a handle unanswered).

    At most ``1 + 3 x SMALL_HOST_GPUS`` calls: a host of more GPUs is large by its count alone. A
    GPU whose mode calls are not supported has no vGPU host mode and no MIG, as its cycle says.
    """
    try:
        count = int(module.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001 - any failure: not known here
        return None
    modes: list[tuple[str | None, bool | None]] = []
    for index in range(count if count <= SMALL_HOST_GPUS else 0):
        try:
            handle = module.nvmlDeviceGetHandleByIndex(index)
        except Exception:  # noqa: BLE001
            return None
        virt: str | None = None
        mig: bool | None = None
        with contextlib.suppress(Exception):
            virt = VIRTUALIZATION_MODES.get(module.nvmlDeviceGetVirtualizationMode(handle))
        with contextlib.suppress(Exception):
            mig = bool(module.nvmlDeviceGetMigMode(handle)[0])
        modes.append((virt, mig))
    return is_large(count, modes)


def probe(module: Any, timeout: float = PROBE_TIMEOUT_SECONDS) -> bool | None:
    """:func:`large_by_nvml` on a thread of its own, bounded: a call that hangs is left there,
    and the host counts as not known."""
    answer: list[bool | None] = [None]

    def ask() -> None:
        answer[0] = large_by_nvml(module)

    thread = daemon_thread(ask, "vgpumon-probe")
    thread.start()
    thread.join(timeout)
    return None if thread.is_alive() else answer[0]


def large_host(snapshot: Snapshot) -> bool:
    """:func:`is_large` from a snapshot: whether the host's sampler belongs in a process of its
    own (module docstring)."""
    gpus = snapshot.gpus
    return is_large(len(gpus), ((g.virtualization_mode, g.mig_mode_current) for g in gpus))


class PlacedSampler:
    """``serve``'s sampler as one snapshot feed, wherever it runs (module docstring).

    :meth:`start` builds the sampler here (a missing NVML module raises, as it always did) and,
    on a host NVML shows large, launches the sampler process and closes the one here; :meth:`run`
    reads that process, or runs the sampler here and moves it when a snapshot shows a large host;
    :meth:`close` ends whichever runs.
    """

    def __init__(self, recipe: SamplerRecipe, *, deadline_seconds: float) -> None:
        self._recipe = recipe
        self._deadline = deadline_seconds
        self._local: Sampler | None = None
        self._process: SamplerProcess | None = None
        self._moved = False  # the sampler process has sent its first snapshot
        self._moving: asyncio.Task[None] | None = None
        self._stays = False  # the sampler process could not be started: the sampler stays here
        self._listeners: list[Callable[[Snapshot], object]] = []
        self.latest: Snapshot | None = None
        self._name = "sampler"

    def start(self) -> None:
        """Build the sampler here; on a large host, launch the sampler process and close it."""
        local = self._local = self._recipe()
        self._name = local.name
        if probe(local.session.module) is not True:
            return
        # its warnings were said here when the sampler was built
        recipe = dataclasses.replace(self._recipe, warning=None)
        scenario = getattr(local.session.module, "scenario", None)
        if recipe.sim is not None and scenario is not None:
            # the simulator's scenario, parsed here: the sampler process reads no YAML
            recipe = dataclasses.replace(recipe, sim=scenario)
        process = SamplerProcess(recipe, deadline_seconds=self._deadline)
        try:
            process.launch()
        except OSError as exc:
            log.error("the sampler could not start in a process of its own (%s); it runs here", exc)
            return
        self._process = process
        self._local = None
        local.close()  # it never cycled: its NVML is shut down, its memory freed before serving

    @property
    def in_own_process(self) -> bool:
        """The sampler process has sent its first snapshot (it runs there from then on)."""
        return self._moved

    @property
    def name(self) -> str:
        return self._name

    @property
    def not_ready_reason(self) -> str | None:
        if self._process is not None and (self._moved or self._local is None):
            return self._process.not_ready_reason
        if self._local is not None:
            return self._local.not_ready_reason
        return "first sampling cycle not done"

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> None:
        for feed in (self._local, self._process):
            if feed is not None:
                feed.refresh()

    def set_extra_fields(self, fields: tuple[int | tuple[int, int], ...]) -> None:
        """The configured NVML fields of a reload, to whichever sampler runs (both while moving)."""
        for feed in (self._local, self._process):
            if feed is not None:
                feed.set_extra_fields(fields)

    def _publish(self, snapshot: Snapshot) -> None:
        self.latest = snapshot
        tell(self._listeners, snapshot)

    async def run(self, stop: asyncio.Event) -> None:
        if self._local is None and self._process is not None:  # a large host, known at start
            if await self._run_apart(self._process, stop):
                return
            self._local = await asyncio.to_thread(self._recipe)  # it could not start: here,
            self._stays = True  # for good
        local = self._local
        if local is None:
            raise RuntimeError("start() the sampler before running it")
        local_stop = asyncio.Event()

        def from_local(snapshot: Snapshot) -> None:
            if self._moved:
                return  # the sampler process serves now
            self._publish(snapshot)
            if self._moving is None and not self._stays and large_host(snapshot):
                self._moving = asyncio.get_running_loop().create_task(
                    self._move(stop, local_stop), name="vgpumon-sampler-move"
                )

        async def pass_stop() -> None:
            await stop.wait()
            local_stop.set()

        local.on_snapshot(from_local)
        running = local.run(local_stop)
        del local  # once it returns, nothing here keeps that sampler (and its NVML module) alive
        passing = asyncio.get_running_loop().create_task(pass_stop())
        try:
            await running  # until stopped, or until the sampler has moved
            if self._moving is not None:
                await self._moving
        finally:
            passing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await passing

    async def _run_apart(self, process: SamplerProcess, stop: asyncio.Event) -> bool:
        """The sampler process launched at start: wait until it is built, then read it until
        ``stop``. False when it could not build its sampler (the caller runs it here)."""
        try:
            await asyncio.to_thread(process.start)
        except (SamplerStartFailed, OSError) as exc:
            log.error("the sampler could not start in a process of its own (%s); it runs here", exc)
            self._process = None
            return False

        def from_process(snapshot: Snapshot) -> None:
            if not self._moved:
                self._moved = True
                log.info(
                    "a large host (%d GPUs; vGPU host, MIG or more than %d): the sampler runs in "
                    "a process of its own now (pid %s), from its first cycle",
                    len(snapshot.gpus),
                    SMALL_HOST_GPUS,
                    process.pid,
                )
            self._publish(snapshot)

        process.on_snapshot(from_process)
        await process.run(stop)
        return True

    async def _move(self, stop: asyncio.Event, local_stop: asyncio.Event) -> None:
        """Start the sampler process; at its first snapshot, stop and close the local sampler,
        then read the process until ``stop``."""
        # its warnings were said here when the sampler was built
        recipe = dataclasses.replace(self._recipe, warning=None)
        process = SamplerProcess(recipe, deadline_seconds=self._deadline)
        try:
            await asyncio.to_thread(process.start)
        except (SamplerStartFailed, OSError) as exc:
            log.error("the sampler could not move to a process of its own (%s); it stays here", exc)
            return
        self._process = process
        first = asyncio.Event()

        def from_process(snapshot: Snapshot) -> None:
            if not self._moved:
                self._moved = True
                first.set()
            self._publish(snapshot)

        process.on_snapshot(from_process)
        reading = asyncio.get_running_loop().create_task(process.run(stop))
        waiting = asyncio.get_running_loop().create_task(first.wait())
        await asyncio.wait((reading, waiting), return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if self._moved:
            local_stop.set()  # the local sampler's cycle in flight ends; run() then returns
            local, self._local = self._local, None
            if local is not None:
                await asyncio.to_thread(local.close)
            del local  # this coroutine lives on (it reads the process): it must not keep it
            log.info(
                "a large host (%d GPUs; vGPU host, MIG or more than %d): the sampler runs in a "
                "process of its own now (pid %s)",
                len(self.latest.gpus) if self.latest is not None else 0,
                SMALL_HOST_GPUS,
                process.pid,
            )
        await reading

    def close(self) -> None:
        """End the sampler, wherever it runs (each bounded as its own close is)."""
        local, self._local = self._local, None
        if local is not None:
            local.close()
        process, self._process = self._process, None
        if process is not None:
            process.close()
