"""Xid errors, counted from an NVML event set by a watcher thread.

Xids are events, not state: polling cannot see them, so one daemon thread waits on an event set
registered for ``nvmlEventTypeXidCriticalError`` and counts Xids per GPU UUID; the ``xid`` reader
copies the counts into each snapshot.

Who calls what, and why:

* Each GPU registers itself from its own reader, in its own worker thread, under the cycle
  deadline. A GPU whose calls hang therefore hangs only its own worker (already reported as hung),
  never the watcher or the other GPUs, and a GPU lost during registration is marked down by the
  sampler like any other lifecycle error.
* The watcher thread only waits. A wait that comes back at once without an event (a module that
  does not block, an error) is followed by a sleep for the rest of the poll period, and a flood
  of events is capped per period, so it never spins.
* The sampler's acquire hook (``Sampler.on_acquire``) tells the watcher a GPU has a new handle, so
  it registers again; after a lifecycle error the set is dropped and every GPU registers into a
  new one (sets and handles do not survive ``nvmlShutdown``). ``Sampler.close`` stops the thread.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from vgpumon.collect.base import GpuBuilder, GpuContext, ReadFailed
from vgpumon.collect.threads import daemon_thread
from vgpumon.nvml.errors import LIFECYCLE_CODES, TIMEOUT, error_code
from vgpumon.nvml.session import SYSTEM, GpuDown, NvmlSession

if TYPE_CHECKING:
    from vgpumon.collect.sampler import Sampler

log = logging.getLogger(__name__)

SERVICE = "xid"
XID_EVENT = 0x0008  # nvmlEventTypeXidCriticalError; never Clock (0x10), which fires every 100 ms
# An event ends a wait at once; the timeout only bounds how late the watcher notices a new event
# set after an NVML re-init. Each timed-out wait costs a driver call and a raised NVMLError, so
# the timeout is long enough that those stay a small part of the exporter's CPU
# (docs/measurements.md).
POLL_MS = 2000
# More events than this within one poll period means something is wrong with the source (a module
# returning an event at once, forever): pause for the rest of the period instead of burning a CPU.
# Events left in the set wait there for the next period.
MAX_EVENTS_PER_POLL = 100
REGISTER = "nvmlDeviceRegisterEvents"


def handle_key(handle: Any) -> int:
    """A hashable identity for a device handle (ctypes pointers compare by object identity)."""
    try:
        value = ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return id(handle)
    return value if value is not None else id(handle)


class XidWatcher:
    """Counts Xid events per GPU UUID on a daemon thread."""

    def __init__(self, session: NvmlSession, *, poll_ms: int = POLL_MS) -> None:
        self.session = session
        self.poll_ms = poll_ms
        self._lock = threading.Lock()
        self._counts: dict[str, dict[int, int]] = {}
        self._set: Any = None
        self._creating = False
        self._registered: dict[str, int] = {}  # uuid -> handle key, in the current set
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.waits = 0  # EventSetWait calls made, for tests and debugging

    # ------------------------------------------------------------------ sampler side

    def gpu_acquired(self, uuid: str, handle: Any) -> None:
        """Sampler acquire hook: a (re-)acquired GPU must register its new handle."""
        del handle  # registration happens in the GPU's own worker, see register()
        with self._lock:
            self._registered.pop(uuid, None)
            self._counts.setdefault(uuid, {})

    def library_reinitialized(self) -> None:
        """Sampler re-init hook: the event set died with the old NVML state; start a new one.

        The old set is dropped, not freed: handing a handle from before ``nvmlShutdown`` back to
        the library is undefined. Every GPU registers again into a fresh set on its next cycle.
        """
        with self._lock:
            self._set = None
            self._registered.clear()

    def register(self, ctx: GpuContext) -> str | None:
        """Register this GPU for Xid events if it is not yet (called in the GPU's worker); the
        error that kept it from being registered, if one did (Xids of the GPU go unseen)."""
        with self._lock:
            if self._stop.is_set() or ctx.uuid in self._registered:
                return None
            event_set = self._set
            if event_set is None:
                if self._creating:
                    return None  # another GPU is creating the set; register next cycle
                self._creating = True
        if event_set is None:
            try:
                created = self.session.attempt(SYSTEM, "nvmlEventSetCreate")
                event_set = created.value
            finally:
                with self._lock:
                    self._creating = False
                    if event_set is not None:
                        self._set = event_set
            if event_set is None:
                return f"nvmlEventSetCreate: {created.error}" if created.status == "error" else None
        registered = ctx.attempt(REGISTER, ctx.handle, XID_EVENT, event_set)
        if registered.status == "error":
            return f"{REGISTER}: {registered.error}"
        if registered.status == "absent":
            return None
        with self._lock:
            if self._set is event_set:
                self._registered[ctx.uuid] = handle_key(ctx.handle)
                self._counts.setdefault(ctx.uuid, {})
        self.start()
        return None

    def counts(self, uuid: str) -> dict[int, int]:
        with self._lock:
            return dict(self._counts.get(uuid, {}))

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = daemon_thread(self._run, "vgpumon-xid")
            self._thread.start()

    def close(self) -> None:
        """Stop the thread; whoever is last to use the set frees it.

        The thread may be inside a wait of up to ``poll_ms``: closing does not wait for it (that
        would add half a second to every ``vgpumon snapshot``); it frees the set itself when its
        wait returns. A thread stuck inside NVML is left behind as a daemon.
        """
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=0.05)
        if thread is None or not thread.is_alive():
            self._free()

    # ------------------------------------------------------------------ watcher thread

    def _run(self) -> None:
        period = self.poll_ms / 1000.0
        window_start, window_events = time.monotonic(), 0
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                events = self._wait_once()
                now = time.monotonic()
                if events == 0:
                    # Nothing came: never loop faster than one wait per period.
                    self._stop.wait(max(0.0, period - (now - started)))
                    continue
                if now - window_start >= period:
                    window_start, window_events = now, 0
                window_events += events
                if window_events >= MAX_EVENTS_PER_POLL:
                    self._stop.wait(max(0.0, period - (now - window_start)))
        finally:
            if self._stop.is_set():
                self._free()

    def _wait_once(self) -> int:
        """One wait on the set; 1 when an event came (counted if it is an Xid), else 0."""
        with self._lock:
            event_set = self._set if self._registered else None
        wait = getattr(self.session.module, "nvmlEventSetWait", None)
        if event_set is None or not callable(wait):
            return 0
        self.waits += 1
        try:
            # Called directly, not through the session: a timeout is the normal "no event" answer
            # and the call blocks by design, so neither belongs in the error or latency counts.
            data = wait(event_set, self.poll_ms)
        except Exception as exc:  # noqa: BLE001
            code = error_code(exc)
            if code in LIFECYCLE_CODES:
                # The library is being re-initialised: this set is dead (and cannot be freed).
                with self._lock:
                    if self._set is event_set:
                        self._set = None
                        self._registered.clear()
            elif code != TIMEOUT:
                log.debug("nvmlEventSetWait failed: %s", exc)
            return 0
        with self._lock:
            current = self._set is event_set
        if not current:
            # The set was replaced (NVML re-initialised) while this wait ran: its events belong to
            # the old library state, and the GPUs' new registrations will report them again.
            return 0
        self._count(data)
        return 1

    def _count(self, data: Any) -> None:
        if not int(getattr(data, "eventType", 0)) & XID_EVENT:
            return
        xid = int(getattr(data, "eventData", 0))
        device = getattr(data, "device", None)
        key = handle_key(device)
        with self._lock:
            uuid = next((u for u, k in self._registered.items() if k == key), None)
        if uuid is None and device is not None:
            # A handle object this watcher has not seen: ask which GPU it is.
            try:
                found = self.session.call(SYSTEM, "nvmlDeviceGetUUID", device, key="xid")
            except GpuDown:
                found = None
            uuid = found if isinstance(found, str) else None
        if uuid is None:
            return
        with self._lock:
            per_gpu = self._counts.setdefault(uuid, {})
            per_gpu[xid] = per_gpu.get(xid, 0) + 1

    def _free(self) -> None:
        with self._lock:
            event_set, self._set = self._set, None
            self._registered.clear()
        free = getattr(self.session.module, "nvmlEventSetFree", None)
        if event_set is not None and callable(free):
            try:
                free(event_set)
            except Exception:  # a set from a dead library cannot be freed
                log.debug("nvmlEventSetFree failed", exc_info=True)


class XidReader:
    """Registers each GPU with the watcher and copies its counts into the snapshot.

    A class rather than a FunctionReader because it needs ``attach`` to start the watcher when a
    sampler adopts it.
    """

    name = "xid"
    default_enabled = True

    def attach(self, sampler: Sampler) -> None:
        watcher = sampler.services.get(SERVICE)
        if not isinstance(watcher, XidWatcher):
            watcher = XidWatcher(sampler.session)
            sampler.services[SERVICE] = watcher
        sampler.on_acquire(watcher.gpu_acquired)
        sampler.on_reinit(watcher.library_reinitialized)

    def read(self, ctx: GpuContext, out: GpuBuilder) -> None:
        watcher = ctx.shared.get(SERVICE)
        if not isinstance(watcher, XidWatcher):
            return
        error = watcher.register(ctx)
        out.set(xid_errors=watcher.counts(ctx.uuid))
        if error is not None:  # this GPU's Xids go unseen: "no Xid" would be a guess
            raise ReadFailed(error)


READERS = [XidReader()]
