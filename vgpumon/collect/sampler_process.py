"""The sampler in a process of its own, as a snapshot feed of the process that serves.

Why a process: CPython runs the Python of one thread at a time. An event loop answering scrapes
gives the interpreter up at every system call (each read, write and wait) and must get it back
to go on; while a sampler thread runs Python it gets it back only when that thread blocks or the
switch interval (5 ms) runs out, and while several do, often only after several intervals. On a
16 GPU x 48 vGPU host a cycle is a hundred milliseconds and more of Python (the collectors, and
under ``--sim`` the simulated driver), and the event loop, sharing the interpreter, answered
nothing for most of it: one block of about 270 ms per cycle (bench/results/, docs/exporter.md
"The sampler process"). In a process of its own the sampler's Python never stands between the
event loop and a scrape, however large the host, whatever NVML does.

The child is ``python -m vgpumon.collect.sampler_child`` (:mod:`vgpumon.collect.sampler_child`),
built from a picklable recipe that makes the :class:`~vgpumon.collect.sampler.Sampler` (NVML is
opened there only). Each snapshot comes back over a pipe in pieces (:mod:`vgpumon.collect.frames`)
and is unpickled on the event loop one GPU at a time, at most about a millisecond at a stretch.
The loop wakes once per snapshot, as it did for a sampler in this process.

What must stay true:

* :meth:`SamplerProcess.start` returns once the sampler is built, or raises the error the child
  met (a missing NVML module is the same one-line error, same exit status, as before);
* a child that ends unexpectedly (a crash inside the driver's library, an OOM kill) leaves the last
  snapshot served, flagged wedged and not up with the reason, and is started again with backoff;
* stopping ends the child: its stdin closes, its cycle in flight completes, it closes its sampler
  within the sampler's own bound and exits; one still there after that is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fcntl
import logging
import os
import pickle
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vgpumon.collect import frames
from vgpumon.errors import VgpumonError, one_line
from vgpumon.feed import tell
from vgpumon.model import Snapshot

if TYPE_CHECKING:  # the sampler itself lives in the child: this process never imports it
    from vgpumon.collect.sampler import Sampler

log = logging.getLogger(__name__)

# How long the child's sampler may take to close (its CLOSE_TIMEOUT_SECONDS) after its last cycle.
CLOSE_TIMEOUT_SECONDS = 2.0
# The longest the event loop unpickles a snapshot at a stretch before it answers what waits.
SLICE_SECONDS = 0.001
# The first restart of a child that ended comes after this, then twice as long each time (reset
# once a restarted child has sent a snapshot).
RESTART_INITIAL_SECONDS = 1.0
RESTART_MAX_SECONDS = 60.0
# A pipe this large holds a 16 x 48 snapshot whole, so the child hands it over in one write.
PIPE_BYTES = 1 << 20
CHILD_MODULE = "vgpumon.collect.sampler_child"

Recipe = Callable[[], "Sampler"]


class SamplerStartFailed(VgpumonError):
    """The sampler process could not build its sampler (the child's one-line error)."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def _grow_pipe(fd: int) -> None:
    """Best effort: a pipe of :data:`PIPE_BYTES` (Linux only; the limit is a system setting)."""
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)


def _read_now(fd: int) -> bytes | None:
    """What the pipe ``fd`` holds now: ``b""`` at its end (or on an error), None when nothing has
    come yet (it is non-blocking)."""
    try:
        return os.read(fd, PIPE_BYTES)
    except BlockingIOError:
        return None
    except OSError:
        return b""


