"""The vGPU time-slice scheduler: its state per GPU (or per GPU instance) and its log as counters.

State: policy, ARR mode, time slice, ARR averaging factor (``_v2`` call first, v1 once the
session knows ``_v2`` is absent — R580 has no ``_v2``), plus the capabilities (supported policies,
time slice bounds), which never change and are read once per GPU.

Log: NVML keeps the last 200 scheduling decisions per engine in a ring (``logEntries``); each
entry is written when a software runlist is preempted and carries that runlist's cumulative run and
preemption time. The header says to read it at least five times per second to see every entry,
which a 1 s sampling cycle cannot do, so a :class:`SchedulerLogPoller` service polls every
watched GPU that has running vGPUs from its own thread, as fast as the ring fills (a quarter of
200 time slices, between 0.1 s and 1 s), and the reader also polls once per cycle, so the
cycle's counters are current. :class:`LogConsumer` turns the successive reads into counters:

* **De-duplication.** Entries up to the newest timestamp already consumed are skipped; entries that
  share that exact timestamp are told apart by runlist.
* **Missed entries.** When a read's oldest entry is newer than the last one consumed and the ring is
  full, the ring has wrapped since the previous read. The number lost is estimated from the read's
  own spacing: ``round((oldest - last_seen) / mean_spacing) - 1`` (never below 0).
* **Run and preemption time.** For a runlist already seen, the counters advance by the change of its
  cumulative ``timeRunTotal`` / ``cumulativePreemptionTime``, so time in missed entries is still
  counted; on first sight (or when the cumulative value went backwards) only the entry's own
  ``timeRun`` is added. Counters start when vgpumon starts watching, as Prometheus counters may.
* **Runlist → vGPU.** NVML does not say which vGPU a ``swRunlistId`` belongs to. vgpumon takes the
  runlist id as the 0-based position of the vGPU in NVML's active-vGPU list for that GPU (or GPU
  instance) at the time of the read; entries whose id is beyond the list are counted but not
  attributed. This is an assumption that a real vGPU host must confirm (the simulator implements
  exactly this convention); it is isolated in :func:`owner_of`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpumon.collect.base import GpuBuilder, GpuContext
from vgpumon.collect.starvation import StarvationTracker
from vgpumon.collect.threads import daemon_thread
from vgpumon.collect.vgpu import (
    active_vgpus,
    gpu_instance_handles,
    is_vgpu_host,
    mig_gpu_instance_ids,
)
from vgpumon.collect.vgpu_raw import (
    ARR_DISABLE,
    ARR_ENABLE,
    ENCODER_ENGINES,
    ENGINE_GRAPHICS,
    POLICY_BEST_EFFORT,
    RING_ENTRIES,
    LogEntry,
    SchedulerLog,
    SchedulerParams,
    as_int,
    newer_and_older_absent,
    scheduler_log,
    scheduler_state,
)
from vgpumon.model import SCHEDULER_POLICIES, VgpuScheduler, VgpuSchedulerUsage
from vgpumon.nvml.session import SYSTEM, GpuDown, NvmlSession

log = logging.getLogger(__name__)

SERVICE = "vgpu_scheduler_log"
DEFAULT_POLL_SECONDS = 0.1  # the fastest poll; the ring's fill time sets the actual rate
MAX_POLL_SECONDS = 1.0
CAPS_KEY = "vgpu_scheduler_caps"
SHARES_KEY = "vgpu_scheduler_shares"  # the GPU's StarvationTracker
PRE_GI_SCHEDULING = frozenset(
    {"kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper"}
)

Scope = int | None  # None: the whole GPU; an int: that GPU instance
# A watched log: a scope's graphics engine (the scope itself), or one of its encoder engines
# (scope, "nvenc0" | "nvenc1"; R590+ engine ids). On VDI and streaming hosts the encoder, not the
# graphics engine, is what VMs fight over.
WatchKey = Scope | tuple[Scope, str]


def owner_of(runlist: int, owners: Sequence[int]) -> int | None:
    """The vGPU a software runlist belongs to (see the module docstring for the convention)."""
    return owners[runlist] if 0 <= runlist < len(owners) else None


# --------------------------------------------------------------------------- log -> counters


@dataclass
class _Totals:
    run_ns: int = 0
    preemption_ns: int = 0


class LogConsumer:
    """Successive reads of one scheduler-log ring, turned into per-vGPU counters."""

    def __init__(self, ring_size: int = RING_ENTRIES) -> None:
        self.ring_size = ring_size
        self.last_ts: int | None = None
        self._at_last_ts: set[int] = set()  # runlists already consumed at exactly last_ts
        self._last_cumulative: dict[tuple[int, int], tuple[int, int]] = {}
        self.totals: dict[int, _Totals] = {}
        self.entries_total = 0
        self.missed_total = 0
        self.unattributed_total = 0
        self.reads = 0
        self.lock = threading.Lock()

    def consume(
        self,
        entries: Sequence[LogEntry],
        owners: Sequence[int],
        ring_full: bool,
        span: tuple[int, int, int] | None = None,
    ) -> int:
        """Account for the entries not seen before; returns how many were new.

        ``span`` (oldest, newest, count of the whole read) is given when ``entries`` holds only
        the entries from ``last_ts`` on (the rest were not even decoded).
        """
        fresh = [e for e in entries if self._is_new(e)]
        if span is None and entries:
            span = (entries[0].timestamp_ns, entries[-1].timestamp_ns, len(entries))
        if fresh and self.last_ts is not None and ring_full and span is not None:
            oldest, newest, count = span
            if oldest > self.last_ts and count > 1:
                spacing = (newest - oldest) / (count - 1)
                if spacing > 0:
                    self.missed_total += max(0, round((oldest - self.last_ts) / spacing) - 1)
        for e in fresh:
            self._account(e, owner_of(e.runlist, owners))
        self.reads += 1
        if fresh:
            newest = fresh[-1].timestamp_ns
            if newest != self.last_ts:
                self._at_last_ts = set()
            self.last_ts = newest
            self._at_last_ts |= {e.runlist for e in fresh if e.timestamp_ns == newest}
        return len(fresh)

    def _is_new(self, e: LogEntry) -> bool:
        if self.last_ts is None or e.timestamp_ns > self.last_ts:
            return True
        return e.timestamp_ns == self.last_ts and e.runlist not in self._at_last_ts

    def _account(self, e: LogEntry, vgpu: int | None) -> None:
        self.entries_total += 1
        if vgpu is None:
            self.unattributed_total += 1
            return
        t = self.totals.setdefault(vgpu, _Totals())
        key = (e.runlist, vgpu)
        prev = self._last_cumulative.get(key)
        if prev is not None and e.run_total_ns >= prev[0] and e.preemption_total_ns >= prev[1]:
            t.run_ns += e.run_total_ns - prev[0]
            t.preemption_ns += e.preemption_total_ns - prev[1]
        else:
            t.run_ns += e.run_ns
        self._last_cumulative[key] = (e.run_total_ns, e.preemption_total_ns)

    def prune(self, active: Sequence[int]) -> None:
        """Drop destroyed vGPUs so that churn never grows the consumer."""
        keep = set(active)
        for vi in [v for v in self.totals if v not in keep]:
            del self.totals[vi]
        for key in [k for k in self._last_cumulative if k[1] not in keep]:
            del self._last_cumulative[key]

    def usage(self, active: Sequence[int]) -> tuple[VgpuSchedulerUsage, ...]:
        """Counters for every active vGPU: zero for one that has not run since watching began."""
        if self.reads == 0:
            return ()
        out = []
        for vi in active:
            t = self.totals.get(vi, _Totals())
            out.append(
                VgpuSchedulerUsage(
                    vgpu_id=vi,
                    run_seconds_total=t.run_ns / 1e9,
                    preemption_seconds_total=t.preemption_ns / 1e9,
                )
            )
        return tuple(out)


# --------------------------------------------------------------------------- the poller service


@dataclass
class _Watch:
    """One scheduler scope of one GPU: how to read its log and whose runlists are in it."""

    target: Any  # device handle or GPU-instance handle
    gpu_instance: bool
    owners: Callable[[], Sequence[int] | None]
    bounds: tuple[int, int] | None
    consumer: LogConsumer = field(default_factory=LogConsumer)
    params: SchedulerParams | None = None
    engine: int = ENGINE_GRAPHICS
    # An encoder engine's log: a read that gives nothing (the driver has no such engine, or no
    # log for it) is skipped; it does not disarm the GPU's graphics polling.
    optional: bool = False


@dataclass
class _GpuWatch:
    scopes: dict[WatchKey, _Watch] = field(default_factory=dict)
    armed: bool = False
    busy: bool = False  # vGPUs are running: only then does the ring fill between cycles
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None


class SchedulerLogPoller:
    """Reads the scheduler logs of watched GPUs often enough that the 200-entry ring never wraps.

    One daemon thread per GPU, so that a GPU whose NVML calls hang stalls only its own polling. A
    GPU is polled only while *armed*: each successful sampling cycle arms it again with fresh
    handles, and any failed read disarms it, so a lost GPU or stale handle costs one counted error,
    not ten a second. ``interval=None`` turns the threads off (the cycle's own poll remains), which
    is what deterministic tests with a manual clock use.
    """

    def __init__(self, session: NvmlSession, interval: float | None = DEFAULT_POLL_SECONDS) -> None:
        self.session = session
        self.interval = interval
        self._gpus: dict[str, _GpuWatch] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def watch(self, uuid: str, scopes: dict[WatchKey, _Watch], *, busy: bool = True) -> None:
        """(Re)arm a GPU with this cycle's scopes; counters of scopes that stay are kept.

        ``busy``: vGPUs are running on it. A GPU without running vGPUs writes no log entries, so
        its thread does not poll (the cycle's own read still does, once per cycle).
        """
        with self._lock:
            gw = self._gpus.get(uuid)
            if gw is None:
                gw = self._gpus[uuid] = _GpuWatch()
        with gw.lock:
            for scope in [s for s in gw.scopes if s not in scopes]:
                del gw.scopes[scope]
            for scope, w in scopes.items():
                old = gw.scopes.get(scope)
                if old is not None:
                    old.target, old.owners, old.bounds = w.target, w.owners, w.bounds
                else:
                    gw.scopes[scope] = w
            gw.armed = bool(gw.scopes)
            gw.busy = busy
        if busy:
            self._ensure_thread(uuid, gw)

    def forget(self, uuid: str) -> None:
        with self._lock:
            gw = self._gpus.pop(uuid, None)
        if gw is not None:
            with gw.lock:
                gw.armed = False
                gw.scopes.clear()

    def scope(self, uuid: str, scope: WatchKey) -> _Watch | None:
        gw = self._gpus.get(uuid)
        return gw.scopes.get(scope) if gw is not None else None

    def poll(self, uuid: str) -> None:
        """Read every scope of one GPU once (from the poller thread or the sampling cycle)."""
        gw = self._gpus.get(uuid)
        if gw is None:
            return
        with gw.lock:
            if not gw.armed:
                return
            for w in gw.scopes.values():
                if not self._poll_scope(uuid, w):
                    gw.armed = False
                    return

    def _poll_scope(self, uuid: str, w: _Watch) -> bool:
        got: SchedulerLog | None = scheduler_log(
            self.session,
            uuid,
            w.target,
            gpu_instance=w.gpu_instance,
            bounds=w.bounds,
            after_ns=w.consumer.last_ts,  # decode only what is new
            engine=w.engine,
        )
        if got is None:
            return w.optional
        owners = w.owners()
        if owners is None:
            return False
        w.params = got.params
        with w.consumer.lock:
            w.consumer.consume(got.entries, owners, got.ring_full, got.span)
        return True

    def _ensure_thread(self, uuid: str, gw: _GpuWatch) -> None:
        if self.interval is None or self._closed.is_set():
            return
        if gw.thread is not None and gw.thread.is_alive():
            return
        gw.thread = daemon_thread(self._run, f"vgpumon-schedlog-{uuid[:12]}", (uuid, self.interval))
        gw.thread.start()

    def wait_seconds(self, gw: _GpuWatch, floor: float) -> float:
        """A quarter of the time the ring takes to fill: poll as fast as it fills, no faster.

        The scheduler writes an entry when a runlist is preempted, at most once per time slice,
        so the 200-entry ring lasts at least ``200 x time slice``; polling at a quarter of that
        leaves room for a poll delayed by a busy host without missing an entry. ``floor`` (the
        configured interval) is the fastest ever; once a second is the slowest.
        """
        slices = [
            w.params.timeslice_ns
            for w in gw.scopes.values()
            if w.params is not None and w.params.timeslice_ns
        ]
        if not slices:
            return floor
        fill = RING_ENTRIES * min(slices) / 1e9
        return max(floor, min(fill / 4, MAX_POLL_SECONDS))

    def _run(self, uuid: str, interval: float) -> None:
        wait = interval
        while not self._closed.wait(wait):
            gw = self._gpus.get(uuid)
            if gw is None:
                return
            wait = self.wait_seconds(gw, interval)
            if not gw.armed or not gw.busy:
                continue
            try:
                self.poll(uuid)
            except GpuDown:
                with gw.lock:
                    gw.armed = False
            except Exception:
                log.exception("scheduler log poll failed on %s", uuid)
                with gw.lock:
                    gw.armed = False

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            gpus = list(self._gpus.values())
            self._gpus.clear()
        for gw in gpus:
            with gw.lock:
                gw.armed = False


# --------------------------------------------------------------------------- the reader


@dataclass
class _Caps:
    supported: tuple[str, ...] = ()
    min_ns: int | None = None
    max_ns: int | None = None

    @property
    def bounds(self) -> tuple[int, int] | None:
        if self.min_ns and self.max_ns and self.min_ns <= self.max_ns:
            return self.min_ns, self.max_ns
        return None


def _policy(value: int) -> str:
    return SCHEDULER_POLICIES[value] if 0 <= value < len(SCHEDULER_POLICIES) else "unknown"


def _caps(ctx: GpuContext) -> _Caps | None:
    cached = ctx.state.get(CAPS_KEY)
    if isinstance(cached, _Caps):
        return cached
    raw = ctx.call("nvmlDeviceGetVgpuSchedulerCapabilities", ctx.handle)
    if raw is None:
        return None
    supported = []
    for v in list(raw.supportedSchedulers):
        name = _policy(int(v))
        if int(v) and name not in supported:
            supported.append(name)
    caps = _Caps(
        supported=tuple(supported),
        min_ns=as_int(raw.minTimeslice) or None,
        max_ns=as_int(raw.maxTimeslice) or None,
    )
    ctx.state[CAPS_KEY] = caps
    return caps


def _scheduler(
    params: SchedulerParams | None,
    caps: _Caps | None,
    gi: int | None,
    consumer: LogConsumer | None,
    active: Sequence[int],
    engine: str = "graphics",
) -> VgpuScheduler:
    policy = _policy(params.policy) if params is not None else None
    arr: bool | None = None
    if params is not None and params.arr_mode in (ARR_ENABLE, ARR_DISABLE):
        arr = params.arr_mode == ARR_ENABLE
    meaningful = params is not None and params.policy != POLICY_BEST_EFFORT
    slice_ns = params.timeslice_ns if meaningful and params is not None else None
    timeslice = slice_ns / 1e9 if slice_ns else None
    avg = params.avg_factor if meaningful and params is not None and params.avg_factor else None
    usage: tuple[VgpuSchedulerUsage, ...] = ()
    entries = missed = 0
    if consumer is not None:
        with consumer.lock:
            consumer.prune(active)
            usage = consumer.usage(active)
            entries, missed = consumer.entries_total, consumer.missed_total
    return VgpuScheduler(
        gpu_instance_id=gi,
        engine=engine,
        policy=policy,
        arr_enabled=arr,
        timeslice_seconds=timeslice,
        average_factor=avg,
        # ARR's scheduling frequency is only ever *set* (nvmlVgpuSchedulerSetParams_t); what the
        # getters return is the resulting time slice, so the frequency is its inverse.
        frequency_hertz=1.0 / timeslice if arr and timeslice else None,
        supported_policies=caps.supported if caps else (),
        min_timeslice_seconds=caps.min_ns / 1e9 if caps and caps.min_ns else None,
        max_timeslice_seconds=caps.max_ns / 1e9 if caps and caps.max_ns else None,
        usage=usage,
        log_entries_total=entries,
        log_entries_missed_total=missed,
    )


class SchedulerReader:
    """Reader ``scheduler``; ``attach`` installs the log poller on the sampler."""

    name = "scheduler"
    default_enabled = True

    def attach(self, sampler: Any) -> None:
        sampler.services.setdefault(SERVICE, SchedulerLogPoller(sampler.session))

    def read(self, ctx: GpuContext, out: GpuBuilder) -> None:
        poller = ctx.shared.get(SERVICE)
        if not isinstance(poller, SchedulerLogPoller):
            poller = SchedulerLogPoller(ctx.session)
            ctx.shared[SERVICE] = poller
        if not is_vgpu_host(ctx, out):
            poller.forget(ctx.uuid)
            return
        active = active_vgpus(ctx, out)
        if active is None:
            poller.forget(ctx.uuid)
            return
        mig = bool(out.get("mig_mode_current"))
        # The capabilities (and every device-level scheduler call) are NOT_SUPPORTED with MIG on.
        caps = None if mig else _caps(ctx)
        bounds = caps.bounds if caps else None
        scopes: dict[WatchKey, _Watch] = {}
        members: dict[Scope, list[int]] = {}
        if mig:
            # Time-sliced vGPUs inside a GPU instance are a Blackwell GB20x feature; the per-GI
            # calls answer NOT_SUPPORTED on older GPUs, so they are not asked there at all.
            gi_of = {i.vgpu_id: i.gpu_instance_id for i in out.get("vgpu_instances") or ()}
            gi_ids = set(mig_gpu_instance_ids(out)) | {g for g in gi_of.values() if g is not None}
            if out.get("architecture") not in PRE_GI_SCHEDULING and not _absent(
                ctx, gpu_instance=True
            ):
                for gi, handle in gpu_instance_handles(ctx, gi_ids).items():
                    members[gi] = [vi for vi in active if gi_of.get(vi) == gi]
                    scopes[gi] = _Watch(handle, True, _fixed(members[gi]), bounds)
        elif not _absent(ctx, gpu_instance=False):
            members[None] = active
            scopes[None] = _Watch(ctx.handle, False, _device_owners(ctx), bounds)
        if not scopes:
            poller.forget(ctx.uuid)
            return

        graphics: dict[Scope, _Watch] = {
            k: w for k, w in scopes.items() if not isinstance(k, tuple)
        }
        for scope, spec in graphics.items():
            # The encoder engines once the scope's graphics log has answered through a call that
            # takes an engine id (the device's _v2; a GPU instance's v1 or _v2): where the
            # symbol is missing, asking for each engine would only count the same absence again.
            seen = poller.scope(ctx.uuid, scope)
            if seen is None or seen.params is None:
                continue
            if not spec.gpu_instance and seen.params.api != "v2":
                continue
            for name, engine in ENCODER_ENGINES.items():
                if not _engine_absent(ctx, engine, gpu_instance=spec.gpu_instance):
                    scopes[(scope, name)] = _Watch(
                        spec.target,
                        spec.gpu_instance,
                        spec.owners,
                        bounds,
                        engine=engine,
                        optional=True,
                    )
        poller.watch(ctx.uuid, scopes, busy=bool(active))
        poller.poll(ctx.uuid)
        encoders = []
        for key in [k for k in scopes if isinstance(k, tuple)]:
            scope, name = key
            w = poller.scope(ctx.uuid, key)
            if w is None or w.consumer.reads == 0:
                continue  # the engine never answered: no scheduler of it
            encoders.append(_scheduler(w.params, None, scope, w.consumer, members[scope], name))
        schedulers = []
        for scope, spec in graphics.items():
            if _absent(ctx, gpu_instance=spec.gpu_instance):
                continue  # no log here, and then no scheduler state either: one probe was enough
            w = poller.scope(ctx.uuid, scope)
            params = scheduler_state(
                ctx.session, ctx.uuid, spec.target, gpu_instance=spec.gpu_instance, bounds=bounds
            )
            if params is None and w is not None:
                params = w.params  # the log carries the same policy and parameters
            if params is None and (w is None or w.consumer.reads == 0):
                continue
            schedulers.append(
                _scheduler(params, caps, scope, w.consumer if w else None, members[scope])
            )
        # The share verdicts, decided here once from the counters just read (docs/verdicts.md):
        # the graphics engine's, and each encoder engine's by the same rule.
        vgpus, types = out.get("vgpu_instances") or (), out.get("vgpu_types") or ()
        out.set(vgpu_schedulers=_tracker(ctx, "graphics").update(ctx.now, schedulers, vgpus, types))
        out.set(
            vgpu_encoder_schedulers=tuple(
                sch
                for name in ENCODER_ENGINES
                for sch in _tracker(ctx, name).update(
                    ctx.now, [e for e in encoders if e.engine == name], vgpus, types
                )
            )
        )


def _tracker(ctx: GpuContext, engine: str) -> StarvationTracker:
    """The GPU's share verdicts of one engine (a tracker keys its readings by GPU instance, so
    each engine has its own)."""
    key = SHARES_KEY if engine == "graphics" else f"{SHARES_KEY}.{engine}"
    tracker = ctx.state.get(key)
    if not isinstance(tracker, StarvationTracker):
        tracker = ctx.state[key] = StarvationTracker()
    return tracker


def _engine_absent(ctx: GpuContext, engine: int, *, gpu_instance: bool) -> bool:
    """An encoder engine's log is known to be unsupported here (the device has it through
    ``_v2`` only; a GPU instance through ``_v2`` or v1)."""
    if gpu_instance:
        v1 = "nvmlGpuInstanceGetVgpuSchedulerLog"
        return newer_and_older_absent(
            ctx.session, ctx.uuid, f"{v1}_v2", v1, ("gpu_instance", engine)
        )
    return ctx.session.is_absent(SYSTEM, "nvmlDeviceGetVgpuSchedulerLog_v2", ((), engine))


def _absent(ctx: GpuContext, *, gpu_instance: bool) -> bool:
    """Both the ``_v2`` and the v1 log call are known to be unsupported here."""
    v1 = "nvmlGpuInstanceGetVgpuSchedulerLog" if gpu_instance else "nvmlDeviceGetVgpuSchedulerLog"
    key = "gpu_instance" if gpu_instance else ()
    return newer_and_older_absent(ctx.session, ctx.uuid, f"{v1}_v2", v1, key)


def _fixed(members: list[int]) -> Callable[[], Sequence[int] | None]:
    return lambda: members


def _device_owners(ctx: GpuContext) -> Callable[[], Sequence[int] | None]:
    """The active-vGPU list at the moment of each poll (it changes under churn)."""
    session, uuid, handle = ctx.session, ctx.uuid, ctx.handle

    def owners() -> Sequence[int] | None:
        listed = session.call(uuid, "nvmlDeviceGetActiveVgpus", handle)
        if listed is None:
            return None
        return [v for v in (as_int(x) for x in listed) if v]

    return owners


READERS = [SchedulerReader()]
