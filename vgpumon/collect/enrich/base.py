"""What an enricher is, and the background refresher most of them are built on.

An enricher answers "whose is this device?" from a system other than NVML. The answer changes
rarely (a VM starts, a pod is scheduled) and asking can be slow or hang (a stuck libvirtd, a
kubelet restarting), so the asking never happens in a sampling cycle:

* :class:`Refresher` runs the enricher's ``refresh`` on a daemon thread, every ``interval`` seconds
  or at once when :meth:`Refresher.wake` is called (a libvirt lifecycle event), and keeps the last
  answer that came back;
* at the end of each cycle the sampler calls :meth:`Enricher.apply`, which only merges the kept
  answer into the snapshot (dictionary look-ups, no I/O), and :meth:`Enricher.status`, which
  becomes ``vgpumon_scrape_collector_success{collector=NAME}``.

A refresh that fails keeps the previous answer (VMs and pods outlive a libvirtd or kubelet
restart) and reports failure until one succeeds again; one that is still running after
``timeout`` seconds counts as failed too, so a hung peer shows up as 0 rather than as stale 1s.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from vgpumon.collect.threads import daemon_thread
from vgpumon.model import Snapshot

log = logging.getLogger(__name__)

T = TypeVar("T")


class Enricher(Protocol):
    """Names from outside NVML, merged into each snapshot by the sampler."""

    name: str  # the collector label of its success metric

    def start(self) -> None:
        """Begin refreshing in the background (idempotent; never blocks)."""

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with the last known names merged in (no I/O, no waiting)."""

    def status(self) -> bool | None:
        """True when the last refresh worked, False when it failed, None when switched off."""

    def settled(self) -> bool:
        """The first refresh has finished, well or not (one-shot snapshots wait for it)."""

    def close(self) -> None:
        """Stop the background thread and drop connections."""


class Refresher(Generic[T]):
    """Calls ``fetch`` on a daemon thread and keeps the last result that came back.

    ``fetch`` returns the new result or raises; a raise keeps the previous result, marks the
    refresher failed and logs once per failure episode (not once per interval).
    """

    def __init__(
        self,
        name: str,
        fetch: Callable[[], T],
        *,
        interval: float,
        timeout: float,
        retry: float | None = None,
    ) -> None:
        self.name = name
        self._fetch = fetch
        self.interval = interval
        self.timeout = timeout
        self.retry = retry if retry is not None else min(interval, 5.0)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._result: T | None = None
        self._ok: bool | None = None
        self._started_at: float | None = None  # monotonic start of the fetch in flight
        self.refreshes = 0  # fetches finished, for tests and debugging
        self.error: str | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = daemon_thread(self._run, f"vgpumon-{self.name}")
            self._thread.start()

    def wake(self) -> None:
        """Refresh now instead of at the next interval (something changed)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def settled(self) -> bool:
        with self._lock:
            return self.refreshes > 0

    @property
    def busy(self) -> bool:
        """A fetch is running now (its peer may still be using a connection)."""
        with self._lock:
            return self._started_at is not None

    @property
    def result(self) -> T | None:
        with self._lock:
            return self._result

    def ok(self) -> bool | None:
        """None before the first refresh finished; False while one overruns ``timeout``."""
        with self._lock:
            started, ok = self._started_at, self._ok
        if started is not None and time.monotonic() - started > self.timeout:
            return False
        return ok

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self._started_at = time.monotonic()
            try:
                result = self._fetch()
            except Exception as exc:  # noqa: BLE001 - any failure of the peer is reported, not raised
                self._failed(exc)
                wait = self.retry
            else:
                with self._lock:
                    self._result = result
                    self._ok = True
                    self.error = None
                wait = self.interval
            with self._lock:
                self._started_at = None
                self.refreshes += 1
            self._wake.wait(wait)
            self._wake.clear()

    def _failed(self, exc: Exception) -> None:
        with self._lock:
            first = self._ok is not False
            self._ok = False
            self.error = str(exc) or type(exc).__name__
        (log.warning if first else log.debug)("%s enricher: %s", self.name, self.error)
