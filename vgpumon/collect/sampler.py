"""The sampler: one cycle at a time, under a deadline, each GPU read on its own worker thread.

docs/design.md, rule 2. Each cycle has two phases:

1. *System* (one worker): re-initialise NVML if it was lost (with backoff), read driver versions,
   count GPUs and acquire handles for GPUs not yet held.
2. *GPUs* (one worker per GPU): run every enabled reader for that GPU, dispatched as
   :mod:`vgpumon.collect.dispatch` decides (docs/exporter.md, "GPU dispatch").

Whatever has not finished when the deadline passes is abandoned: a GPU whose worker is still stuck
is reported as hung (``up=False``) and is not given new work until its call returns; if nothing
at all could be read (the system phase or every GPU stuck) the cycle is abandoned, the sampler is
marked wedged and the last good GPU data stays in place, so that what was being served is not lost.

The sampler is the only code that drives NVML. It is a snapshot feed
(:class:`vgpumon.feed.SnapshotFeed`): ``serve`` and ``top`` run its loop (:meth:`Sampler.run`),
hear of each snapshot (:meth:`Sampler.on_snapshot`) and read :attr:`Sampler.latest`.

**The event loop wakes once per cycle.** The cycles are timed and run by a thread of their own
(``vgpumon-cycle``), which never calls NVML itself: it hands the phases to the workers and waits
on them with its deadline. Only the finished snapshot crosses to the event loop, in one
``call_soon_threadsafe``, so the HTTP server sharing the loop is woken once per cycle, however
many GPUs and phases the cycle had (``bench/loop_wakeups.py`` counts it).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from vgpumon.collect.base import (
    NEEDS_INTERVAL,
    GpuBuilder,
    GpuContext,
    Reader,
    ReadFailed,
    SamplerConfig,
    is_active,
)
from vgpumon.collect.dispatch import AUTO_SERIAL_HISTORY, GpuDispatch
from vgpumon.collect.enrich.base import Enricher
from vgpumon.collect.slots import (
    RETRY_INITIAL_SECONDS,
    RETRY_MAX_SECONDS,
    GpuResult,
    GpuSlot,
    JobProgress,
    SystemResult,
    identity_only,
    release_state,
)
from vgpumon.collect.workers import Worker
from vgpumon.feed import tell
from vgpumon.model import (
    CollectorStatus,
    DriverInfo,
    Gpu,
    SamplerHealth,
    SamplingCadence,
    Snapshot,
)
from vgpumon.nvml.session import SYSTEM, GpuDown, NvmlSession

if TYPE_CHECKING:
    import asyncio

    from vgpumon.collect.schedule import FastRun, LoopSchedule

log = logging.getLogger(__name__)
T = TypeVar("T")

# How long :meth:`Sampler.close` waits for NVML to free reader state and shut down.
CLOSE_TIMEOUT_SECONDS = 2.0
# While every GPU answers, the system phase (driver versions, the GPU count, new GPUs' handles)
# runs this often instead of every cycle: a GPU that appears is found within this time. Anything
# amiss (NVML down, a GPU lost or not yet acquired) brings it back to every cycle.
SYSTEM_EVERY_SECONDS = 10.0


def decode_cuda_version(value: Any) -> str | None:
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


@dataclasses.dataclass(frozen=True)
class CycleStart:
    mono: float  # when it began (monotonic)
    deadline: float  # monotonic
    now: float  # the snapshot clock at its start


class Sampler(GpuDispatch):
    """Reads the host through an :class:`NvmlSession` into :class:`Snapshot` objects."""

    def __init__(
        self,
        session: NvmlSession,
        config: SamplerConfig | None = None,
        readers: Sequence[Reader] | None = None,
        *,
        clock: Callable[[], float] = time.time,
        services: dict[str, Any] | None = None,
        enrichers: Sequence[Enricher] = (),
    ) -> None:
        from vgpumon.collect.registry import enabled_readers

        self.session = session
        self.config = config or SamplerConfig()
        self.readers = list(readers) if readers is not None else enabled_readers(self.config)
        self.clock = clock
        self.services: dict[str, Any] = dict(services or {})
        self.enrichers = list(enrichers)
        # Only the latest snapshot is kept: what a reader needs from earlier cycles (the GPU's
        # last values, sample cursors) is in the GPU's slot and the reader's state, so the
        # previous snapshot (megabytes on a large vGPU host) goes once nothing serves it.
        self.latest: Snapshot | None = None
        self._slots: dict[str, GpuSlot] = {}
        self._by_index: dict[int, str] = {}
        self._system = Worker("system")
        self._driver = DriverInfo()
        self._library_down = False
        self._library_retry_at = 0.0
        self._library_delay = RETRY_INITIAL_SECONDS
        self._library_error = "NVML down"
        self._cycles = 0
        self._abandoned = 0
        # The last system phase's result and when (snapshot clock) it ran (_reusable_system).
        self._system_result: SystemResult | None = None
        self._system_at = 0.0
        # The GPUs' jobs one after another, in seconds, as measured in the last serial cycles
        # (inf: over the auto threshold), and the cycle of the latest: ``auto`` decides from them.
        self._serial_costs: collections.deque[float] = collections.deque(maxlen=AUTO_SERIAL_HISTORY)
        self._serial_cost_cycle = 0
        self._cadence_rows: tuple[Any, tuple[SamplingCadence, ...]] | None = None
        self._second_look = False  # cycle(second_look=True): the next cycle only
        self._last_start = time.monotonic()  # when the last cycle began
        self._schedule: LoopSchedule | None = None  # run()'s
        self._acquire_hooks: list[Callable[[str, Any], None]] = []
        self._reinit_hooks: list[Callable[[], None]] = []
        self._listeners: list[Callable[[Snapshot], object]] = []
        # The cycle thread waits on this between cycles; refresh() and run()'s stop set it.
        self._wake = threading.Event()
        self._halt = threading.Event()  # the cycle thread ends after its cycle in flight
        self._cycle_lock = threading.Lock()  # one cycle at a time, never queued behind a stuck one
        self._cycle_thread: threading.Thread | None = None  # run()'s
        self._cycle_worker: Worker | None = None  # cycle()'s, made on first use
        self._close_lock = threading.Lock()
        self._closer: threading.Thread | None = None
        for reader in self.readers:
            attach = getattr(reader, "attach", None)
            if callable(attach):
                attach(self)

    # ------------------------------------------------------------------ public API

    def on_reinit(self, hook: Callable[[], None]) -> None:
        """Call ``hook()`` (in the system worker) after NVML was shut down and initialised again.

        Everything NVML handed out before (handles, event sets, GPM samples) died with the old
        library state; services holding such objects drop them here.
        """
        self._reinit_hooks.append(hook)

    def on_acquire(self, hook: Callable[[str, Any], None]) -> None:
        """Call ``hook(uuid, handle)`` (in the system worker) whenever a GPU handle is acquired."""
        self._acquire_hooks.append(hook)

    def set_extra_fields(self, fields: tuple[int | tuple[int, int], ...]) -> None:
        """Read these configured NVML fields from the next cycle on (a config reload).

        One attribute replaced with a new tuple: a cycle in flight in the GPU workers reads the
        old tuple or the new one, never a mix. Ids no longer asked for leave the batched call
        after one cycle (:mod:`vgpumon.collect.field_values`).
        """
        self.config.extra_fields = tuple(fields)

    def start_uninitialised(self, reason: str) -> None:
        """Begin with NVML not initialised (``nvmlInit`` failed: no driver loaded yet).

        A DaemonSet or unit that starts before the driver must not die: the first cycle and every
        later one retry ``nvmlInit`` with the usual backoff, and meanwhile every snapshot says
        ``up`` is False and why (:attr:`not_ready_reason`).
        """
        self._library_down = True
        self._library_retry_at = 0.0
        self._library_error = f"NVML not initialised: {reason}"

    @property
    def wedged(self) -> bool:
        return bool(self.latest and self.latest.health.wedged)

    @property
    def needs_interval(self) -> bool:
        """A reader's values need another cycle (GPM takes two samples), e.g. for a snapshot."""
        return any(s.state.get(NEEDS_INTERVAL) for s in self._slots.values())

    @property
    def ready(self) -> bool:
        """First cycle done, not wedged, NVML initialised (``/-/ready``)."""
        return self.not_ready_reason is None

    @property
    def not_ready_reason(self) -> str | None:
        """Why ``/-/ready`` is not 200, in words for the answer's body; None when ready."""
        if self.latest is None:
            return "first sampling cycle not done"
        if self.latest.health.wedged:
            return "sampler wedged"
        if self._library_down:
            return self.latest.health.down_reason or self._library_error
        return None

    async def cycle(self, *, second_look: bool = False) -> Snapshot:
        """Run one sampling cycle now and return (and publish) its snapshot.

        The cycle runs in a thread (:meth:`cycle_now`), so the loop waits without being woken
        by its phases; a cycle of :meth:`run` in flight is waited for, never overlapped.

        ``second_look``: a one-shot consumer's second cycle, after a reader asked for one
        (:attr:`needs_interval`): a GPU whose reader asked reads every cadenced value now
        (``GpuContext.second_look``), so its averages exist whatever the cadences.
        """
        self._second_look = second_look
        import asyncio  # here: the sampler process drives cycles without an event loop

        if self._cycle_worker is None:
            # One thread of its own, not the loop's default executor: that one may start a new
            # thread when asked again before its last one is idle.
            self._cycle_worker = Worker("cycle")
        try:
            snap = await asyncio.wrap_future(self._cycle_worker.submit(self.cycle_now))
        finally:
            self._second_look = False
        self._notify(snap)
        return snap

    def cycle_now(self) -> Snapshot:
        """One sampling cycle in the calling thread; its snapshot becomes :attr:`latest`.

        Listeners are not called here (they belong to the event loop). Never call it on the
        event loop: it waits up to the cycle's deadline for the workers.
        """
        with self._cycle_lock:
            for enricher in self.enrichers:
                enricher.start()
            return self._finish(self._cycle())

    def _finish(self, snap: Snapshot) -> Snapshot:
        """A cycle's snapshot, with its names merged, as :attr:`latest` (with the cycle lock)."""
        if not snap.health.wedged and self.enrichers:
            # Here, off the event loop: merging names into a large host takes milliseconds,
            # which the HTTP server sharing the loop does not wait for.
            snap = self._enrich(snap)
        if snap.health.wedged and self.latest is not None:
            # Keep serving the last good data, flagged as wedged.
            snap = dataclasses.replace(self.latest, health=snap.health)
        self.latest = snap
        return snap

    def _notify(self, snap: Snapshot) -> None:
        """On the event loop: tell the listeners of a new snapshot (one that raises is logged,
        the others still hear it)."""
        tell(self._listeners, snap)

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        """Call ``listener(snapshot)`` on the event loop each time a snapshot is published.

        So that a consumer (the exporter's renderer) wakes when there is something new instead
        of polling :attr:`latest` many times a second, which costs CPU on every host whether
        anything changed or not. Listeners must be quick and must not block.
        """
        self._listeners.append(listener)

    @property
    def name(self) -> str:
        """What the sampler reads (the NVML library or the simulated scenario)."""
        return self.session.source

    def refresh(self) -> None:
        """Start the next cycle now instead of at the next interval (``r`` in ``top``)."""
        self._wake.set()
        schedule = self._schedule
        if schedule is not None:
            schedule.refresh()

    async def run(self, stop: asyncio.Event) -> None:
        """Cycle every ``interval_seconds`` until ``stop`` is set (a cycle in flight completes).

        The event loop keeps the time (:mod:`vgpumon.collect.schedule`): a one-GPU host's usual
        cycle runs on the GPU's worker alone, every other cycle on the ``vgpumon-cycle`` thread;
        each snapshot reaches the listeners on this loop with a single wake-up.
        """
        import asyncio

        from vgpumon.collect.schedule import LoopSchedule

        schedule = self._schedule = LoopSchedule(
            self, asyncio.get_running_loop(), lambda snap: self._notify(snap)
        )
        schedule.start()
        try:
            await stop.wait()
        finally:
            schedule.stop()
            try:
                await schedule.ended  # the cycle in flight (bounded by its deadline) completes
            finally:
                schedule.close()
                self._schedule = None

    def drive(self, publish: Callable[[Snapshot], object]) -> None:
        """Cycle in the calling thread every ``interval_seconds`` (or at once on :meth:`refresh`)
        until :meth:`halt`; ``publish(snapshot)`` is called in this thread after each cycle.

        :meth:`run` drives it from a thread of its own for an event loop; the sampler process
        (:mod:`vgpumon.collect.sampler_child`) from its main thread. An exception ``publish``
        raises ends the driving (nobody is left to publish to).
        """
        self._cycle_thread = threading.current_thread()
        try:
            while not self._halt.is_set():
                started = time.monotonic()
                self._wake.clear()
                try:
                    snap = self.cycle_now()
                except Exception:
                    log.exception("sampling cycle failed")
                else:
                    publish(snap)
                remaining = self.config.interval_seconds - (time.monotonic() - started)
                if remaining > 0:
                    self._wake.wait(remaining)
        finally:
            self._cycle_thread = None  # close() need not wait for a driver that has returned

    def halt(self) -> None:
        """End :meth:`drive` after its cycle in flight (from any thread)."""
        self._halt.set()
        self._wake.set()

    def close(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> bool:
        """Stop services and worker threads, free reader state and shut NVML down, or give up.

        Freeing GPM buffers and Xid event sets and ``nvmlShutdown`` are NVML calls, which a wedged
        driver never answers, so they run on a daemon thread: after ``timeout`` seconds the caller
        goes on without them (a process that then exits leaves the driver to free what it held).
        True when closing finished. Closing again waits for the same close, it never repeats it.
        """
        self._halt.set()  # a cycle thread still running makes no new cycle
        self._wake.set()
        with self._close_lock:
            if self._closer is None:
                self._closer = threading.Thread(
                    target=self._close_now, name="vgpumon-close", daemon=True
                )
                self._closer.start()
            closer = self._closer
        closer.join(max(0.0, timeout))
        if closer.is_alive():
            log.warning("NVML did not shut down within %.1f s; going on without it", timeout)
            return False
        return True

    def _close_now(self) -> None:
        """The NVML-touching part of :meth:`close`; stuck workers are skipped, left as daemons."""
        cycling = self._cycle_thread
        if cycling is not None and cycling is not threading.current_thread():
            # its cycle in flight ends by its deadline; NVML is not shut down under it
            cycling.join(self.config.deadline_seconds)
        for enricher in self.enrichers:
            try:
                enricher.close()
            except Exception:
                log.exception("closing the %s enricher failed", enricher.name)
        for service in self.services.values():
            stop = getattr(service, "close", None)
            if callable(stop):
                try:
                    stop()
                except Exception:
                    log.exception("closing a sampler service failed")
        for slot in self._slots.values():
            if not slot.worker.busy:
                release_state(slot)
            slot.worker.stop()
            if slot.detached is not None:
                slot.detached.stop()
        self._system.stop()
        if self._cycle_worker is not None:
            self._cycle_worker.stop()
        stuck = any(
            s.worker.busy or (s.detached is not None and s.detached.busy)
            for s in self._slots.values()
        )
        if not stuck and not self._system.busy:
            self.session.shutdown()

    # ------------------------------------------------------------------ the cycle

    def _begin(self) -> CycleStart:
        """A cycle's start: its times, counted, the session told (with the cycle lock)."""
        start_mono = self._last_start = time.monotonic()
        self._cycles += 1
        self.session.new_cycle()
        return CycleStart(start_mono, start_mono + self.config.deadline_seconds, self.clock())

    def _cycle(self) -> Snapshot:
        start = self._begin()
        start_mono, deadline, now = start.mono, start.deadline, start.now
        system = self._reusable_system(now)
        if system is None:
            self._system_result = None  # until this one is in: due again if it never comes
            if self._system.busy:
                return self._abandon(start_mono, "system phase still stuck from an earlier cycle")
            system = _within(self._system.submit(self._system_phase), deadline - start_mono)
            if system is None:
                return self._abandon(start_mono, "system phase did not finish before the deadline")
            self._system_result, self._system_at = system, now

        slots, to_read, results, hung = self._partition()
        dispatch = self._dispatch_mode(to_read)
        pending = self._dispatch(to_read, now, deadline, dispatch)
        if pending:
            done, _ = concurrent.futures.wait(
                pending.values(), timeout=max(0.0, deadline - time.monotonic())
            )
            for uuid, fut in pending.items():
                if fut in done:
                    results[uuid] = fut.result()
                else:  # given up on: its late result is dropped with the future
                    partial = self._abandon_collector(self._slots[uuid])
                    if partial is not None:
                        results[uuid] = partial
                    else:
                        hung.append(uuid)
        return self._assemble(start_mono, system, slots, results, hung, dispatch)

    def _usual_slot(self, at: float | None = None) -> GpuSlot | None:
        """The GPU of a usual cycle (:mod:`vgpumon.collect.schedule`) at ``at`` (the snapshot
        clock; now by default): the one GPU of the host, answering, NVML up, the GPU count not
        due; None: an ordinary cycle."""
        if self._library_down or len(self._slots) != 1:
            return None
        (slot,) = self._slots.values()
        if slot.handle is None or slot.detached is not None:
            return None
        if at is None and slot.worker.busy:
            return None  # asked from elsewhere than its worker: it must be free
        if self._reusable_system(self.clock() if at is None else at) is None:
            return None  # the GPU count is due: the system worker's turn, an ordinary cycle
        return slot

    def _usual_cycle(self, run: FastRun) -> Snapshot | None:
        """A usual cycle, on its GPU's worker: the GPU read here, the snapshot built here. None
        when it is not usual after all (then an ordinary cycle runs at once), was cancelled,
        or its deadline passed before it ended (the loop published it without this)."""
        slot = run.slot
        with self._cycle_lock, run.lock:
            if run.cancelled:
                return None
            system = self._reusable_system(self.clock())
            if system is None or self._slots.get(slot.uuid) is not slot or slot.handle is None:
                return None
            for enricher in self.enrichers:
                enricher.start()
            run.start, run.system = self._begin(), system
        result = self._gpu_job(slot, run.start.now)()
        with run.lock:
            if run.closed:
                return None
            run.closed = True
        with self._cycle_lock:
            results = {slot.uuid: result}
            return self._finish(
                self._assemble(run.start.mono, system, [slot], results, [], "serial")
            )

    def _overdue(self, run: FastRun) -> Snapshot | None:
        """On the event loop, at a usual cycle's deadline: end it without the GPU's late answer,
        as an ordinary cycle ends at its deadline. None when it ended meanwhile, has not begun,
        or a one-shot cycle holds the sampler (the loop asks again shortly: it never waits)."""
        if not self._cycle_lock.acquire(blocking=False):
            return None
        try:
            with run.lock:
                if run.closed or run.start is None or run.system is None:
                    return None
                run.closed = True
                start, system = run.start, run.system
            slot = run.slot
            partial = self._abandon_collector(slot)
            results = {slot.uuid: partial} if partial is not None else {}
            hung = [] if partial is not None else [slot.uuid]
            return self._finish(self._assemble(start.mono, system, [slot], results, hung, "serial"))
        finally:
            self._cycle_lock.release()

    def _partition(
        self,
    ) -> tuple[list[GpuSlot], list[GpuSlot], dict[str, GpuResult], list[str]]:
        """The GPUs as a cycle finds them: every slot by index, those to read now, the results
        of those down (their identity), the UUIDs of those whose worker is still stuck."""
        slots = sorted(self._slots.values(), key=lambda s: s.index)
        to_read: list[GpuSlot] = []
        results: dict[str, GpuResult] = {}
        hung: list[str] = []
        for slot in slots:
            if slot.detached is not None and not slot.detached.busy:
                # the hung call returned: the collector is read again, by the GPU's worker
                slot.detached.stop()
                slot.detached = None
                slot.stuck_reader = None
            if slot.handle is None:
                results[slot.uuid] = GpuResult(self._down_gpu(slot), {}, set())
            elif slot.worker.busy:
                hung.append(slot.uuid)
            else:
                to_read.append(slot)
        return slots, to_read, results, hung

    def _assemble(
        self,
        start_mono: float,
        system: SystemResult,
        slots: Sequence[GpuSlot],
        results: dict[str, GpuResult],
        hung: list[str],
        dispatch: str,
    ) -> Snapshot:
        """The cycle's snapshot from what its GPUs gave (a GPU without a result is hung)."""
        if slots and not results and hung:
            return self._abandon(start_mono, "every GPU's NVML calls are stuck")
        gpus: list[Gpu] = []
        timings: dict[str, float] = {}
        failed: set[str] = set()
        for slot in slots:
            if slot.uuid in results:
                res = results[slot.uuid]
                gpus.append(res.gpu)
                if res.library_down:
                    self._library_down = True
                for name, seconds in res.timings.items():
                    timings[name] = timings.get(name, 0.0) + seconds
                failed |= res.failed
            else:
                gpus.append(self._hung_gpu(slot))
        # node_exporter's meaning: success is "ran and succeeded". A collector ran when it read
        # at least one GPU this cycle; with NVML down, or every GPU down or hung, nothing ran and
        # success is 0 (VgpumonCollectorFailing must be able to fire). A host without GPUs has
        # nothing to read: its collectors ran over zero GPUs and succeeded.
        library_up = system.up and not self._library_down
        ran = set(timings) | failed
        unsupported: dict[str, dict[str, int]] = {}
        for g in gpus:
            for name, reason in g.unsupported.items():
                counts = unsupported.setdefault(name, {})
                counts[reason] = counts.get(reason, 0) + 1
        collectors = tuple(
            CollectorStatus(
                name=r.name,
                success=r.name not in failed and (r.name in ran or (library_up and not slots)),
                duration_seconds=timings.get(r.name, 0.0),
                unsupported=unsupported.get(r.name, {}),
            )
            for r in self.readers
            if is_active(r, self.config)
        )
        health = SamplerHealth(
            up=system.up and not self._library_down,
            wedged=False,
            cycles_total=self._cycles,
            cycles_abandoned_total=self._abandoned,
            last_cycle_duration_seconds=time.monotonic() - start_mono,
            hung_gpus=tuple(sorted(hung)),
            dispatch=dispatch,
            down_reason=(
                None
                if system.up and not self._library_down
                else system.error or self._library_error
            ),
            interval_seconds=self.config.interval_seconds,
            cadences=self._cadences(),
            gpus_counted=system.gpus_counted,
        )
        return Snapshot(
            timestamp=self.clock(),
            driver=system.driver,
            gpus=tuple(gpus),
            collectors=collectors,
            nvml_errors=self.session.error_counts(),
            health=health,
            source=self.session.source,
        )

    def _enrich(self, snap: Snapshot) -> Snapshot:
        """Merge what the enrichers last learned (names of VMs and pods) into the snapshot.

        Enrichers ask libvirt and the kubelet on their own threads; here they only merge, so a
        slow peer never holds a cycle. Each one adds its own collector status; one that is
        switched off (no kubelet socket) adds none, so it has no success series.
        """
        statuses: list[CollectorStatus] = []
        for enricher in self.enrichers:
            started = time.perf_counter()
            ok = enricher.status()
            try:
                snap = enricher.apply(snap)
            except Exception:  # a bug in one enricher must not cost the cycle its GPU data
                log.exception("enricher %s failed", enricher.name)
                ok = False
            if ok is not None:
                statuses.append(CollectorStatus(enricher.name, ok, time.perf_counter() - started))
        if not statuses:
            return snap
        return dataclasses.replace(snap, collectors=(*snap.collectors, *statuses))

    def _cadences(self) -> tuple[SamplingCadence, ...]:
        """What a reading's averages cover (validate --url waits for a step's by these); made
        again only when the config's interval or cadences change."""
        from vgpumon.collect.registry import default_cadences

        interval = self.config.interval_seconds
        key = (interval, tuple(sorted(self.config.cadences.items())))
        if self._cadence_rows is None or self._cadence_rows[0] != key:
            rows = tuple(
                SamplingCadence(name, max(interval, self.config.cadences.get(name, default)))
                for name, default in default_cadences().items()
            )
            self._cadence_rows = (key, rows)
        return self._cadence_rows[1]

    def _abandon(self, start_mono: float, why: str) -> Snapshot:
        self._abandoned += 1
        # Warn once per wedged episode; every further abandoned cycle would repeat the same line
        # once per interval for as long as the driver stays stuck.
        was_wedged = self.latest is not None and self.latest.health.wedged
        (log.debug if was_wedged else log.warning)("sampling cycle abandoned: %s", why)
        health = SamplerHealth(
            up=False,
            wedged=True,
            cycles_total=self._cycles,
            cycles_abandoned_total=self._abandoned,
            last_cycle_duration_seconds=time.monotonic() - start_mono,
            hung_gpus=tuple(sorted(s.uuid for s in self._slots.values() if s.worker.busy)),
        )
        return Snapshot(
            timestamp=self.clock(),
            driver=self._driver,
            nvml_errors=self.session.error_counts(),
            health=health,
            source=self.session.source,
        )

    # ------------------------------------------------------------------ system phase (worker)

    def _reusable_system(self, now: float) -> SystemResult | None:
        """The last system phase's result when this cycle may go on it, else None: the cycle
        runs the system phase. It runs every cycle while anything is amiss (NVML down or never
        read, the last phase failed, a GPU without a handle, which includes a GPU waiting to be
        re-acquired); while every GPU answers, only every :data:`SYSTEM_EVERY_SECONDS` (it then
        only counts the GPUs, for one that appeared), so the cycle's usual path hands work to one
        worker per GPU and no other."""
        last = self._system_result
        if last is None or not last.up or self._library_down:
            return None
        if any(slot.handle is None for slot in self._slots.values()):
            return None
        return last if 0.0 <= now - self._system_at < SYSTEM_EVERY_SECONDS else None

    def _system_phase(self) -> SystemResult:
        s = self.session
        now = time.monotonic()
        if self._library_down:
            if now < self._library_retry_at:
                return SystemResult(self._driver, up=False, error=self._library_error)
            for slot in self._slots.values():
                if not slot.worker.busy:
                    release_state(slot)
            s.shutdown()
            try:
                s.init()
            except Exception as exc:  # noqa: BLE001
                self._library_retry_at = now + self._library_delay
                reason = str(exc) or type(exc).__name__
                log.warning(
                    "NVML initialisation failed: %s; next try in %.0f s",
                    reason,
                    self._library_delay,
                )
                self._library_delay = min(self._library_delay * 2, RETRY_MAX_SECONDS)
                self._library_error = f"NVML not initialised: {reason}"
                return SystemResult(self._driver, up=False, error=self._library_error)
            self._library_down = False
            self._library_delay = RETRY_INITIAL_SECONDS
            s.reset_all()  # a fresh library may support what the old one did not
            for slot in self._slots.values():
                slot.handle = None  # handles do not survive a shutdown/init cycle
                slot.retry_at = 0.0
            for hook in self._reinit_hooks:
                try:
                    hook()
                except Exception:  # a hook failure must not keep NVML down
                    log.exception("re-init hook failed")
        count: int | None = None
        try:
            if self._driver.driver_version is None:
                self._driver = DriverInfo(
                    driver_version=s.call(SYSTEM, "nvmlSystemGetDriverVersion"),
                    nvml_version=s.call(SYSTEM, "nvmlSystemGetNVMLVersion"),
                    cuda_driver_version=decode_cuda_version(
                        s.call(SYSTEM, "nvmlSystemGetCudaDriverVersion")
                    ),
                )
            counted = s.attempt(SYSTEM, "nvmlDeviceGetCount")
            count = counted.value
            if counted.status == "absent":
                # Without a count nothing new can be acquired: never wait for the re-probe.
                s.forget(SYSTEM, "nvmlDeviceGetCount")
            if count is None:
                return SystemResult(self._driver, up=False, error="device count unavailable")
            for index in range(count):
                self._acquire(index, now)
        except GpuDown as down:
            if down.library:
                self._library_down = True
                self._library_retry_at = now + self._library_delay
                self._library_error = f"NVML lost: {down.error}"
                return SystemResult(self._driver, up=False, error=self._library_error)
            # A GPU lost while being acquired: its slot is handled in _acquire.
        return SystemResult(self._driver, up=True, gpus_counted=count)

    def _acquire(self, index: int, now: float) -> None:
        uuid = self._by_index.get(index)
        slot = self._slots.get(uuid) if uuid else None
        if slot is not None and (slot.handle is not None or now < slot.retry_at):
            return
        s = self.session
        key = f"index:{index}"
        try:
            handle = s.call(key, "nvmlDeviceGetHandleByIndex", index)
            new_uuid = s.call(key, "nvmlDeviceGetUUID", handle) if handle is not None else None
        except GpuDown as down:
            if down.library:
                raise
            if slot is not None:
                self._back_off(slot, now, down.error)
            return
        if handle is None or new_uuid is None:
            if slot is not None:
                self._back_off(slot, now, "handle unavailable")
            return
        if slot is None or slot.uuid != new_uuid:
            slot = self._slots.get(new_uuid) or GpuSlot(
                index=index, uuid=new_uuid, handle=None, worker=Worker(f"gpu{index}")
            )
            slot.index = index
            self._slots[new_uuid] = slot
            self._by_index[index] = new_uuid
        slot.handle = handle
        slot.down_reason = None
        slot.retry_delay = RETRY_INITIAL_SECONDS
        self.session.reset_gpu(new_uuid)
        for hook in self._acquire_hooks:
            try:
                hook(new_uuid, handle)
            except Exception:
                log.exception("acquire hook failed for %s", new_uuid)

    def _back_off(self, slot: GpuSlot, now: float, reason: str) -> None:
        release_state(slot)
        slot.handle = None
        slot.down_reason = reason
        slot.retry_at = now + slot.retry_delay
        slot.retry_delay = min(slot.retry_delay * 2, RETRY_MAX_SECONDS)

    # ------------------------------------------------------------------ GPU phase (workers)

    def _gpu_job(self, slot: GpuSlot, now: float) -> Callable[[], GpuResult]:
        previous = slot.last

        def job() -> GpuResult:
            started = time.perf_counter()
            progress = slot.progress = JobProgress(GpuBuilder(slot.index, slot.uuid), {}, set())
            progress.returned = returned = self.session.returned_calls()
            progress.returned_at_start = returned()
            result = read(progress)
            if not progress.abandoned:  # an abandoned job's time is its hang, not its cost
                slot.wall = time.perf_counter() - started
            return result

        def read(progress: JobProgress) -> GpuResult:
            asked = bool(slot.state.pop(NEEDS_INTERVAL, None))
            ctx = GpuContext(
                session=self.session,
                handle=slot.handle,
                index=slot.index,
                uuid=slot.uuid,
                config=self.config,
                state=slot.state,
                previous=previous,
                now=now,
                shared=self.services,
                second_look=asked and self._second_look,
            )
            out, timings, failed = progress.out, progress.timings, progress.failed
            session = self.session
            job_start = session.tally()
            for reader in self.readers:
                if not is_active(reader, self.config):
                    continue
                if progress.abandoned:
                    return GpuResult(out.build(), timings, failed)  # nobody is waiting
                if reader.name == slot.stuck_reader:
                    failed.add(reader.name)  # still hung in the detached worker
                    continue
                progress.reader = reader.name
                started = time.perf_counter()
                before = session.tally()
                try:
                    reader.read(ctx, out)
                    if session.tally().since(before).all_failed:
                        # node_exporter's meaning: a collector none of whose reads answered
                        # (every call timed out) did not succeed, though it raised nothing.
                        failed.add(reader.name)
                except ReadFailed as err:
                    failed.add(reader.name)
                    log.debug("reader %s failed on %s: %s", reader.name, slot.uuid, err)
                except GpuDown as down:
                    timings[reader.name] = time.perf_counter() - started
                    failed.add(reader.name)  # it met the lost GPU or driver: it did not succeed
                    if progress.abandoned:
                        return GpuResult(out.build(), timings, failed)
                    self._back_off(slot, time.monotonic(), down.error)
                    gpu = self._down_gpu(slot)
                    return GpuResult(gpu, timings, failed, library_down=down.library)
                except Exception:
                    failed.add(reader.name)
                    log.debug("reader %s failed on %s", reader.name, slot.uuid, exc_info=True)
                    if reader.name not in slot.state.setdefault("_logged_failures", set()):
                        slot.state["_logged_failures"].add(reader.name)
                        log.exception("reader %s failed on GPU %s", reader.name, slot.uuid)
                timings[reader.name] = time.perf_counter() - started
            progress.reader = None
            gpu = out.build()
            calls = session.tally().since(job_start)
            if calls.all_failed:
                # Calls were made and not one answered: the GPU is not read, whatever NVML's
                # handle says (vgpumon_gpu_up 0, and check says so rather than "ok").
                gpu = dataclasses.replace(
                    gpu, up=False, down_reason=f"no NVML call answered ({calls.last_error})"
                )
            if not progress.abandoned:
                slot.last = gpu
            return GpuResult(gpu, timings, failed)

        return job

    def _abandon_collector(self, slot: GpuSlot) -> GpuResult | None:
        """Go on without the one collector whose call hangs, when the GPU otherwise answers.

        A hang before any NVML call of the job came back (in the first collector to call NVML)
        means the GPU itself does not answer: None, the GPU is reported hung. So is a second hang
        while a worker is already left behind, which bounds the threads a wedged GPU can hold to
        two. Otherwise the GPU keeps what the collectors before the hung one read this cycle (the
        hung one is reported failed), a fresh worker reads it from the next cycle on without
        that collector, and the collector is read again once its call returns.
        """
        progress = slot.progress
        if progress is None or progress.reader is None or not progress.answered():
            return None
        if slot.detached is not None:
            return None
        progress.abandoned = True
        stuck = progress.reader
        log.warning("collector %s hangs on GPU %s; reading the GPU without it", stuck, slot.uuid)
        slot.detached, slot.stuck_reader = slot.worker, stuck
        slot.worker = Worker(f"gpu{slot.index}")
        gpu = progress.out.build()
        slot.last = gpu
        return GpuResult(gpu, dict(progress.timings), set(progress.failed) | {stuck})

    def _down_gpu(self, slot: GpuSlot) -> Gpu:
        return identity_only(slot, slot.down_reason)

    def _hung_gpu(self, slot: GpuSlot) -> Gpu:
        return identity_only(slot, "hung")


def _within(fut: concurrent.futures.Future[T], timeout: float) -> T | None:
    """``fut``'s result, or None when it is not done within ``timeout`` seconds (the worker's
    late result is then dropped with the future)."""
    try:
        return fut.result(timeout=max(0.0, timeout))
    except concurrent.futures.TimeoutError:
        return None
