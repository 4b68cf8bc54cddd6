"""Where validate's readings come from: the exporter's own readers in this process, or a running
exporter over HTTP.

:class:`SamplerSource` runs a :class:`~vgpumon.collect.Sampler` with the readers ``vgpumon serve``
uses, one cycle per reading, so GPM intervals and per-process sample cursors tile the measurement
window exactly. :class:`ExporterSource` reads ``/metrics`` (or ``/api/v1/snapshot``) of a
``vgpumon serve`` somewhere else: the way to check a host's exporter while the load runs inside a
VM or a container. Its requests go through :class:`vgpumon.sources.remote.ExporterClient` (the one
HTTP client of vgpumon) and :mod:`vgpumon.metrics.parse` turns the exposition back into a
:class:`~vgpumon.model.Snapshot`, so the same mapping to readings applies to both.

An exporter samples on its own schedule; after every change of load this source waits until the
exporter has published two samples more (the first may straddle the change, the second cannot),
and it returns each published sample once. GPM metrics and per-process utilization are averages
since their previous read, which an exporter does every ``--intervals.gpm`` /
``--intervals.processes`` (5 s by default), not every cycle: the exporter publishes its cadences
(``vgpumon_sampler_cadence_seconds``), and after a change of load this source also waits until
a published average can only cover time after the change (:func:`cover_seconds`).
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from vgpumon.collect.base import Reader, SamplerConfig
from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.metrics.parse import (
    PROCESS_SERIES_COMPLETE,
    PROCESS_SERIES_OFF,
    PROCESS_SERIES_TRUNCATED,
    ExpositionError,
    snapshot_from_metrics,
)
from vgpumon.metrics.table import (
    GPU_SM_ACTIVE_RATIO,
    GPU_UTILIZATION_RATIO,
    LAST_SAMPLE_TIMESTAMP_SECONDS,
    MIG_SM_ACTIVE_RATIO,
    PROCESS_SM_UTILIZATION_RATIO,
)
from vgpumon.metrics.table import PROCESS_SERIES_TRUNCATED as PROCESS_SERIES_TRUNCATED_FAMILY
from vgpumon.model import Snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sources.remote import (
    METRICS_PATH,
    SNAPSHOT_PATH,
    Connection,
    ExporterClient,
    FetchError,
    NotReady,
    RemoteTarget,
)
from vgpumon.validate.readings import (
    GPM,
    MEMORY,
    PROCESS_UTILIZATION,
    PROCESSES,
    UTILIZATION,
    Reading,
    Target,
    reading_from_snapshot,
    resolve_target,
)

VIA = ("metrics", "snapshot")


class Timer(Protocol):
    """Time as the run sees it; tests swap in one that moves a simulator's manual clock."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class RealTimer:
    def now(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


# The readings whose values are averages since the previous read, by exporter cadence name.
AVERAGED_CADENCES = {"gpm": "GPM metrics", "processes": "per-process utilization"}


def cover_seconds(snapshot: Snapshot) -> float:
    """How long after a change of load (measured from the first sample published after it) an
    exporter's averages cover only time after the change; 0 when they are read every cycle.

    An average published at time T was read at most one gap (cadence + half an interval, by
    ``GpuContext.due``) plus a cycle before T and spans one gap before that read: it starts
    after the change once T is past it by 2 x (cadence + interval).
    """
    interval = snapshot.health.interval_seconds or 0.0
    cadence = max(
        (c.seconds for c in snapshot.health.cadences if c.name in AVERAGED_CADENCES),
        default=0.0,
    )
    if cadence <= interval:
        return 0.0
    return 2.0 * (cadence + interval)


def in_process_config(sample_interval: float) -> SamplerConfig:
    """The sampler validate runs in this process: a cycle per reading, every value at its
    collector's cadence as ``serve`` reads it, except the averages validate measures (GPM, and
    per-process utilization), read at every reading so that the readings of a window tile it
    exactly. ``validate --url`` checks an exporter's own cadences (:func:`cover_seconds`)."""
    from vgpumon.collect.gpm import GPM
    from vgpumon.collect.processes import PROCESSES

    return SamplerConfig(interval_seconds=sample_interval, cadences={GPM: 0.0, PROCESSES: 0.0})


class SourceError(VgpumonError):
    """The readings could not be had (exporter unreachable or silent): the run cannot go on."""


class ReadingSource(Protocol):
    @property
    def name(self) -> str: ...

    async def open(self) -> None: ...

    async def resolve(self, selector: str) -> Target: ...

    async def start_window(self) -> None:
        """Called once the load has settled: readings from now on describe only this load."""
        ...

    def notes(self) -> list[str]:
        """What the run should say about how it reads (after ``open``), for the report."""
        ...

    async def read(self, target: Target) -> Reading | None:
        """The next reading, or ``None`` when nothing new was published since the last one."""
        ...

    async def close(self) -> None: ...


class _SnapshotSource(abc.ABC):
    """A source that finds targets in the newest snapshot it has, opening itself on first use."""

    _latest: Snapshot | None = None

    @abc.abstractmethod
    async def open(self) -> None: ...

    async def resolve(self, selector: str) -> Target:
        if self._latest is None:
            await self.open()
        assert self._latest is not None
        return resolve_target(self._latest, selector)


# ---------------------------------------------------------------------- in-process readers


class SamplerSource(_SnapshotSource):
    """The exporter's readers, run here: one sampler cycle per reading.

    ``readers`` replaces the reader list (tests inject a deliberately wrong one); ``clock`` is the
    sampler's wall clock (a simulator's manual clock in tests).
    """

    def __init__(
        self,
        session: NvmlSession,
        *,
        config: SamplerConfig | None = None,
        readers: Sequence[Reader] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from vgpumon.collect import Sampler

        self.session = session
        config = config or in_process_config(SamplerConfig().interval_seconds)
        self.sampler = Sampler(session, config, readers, clock=clock)
        self._latest: Snapshot | None = None

    @property
    def name(self) -> str:
        return f"vgpumon readers in this process ({self.session.source})"

    async def open(self) -> None:
        self._latest = await self.sampler.cycle()
        if self._latest.health.wedged:
            raise SourceError("the first NVML sampling cycle did not finish (the driver hangs)")

    async def start_window(self) -> None:
        # A cycle now makes the next one's GPM interval and process-sample cursor start here.
        self._latest = await self.sampler.cycle()

    def notes(self) -> list[str]:
        return []

    async def read(self, target: Target) -> Reading:
        snapshot = await self.sampler.cycle()
        self._latest = snapshot
        if snapshot.health.wedged:
            return Reading(snapshot.timestamp, error="the NVML sampling cycle did not finish")
        return reading_from_snapshot(snapshot, target)

    async def close(self) -> None:
        self.sampler.close()


# ---------------------------------------------------------------------- a running exporter


def normalize_url(url: str) -> str:
    """The exporter's base URL from what the user typed (a trailing /metrics is fine)."""
    return RemoteTarget(url).base_url


class ExporterSource(_SnapshotSource):
    """Readings from a running ``vgpumon serve`` over HTTP (through :class:`ExporterClient`)."""

    def __init__(
        self,
        url: str,
        *,
        timer: Timer | None = None,
        via: str = "metrics",
        request_timeout_s: float = 5.0,
        poll_s: float = 0.25,
        fresh_samples: int = 2,
        silence_timeout_s: float = 30.0,
        connection: Connection | None = None,
    ) -> None:
        if via not in VIA:
            raise ConfigError(f"--via must be one of {', '.join(VIA)}, got {via!r}")
        self.target = RemoteTarget(url)
        self.base = self.target.base_url
        self.via = via
        self.timer: Timer = timer or RealTimer()
        self.request_timeout_s = request_timeout_s
        self.poll_s = poll_s
        self.fresh_samples = fresh_samples
        self.silence_timeout_s = silence_timeout_s
        connection = connection or Connection()
        self.client = ExporterClient(
            self.target, dataclasses.replace(connection, timeout_seconds=request_timeout_s)
        )
        self._latest: Snapshot | None = None
        self._process_series = PROCESS_SERIES_COMPLETE
        self._last_returned: tuple[float, int] | None = None

    @property
    def name(self) -> str:
        return f"exporter {self.url}"

    @property
    def url(self) -> str:
        return self.target.endpoint(METRICS_PATH if self.via == "metrics" else SNAPSHOT_PATH)

    async def open(self) -> None:
        deadline = self.timer.now() + self.silence_timeout_s
        while True:
            snapshot = await self._fetch()
            if snapshot is not None:
                self._latest = snapshot
                return
            if self.timer.now() >= deadline:
                raise SourceError(
                    f"the exporter at {self.base} has no sample after {self.silence_timeout_s:g} s "
                    "(it answers 503: its first sampling cycle did not finish)"
                )
            await self.timer.sleep(self.poll_s)

    async def start_window(self) -> None:
        """Wait until the exporter published ``fresh_samples`` samples after this moment."""
        seen = {_sample_id(self._latest)} if self._latest is not None else set()
        latest = await self._fetch()
        if latest is not None:
            seen.add(_sample_id(latest))
        fresh = 0
        first_fresh: float | None = None  # the exporter's time of the first sample after now
        deadline = self.timer.now() + self.silence_timeout_s
        while True:
            if fresh >= self.fresh_samples:
                assert self._latest is not None and first_fresh is not None
                # Averages read at a cadence: wait (by the exporter's own clock) until the
                # published ones began after the change.
                if self._latest.timestamp >= first_fresh + cover_seconds(self._latest):
                    break
            if self.timer.now() >= deadline:
                raise SourceError(
                    f"the exporter at {self.base} published no new sample in "
                    f"{self.silence_timeout_s:g} s ({LAST_SAMPLE_TIMESTAMP_SECONDS.name} did "
                    "not change): is its sampler wedged?"
                )
            await self.timer.sleep(self.poll_s)
            snapshot = await self._fetch()
            if snapshot is None:
                continue
            key = _sample_id(snapshot)
            if key not in seen:
                seen.add(key)
                fresh += 1
                self._latest = snapshot
                if first_fresh is None:
                    first_fresh = snapshot.timestamp
                deadline = self.timer.now() + self.silence_timeout_s  # it is not silent
        assert self._latest is not None
        self._last_returned = _sample_id(self._latest)

    def notes(self) -> list[str]:
        """How the exporter's cadences shape the run (said at start), or what it needs."""
        if self._latest is None:
            return []
        health = self._latest.health
        if health.interval_seconds is None:
            return [
                "the exporter does not publish its sampling cadences (an older vgpumon): if it "
                "reads GPM or processes less often than every cycle, its averages may straddle "
                "the steps; run it with --intervals.gpm and --intervals.processes equal to "
                "--interval"
            ]
        cover = cover_seconds(self._latest)
        if cover <= 0:
            return []
        read = ", ".join(
            f"{AVERAGED_CADENCES[c.name]} every {c.seconds:g} s"
            for c in health.cadences
            if c.name in AVERAGED_CADENCES
        )
        return [
            f"the exporter reads {read} (cycles every {health.interval_seconds:g} s): each step "
            f"waits {cover:g} s after the load settles, until those averages cover only its load"
        ]

    async def read(self, target: Target) -> Reading | None:
        snapshot = await self._fetch()
        if snapshot is None:
            return None
        key = _sample_id(snapshot)
        if key == self._last_returned:
            return None
        self._last_returned = key
        self._latest = snapshot
        return reading_from_snapshot(snapshot, target, reasons=self._reasons(target))

    async def close(self) -> None:
        await self.client.close()

    def _reasons(self, target: Target) -> dict[str, str]:
        if self.via == "snapshot":
            return {}
        reasons = {
            GPM: (
                f"the exporter has no {MIG_SM_ACTIVE_RATIO.name} for GPU instance "
                f"{target.gpu_instance_id} (no GPM there, or its gpm collector is off)"
                if target.is_mig
                else f"the exporter has no {GPU_SM_ACTIVE_RATIO.name} for this GPU (no GPM "
                "there, or its gpm collector is off)"
            ),
            MEMORY: "the exporter has no memory-used series for the target",
            PROCESS_UTILIZATION: (
                "NVML has no per-process utilization on MIG-enabled GPUs"
                if target.is_mig
                else f"the exporter has no {PROCESS_SM_UTILIZATION_RATIO.name} for it"
            ),
        }
        if not target.is_mig:
            reasons[UTILIZATION] = f"the exporter has no {GPU_UTILIZATION_RATIO.name} for this GPU"
        if self._process_series == PROCESS_SERIES_OFF:
            reasons[PROCESSES] = (
                "the exporter has no per-process series (start it with --process-series, or "
                "use --via snapshot)"
            )
        elif self._process_series == PROCESS_SERIES_TRUNCATED:
            reasons[PROCESSES] = (
                "the exporter's per-process series are capped and left processes out "
                f"({PROCESS_SERIES_TRUNCATED_FAMILY.name} 1: raise its --process-series-max, "
                "or use --via snapshot)"
            )
        return reasons

    async def _fetch(self) -> Snapshot | None:
        """The exporter's current sample; None while it has none yet (503)."""
        try:
            if self.via == "snapshot":
                return await self.client.snapshot()
            body = await self.client.get_text(METRICS_PATH, "text/plain;version=0.0.4")
        except NotReady:
            return None
        except FetchError as exc:
            raise SourceError(self._message(exc)) from None
        try:
            snapshot, self._process_series = snapshot_from_metrics(body)
        except ExpositionError as exc:
            raise SourceError(str(exc)) from None
        return snapshot

    def _message(self, exc: FetchError) -> str:
        """validate's wording of a failed request (it names the URL and what to do)."""
        if exc.kind == FetchError.TIMEOUT:
            return f"the exporter at {self.url} did not answer within {self.request_timeout_s:g} s"
        if exc.kind == FetchError.AUTH and self.client.sends_credentials:
            return f"the exporter at {self.url} refused the credentials (HTTP 401)"
        if exc.kind == FetchError.AUTH:
            return (
                f"the exporter at {self.url} wants credentials (HTTP 401): give --username and "
                "--password-file, or put them in the URL, http://USER:PASSWORD@HOST:PORT"
            )
        if exc.kind == FetchError.STATUS:
            return f"the exporter at {self.url} answered HTTP {exc.status}"
        if exc.kind == FetchError.PAYLOAD:
            return f"{self.url} did not give a vgpumon snapshot: {exc.reason}"
        return f"cannot reach the exporter at {self.url}: {exc.reason}"


def _sample_id(snapshot: Snapshot | None) -> tuple[float, int]:
    if snapshot is None:
        return (0.0, -1)
    return (snapshot.timestamp, snapshot.health.cycles_total)