class _Child:
    """One run of the child process: its process, its stdin and the read end of its output."""

    def __init__(self, recipe: Recipe, python: str) -> None:
        read_end, write_end = os.pipe()
        _grow_pipe(write_end)
        try:
            self.proc = subprocess.Popen(
                [python, "-m", CHILD_MODULE, str(write_end)],
                stdin=subprocess.PIPE,
                pass_fds=(write_end,),
                start_new_session=True,  # the terminal's ^C is the serving process's
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        os.set_blocking(read_end, False)
        self.output = read_end
        self.buffer = frames.FrameBuffer()
        self.early: list[tuple[int, bytes]] = []  # frames read with the hello, for the loop
        self.failed: str | None = None  # why it could not build its sampler, if it said
        self._control = self.proc.stdin
        self.send(frames.START, recipe)

    def send(self, kind: int, message: Any) -> bool:
        """Write a request to the child; False when it no longer reads (it ended)."""
        control = self._control
        if control is None:
            return False
        try:
            control.write(frames.frame(kind, message))
            control.flush()
        except (OSError, ValueError):
            return False
        return True

    def end_input(self) -> None:
        """Close the child's stdin: it finishes its cycle, closes its sampler and exits."""
        control, self._control = self._control, None
        if control is not None:
            with contextlib.suppress(OSError):
                control.close()

    def reap(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` for the child to exit, then kill it; its exit status."""
        self.end_input()
        try:
            return self.proc.wait(max(0.0, timeout))
        except subprocess.TimeoutExpired:
            log.warning("the sampler process did not exit within %.1f s; killing it", timeout)
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.proc.wait(5.0)
            return None
        finally:
            self.close_output()

    def close_output(self) -> None:
        if self.output >= 0:
            with contextlib.suppress(OSError):
                os.close(self.output)
            self.output = -1

    def read_blocking(self, timeout: float | None) -> tuple[int, bytes] | None:
        """The next frame, waiting for it (start-up only, before an event loop runs); None when
        the child's output ended or ``timeout`` passed."""
        give_up = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if give_up is None else max(0.0, give_up - time.monotonic())
            ready, _, _ = select.select([self.output], [], [], left)
            if not ready:
                return None
            try:
                data = os.read(self.output, 1 << 16)
            except BlockingIOError:
                continue
            if not data:
                return None
            complete = list(self.buffer.feed(data))
            if complete:
                self.early = complete[1:]  # what came with the hello: the loop's
                return complete[0]


class SamplerProcess:
    """A :class:`Sampler` running in a child process, as this process's snapshot feed.

    ``recipe`` builds the sampler in the child and must pickle (a module-level function, or a
    ``functools.partial`` of one, with plain settings). Call :meth:`start` before the event loop
    runs, :meth:`run` on it, and :meth:`close` at the end.
    """

    def __init__(
        self,
        recipe: Recipe,
        *,
        deadline_seconds: float,
        python: str = sys.executable,
        restart_initial: float = RESTART_INITIAL_SECONDS,
    ) -> None:
        self._recipe = recipe
        self._deadline = deadline_seconds
        self._python = python
        self._restart_initial = restart_initial
        self._restart_delay = restart_initial
        self._child: _Child | None = None
        self._name = "sampler process"
        self.latest: Snapshot | None = None
        self._not_ready: str | None = None
        self._listeners: list[Callable[[Snapshot], object]] = []
        self._pieces: frames.SnapshotPieces | None = None  # the newest not yet unpickled
        self._news = asyncio.Event()
        self._ended: asyncio.Event | None = None
        self.restarts = 0

    # ------------------------------------------------------------------ the feed

    @property
    def name(self) -> str:
        return self._name

    @property
    def not_ready_reason(self) -> str | None:
        if self.latest is None:
            return self._not_ready or "first sampling cycle not done"
        return self._not_ready

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs (the exporter's own metrics add its usage)."""
        child = self._child
        return child.proc.pid if child is not None and child.proc.poll() is None else None

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self._listeners.append(listener)

    def refresh(self) -> None:
        if self._child is not None:
            self._child.send(frames.REFRESH, None)

    def set_extra_fields(self, fields: tuple[int | tuple[int, int], ...]) -> None:
        """The configured NVML fields of a reload (:meth:`Sampler.set_extra_fields`)."""
        if self._child is not None:
            self._child.send(frames.FIELDS, tuple(fields))

    # ------------------------------------------------------------------ start and stop

    def start(self, timeout: float | None = None) -> None:
        """Start the child and wait until its sampler is built; raise the error it met."""
        child = _Child(self._recipe, self._python)
        first = child.read_blocking(timeout)
        if first is None or first[0] != frames.HELLO:
            status = child.reap(self._deadline + CLOSE_TIMEOUT_SECONDS)
            if first is not None and first[0] == frames.FAILED:
                message, code = pickle.loads(first[1])
                raise SamplerStartFailed(message, int(code))
            raise SamplerStartFailed(
                f"the sampler process ended before its sampler was built (exit status {status})",
                1,
            )
        self._name = str(pickle.loads(first[1]))
        self._child = child

    async def run(self, stop: asyncio.Event) -> None:
        """Read snapshots from the child until ``stop`` is set; start it again if it ends."""
        loop = asyncio.get_running_loop()
        decoder = loop.create_task(self._decode_forever(), name="vgpumon-sampler-decode")
        try:
            while not stop.is_set():
                child = self._child
                if child is None:
                    child = await self._restart(stop)
                    if child is None:
                        break
                ended = await self._read(child, stop)
                if not ended:
                    break  # stopped
                status = await asyncio.to_thread(child.reap, self._deadline)
                self._child = None
                self._lost(child.failed or f"the sampler process ended (exit status {status})")
        finally:
            decoder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await decoder
            child = self._child
            if child is not None:
                child.end_input()  # the child finishes its cycle and exits; close() reaps it
                await self._wait_output_end(child, self._deadline)

    async def _read(self, child: _Child, stop: asyncio.Event) -> bool:
        """Frames from ``child`` until its output ends (True) or ``stop`` is set (False)."""
        loop = asyncio.get_running_loop()
        ended = asyncio.Event()

        def readable() -> None:
            data = _read_now(child.output)
            if data is None:
                return
            if not data:
                loop.remove_reader(child.output)
                ended.set()
                return
            for kind, payload in child.buffer.feed(data):
                self._frame(child, kind, payload)

        early, child.early = child.early, []
        for kind, payload in early:
            self._frame(child, kind, payload)
        loop.add_reader(child.output, readable)
        try:
            stopping = loop.create_task(stop.wait())
            ending = loop.create_task(ended.wait())
            await asyncio.wait((stopping, ending), return_when=asyncio.FIRST_COMPLETED)
            for task in (stopping, ending):
                task.cancel()
            return ended.is_set()
        finally:
            if not ended.is_set():
                loop.remove_reader(child.output)

    async def _wait_output_end(self, child: _Child, timeout: float) -> None:
        """After the stop: until the child closed its output (it exits), at most ``timeout``."""
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def readable() -> None:
            if _read_now(child.output) == b"":  # what comes after the stop is dropped
                loop.remove_reader(child.output)
                done.set()

        if child.output < 0:
            return
        loop.add_reader(child.output, readable)
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except asyncio.TimeoutError:
            loop.remove_reader(child.output)

    def _frame(self, child: _Child, kind: int, payload: bytes) -> None:
        if kind == frames.SNAPSHOT:
            self._pieces = pickle.loads(payload)
            self._news.set()
        elif kind == frames.HELLO:
            self._name = str(pickle.loads(payload))
        elif kind == frames.FAILED:  # a restarted child: it exits, and is started again
            message, _code = pickle.loads(payload)
            child.failed = f"the sampler process could not build its sampler: {one_line(message)}"

    async def _decode_forever(self) -> None:
        while True:
            await self._news.wait()
            self._news.clear()
            pieces, self._pieces = self._pieces, None
            if pieces is None:
                continue
            try:
                snapshot = await _decode(pieces)
            except Exception:  # a bug on one side must not stop serving the last snapshot
                log.exception("a snapshot from the sampler process could not be read")
                continue
            self._restart_delay = self._restart_initial
            self._not_ready = pieces.not_ready_reason
            self.latest = snapshot
            tell(self._listeners, snapshot)

    def _lost(self, reason: str) -> None:
        """The child is gone: the last snapshot stays served, flagged wedged and not up."""
        log.error("%s; starting it again in %.0f s", reason, self._restart_delay)
        self._not_ready = reason
        last = self.latest
        if last is not None:
            health = dataclasses.replace(last.health, up=False, wedged=True, down_reason=reason)
            self.latest = dataclasses.replace(last, health=health)
            tell(self._listeners, self.latest)

    async def _restart(self, stop: asyncio.Event) -> _Child | None:
        """A new child after the backoff; None when stopped meanwhile."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), self._restart_delay)
        if stop.is_set():
            return None
        self._restart_delay = min(self._restart_delay * 2, RESTART_MAX_SECONDS)
        self.restarts += 1
        try:
            self._child = _Child(self._recipe, self._python)
        except OSError as exc:
            self._lost(f"the sampler process could not be started: {one_line(exc)}")
            return None if stop.is_set() else await self._restart(stop)
        return self._child

    def close(self, timeout: float | None = None) -> bool:
        """Stop the child (if :meth:`run` has not) and wait for it, bounded; True when it exited
        by itself."""
        child, self._child = self._child, None
        if child is None:
            return True
        bound = self._deadline + CLOSE_TIMEOUT_SECONDS if timeout is None else timeout
        status = child.reap(bound)
        return status is not None and status >= 0


async def _decode(pieces: frames.SnapshotPieces) -> Snapshot:
    """The snapshot, unpickled a GPU at a time with the event loop let go in between."""
    began = time.perf_counter()
    header = frames.decode_header(pieces)
    gpus = []
    for piece in pieces.gpus:
        if time.perf_counter() - began >= SLICE_SECONDS:
            await asyncio.sleep(0)
            began = time.perf_counter()
        gpus.append(frames.decode_gpu(piece))
    return dataclasses.replace(header, gpus=tuple(gpus))
