"""Where validate's readings come from: the exporter's own readers in this process, or a running
exporter over HTTP.

:class:`SamplerSource` runs a :class:`~vgpumon.collect.Sampler` with the readers ``vgpumon serve``
uses, one cycle per reading, so GPM intervals and per-process sample cursors tile the measurement
window exactly. :class:`ExporterSource` reads ``/metrics`` (or ``/api/v1/snapshot``) of a
``vgpumon serve`` somewhere else: the way to check a host's exporter while the load runs inside a
VM or a container. It turns the exposition back into a :class:`~vgpumon.model.Snapshot`, so the
same mapping to readings applies to both.

An exporter samples on its own schedule; after every change of load this source waits until the
exporter has published two samples more (the first may straddle the change, the second cannot),
and it returns each published sample once.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from vgpumon.collect.base import Reader, SamplerConfig
from vgpumon.errors import ConfigError, VgpumonError, one_line
from vgpumon.loadgen.validate_readings import (
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
from vgpumon.model import (
    Gpm,
    Gpu,
    Memory,
    MigComputeInstance,
    MigGpuInstance,
    Process,
    SamplerHealth,
    SchemaError,
    Snapshot,
    Utilization,
    from_json,
)
from vgpumon.nvml.session import NvmlSession

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
    text = url.strip().rstrip("/")
    if not text.startswith(("http://", "https://")):
        raise ConfigError(f"bad --url {url!r}: give http://HOST:PORT (or https://)")
    for suffix in ("/metrics", "/api/v1/snapshot"):
        if text.endswith(suffix):
            text = text[: -len(suffix)]
    return text


class ExporterSource(_SnapshotSource):
    """Readings from a running ``vgpumon serve`` over HTTP."""

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
    ) -> None:
        if via not in VIA:
            raise ConfigError(f"--via must be one of {', '.join(VIA)}, got {via!r}")
        self.base = normalize_url(url)
        self.via = via
        self.timer: Timer = timer or RealTimer()
        self.request_timeout_s = request_timeout_s
        self.poll_s = poll_s
        self.fresh_samples = fresh_samples
        self.silence_timeout_s = silence_timeout_s
        self._http: Any = None
        self._latest: Snapshot | None = None
        self._process_series = PROCESS_SERIES_COMPLETE
        self._last_returned: tuple[float, int] | None = None

    @property
    def name(self) -> str:
        return f"exporter {self.url}"

    @property
    def url(self) -> str:
        return self.base + ("/metrics" if self.via == "metrics" else "/api/v1/snapshot")

    async def open(self) -> None:
        import aiohttp

        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.request_timeout_s)
        )
        deadline = self.timer.now() + self.silence_timeout_s
        while True:
            snapshot = await self._fetch(allow_unready=True)
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
        deadline = self.timer.now() + self.silence_timeout_s
        while fresh < self.fresh_samples:
            if self.timer.now() >= deadline:
                raise SourceError(
                    f"the exporter at {self.base} published no new sample in "
                    f"{self.silence_timeout_s:g} s (vgpumon_last_sample_timestamp_seconds did "
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
        assert self._latest is not None
        self._last_returned = _sample_id(self._latest)

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
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _reasons(self, target: Target) -> dict[str, str]:
        if self.via == "snapshot":
            return {}
        reasons = {
            GPM: (
                f"the exporter has no vgpumon_mig_sm_active_ratio for GPU instance "
                f"{target.gpu_instance_id} (no GPM there, or its gpm collector is off)"
                if target.is_mig
                else "the exporter has no vgpumon_gpu_sm_active_ratio for this GPU (no GPM "
                "there, or its gpm collector is off)"
            ),
            MEMORY: "the exporter has no memory-used series for the target",
            PROCESS_UTILIZATION: (
                "NVML has no per-process utilization on MIG-enabled GPUs"
                if target.is_mig
                else "the exporter has no vgpumon_process_sm_utilization_ratio for it"
            ),
        }
        if not target.is_mig:
            reasons[UTILIZATION] = "the exporter has no vgpumon_gpu_utilization_ratio for this GPU"
        if self._process_series == PROCESS_SERIES_OFF:
            reasons[PROCESSES] = (
                "the exporter has no per-process series (start it with --processes, or "
                "use --via snapshot)"
            )
        elif self._process_series == PROCESS_SERIES_TRUNCATED:
            reasons[PROCESSES] = (
                "the exporter's per-process series are capped and left processes out "
                "(vgpumon_process_series_truncated 1: raise its --processes-max, or use "
                "--via snapshot)"
            )
        return reasons

    async def _fetch(self, *, allow_unready: bool = False) -> Snapshot | None:
        """The exporter's current sample; None while it has none yet (503)."""
        import aiohttp

        accept = "text/plain;version=0.0.4" if self.via == "metrics" else "application/json"
        try:
            async with self._http.get(self.url, headers={"Accept": accept}) as response:
                body = await response.text()
                status = response.status
        except aiohttp.ClientError as exc:
            raise SourceError(f"cannot reach the exporter at {self.url}: {one_line(exc)}") from None
        except asyncio.TimeoutError:
            raise SourceError(
                f"the exporter at {self.url} did not answer within {self.request_timeout_s:g} s"
            ) from None
        if status == 503:
            return None
        if status == 401:
            raise SourceError(
                f"the exporter at {self.url} wants credentials (HTTP 401): put them in the URL, "
                "http://USER:PASSWORD@HOST:PORT"
            )
        if status != 200:
            raise SourceError(f"the exporter at {self.url} answered HTTP {status}")
        if self.via == "snapshot":
            try:
                return from_json(body)
            except (SchemaError, ValueError) as exc:
                raise SourceError(
                    f"{self.url} did not give a vgpumon snapshot: {one_line(exc)}"
                ) from None
        snapshot, self._process_series = snapshot_from_metrics(body)
        return snapshot


def _sample_id(snapshot: Snapshot | None) -> tuple[float, int]:
    if snapshot is None:
        return (0.0, -1)
    return (snapshot.timestamp, snapshot.health.cycles_total)


# ------------------------------------------------------------------ /metrics → Snapshot


def _int(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        return None


# What the exporter's per-process series can tell (``snapshot_from_metrics``).
PROCESS_SERIES_OFF = "off"  # started without --processes
PROCESS_SERIES_COMPLETE = "complete"
PROCESS_SERIES_TRUNCATED = "truncated"  # --processes-max left some processes out


def snapshot_from_metrics(text: str) -> tuple[Snapshot, str]:
    """The part of a Snapshot that validate reads, rebuilt from a vgpumon exposition.

    Returns the snapshot and the state of the exporter's per-process series, one of the
    ``PROCESS_SERIES_*`` values: with ``--processes`` the exporter always exports
    ``vgpumon_process_series_truncated``, 1 when its cap left processes out. Only a complete
    list becomes ``Gpu.processes``; otherwise it stays unknown (None), so that a process the cap
    left out is not reported as one NVML does not list.
    """
    from prometheus_client.parser import text_string_to_metric_families

    series: dict[str, list[tuple[Mapping[str, str], float]]] = defaultdict(list)
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                series[sample.name].append((sample.labels, float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise SourceError(f"the exporter's /metrics could not be parsed: {one_line(exc)}") from None
    if "vgpumon_gpu_info" not in series and "vgpumon_up" not in series:
        raise SourceError("this /metrics is not a vgpumon exporter's (no vgpumon_* families)")

    fields: dict[str, dict[str, Any]] = {}

    def gpu(labels: Mapping[str, str]) -> dict[str, Any] | None:
        uuid = labels.get("uuid")
        index = _int(labels.get("gpu"))
        if not uuid or index is None:
            return None
        return fields.setdefault(uuid, {"index": index, "uuid": uuid})

    def of_gpus(name: str) -> Iterator[tuple[dict[str, Any], Mapping[str, str], float]]:
        """The samples of ``name`` that name a GPU, with that GPU's fields."""
        for labels, value in series[name]:
            g = gpu(labels)
            if g is not None:
                yield g, labels, value

    def of_gpus_by(
        name: str, label: str
    ) -> Iterator[tuple[dict[str, Any], int, Mapping[str, str], float]]:
        """The samples of ``name`` that name a GPU and an integer ``label`` (pid, GPU instance)."""
        for g, labels, value in of_gpus(name):
            ident = _int(labels.get(label))
            if ident is not None:
                yield g, ident, labels, value

    for g, labels, _ in of_gpus("vgpumon_gpu_info"):
        g["name"] = labels.get("name") or None
        g["architecture"] = labels.get("architecture") or None
    for g, _, value in of_gpus("vgpumon_gpu_up"):
        g["up"] = value == 1.0
    for g, labels, value in of_gpus("vgpumon_gpu_virtualization_mode"):
        if value == 1.0:
            g["virtualization_mode"] = labels.get("mode")
    for g, _, value in of_gpus("vgpumon_gpu_mig_mode_enabled"):
        g["mig_mode_current"] = value == 1.0
    for g, _, value in of_gpus("vgpumon_gpu_utilization_ratio"):
        g["utilization"] = Utilization(gpu=value)
    for g, _, value in of_gpus("vgpumon_gpu_memory_used_bytes"):
        g["memory"] = Memory(used_bytes=int(value))
    for g, _, value in of_gpus("vgpumon_gpu_sm_active_ratio"):
        g["gpm"] = Gpm(sm_active=value)

    if "vgpumon_process_series_truncated" not in series:
        process_series = PROCESS_SERIES_OFF
    elif any(v == 1.0 for _, v in series["vgpumon_process_series_truncated"]):
        process_series = PROCESS_SERIES_TRUNCATED
    else:
        process_series = PROCESS_SERIES_COMPLETE
    processes: dict[str, dict[tuple[int, int | None], dict[str, Any]]] = defaultdict(dict)
    for name, key in (
        ("vgpumon_process_memory_used_bytes", "used_memory_bytes"),
        ("vgpumon_process_sm_utilization_ratio", "sm_utilization"),
    ):
        for g, pid, labels, value in of_gpus_by(name, "pid"):
            gi = _int(labels.get("gpu_instance"))
            entry = processes[g["uuid"]].setdefault(
                (pid, gi),
                {
                    "pid": pid,
                    "name": labels.get("process_name") or None,
                    "gpu_instance_id": gi,
                    "compute_instance_id": _int(labels.get("compute_instance")),
                },
            )
            entry[key] = int(value) if key == "used_memory_bytes" else value

    instances: dict[str, dict[int, dict[str, Any]]] = defaultdict(dict)
    for g, gi, labels, _ in of_gpus_by("vgpumon_mig_instance_info", "gpu_instance"):
        inst = instances[g["uuid"]].setdefault(
            gi, {"id": gi, "profile_name": labels.get("profile") or None, "cis": []}
        )
        ci = _int(labels.get("compute_instance"))
        inst["cis"].append(
            MigComputeInstance(
                id=ci if ci is not None else 0,
                mig_uuid=labels.get("mig_uuid") or None,
                placement_start=_int(labels.get("placement_start")),
                placement_size=_int(labels.get("placement_size")),
            )
        )
    for name, key in (
        ("vgpumon_mig_memory_used_bytes", "memory_used_bytes"),
        ("vgpumon_mig_sm_active_ratio", "sm_active"),
    ):
        for g, gi, _, value in of_gpus_by(name, "gpu_instance"):
            inst = instances[g["uuid"]].setdefault(gi, {"id": gi, "profile_name": None, "cis": []})
            inst[key] = value

    gpus = []
    for uuid, g in fields.items():
        if process_series == PROCESS_SERIES_COMPLETE:
            g["processes"] = tuple(
                Process(**entry)
                for _, entry in sorted(processes.get(uuid, {}).items(), key=lambda kv: kv[0][0])
            )
        gis = []
        for gi_id, inst in sorted(instances.get(uuid, {}).items()):
            sm = inst.get("sm_active")
            used = inst.get("memory_used_bytes")
            gis.append(
                MigGpuInstance(
                    id=gi_id,
                    profile_name=inst["profile_name"],
                    memory_used_bytes=int(used) if used is not None else None,
                    gpm=Gpm(sm_active=sm) if sm is not None else None,
                    compute_instances=tuple(sorted(inst["cis"], key=lambda c: c.id)),
                )
            )
        g["mig_instances"] = tuple(gis)
        gpus.append(Gpu(**g))

    timestamp = next(iter(series["vgpumon_last_sample_timestamp_seconds"]), ({}, 0.0))[1]
    cycles = next(iter(series["vgpumon_sampler_cycles_total"]), ({}, -1.0))[1]
    up = next(iter(series["vgpumon_up"]), ({}, 0.0))[1]
    snapshot = Snapshot(
        timestamp=timestamp,
        gpus=tuple(sorted(gpus, key=lambda g: g.index)),
        health=SamplerHealth(up=up == 1.0, cycles_total=int(cycles)),
        source="exporter",
    )
    return snapshot, process_series
