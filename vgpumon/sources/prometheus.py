"""Fill a :class:`History` from a Prometheus server, so graphs are full the moment they open.

A TUI that starts now has no past; the Prometheus that scrapes the same exporters has hours of
it. For each host shown, one range query per graphed metric (``/api/v1/query_range``, selecting
the host's GPUs by UUID, which are unique across a fleet) brings the last ``window`` seconds into
the history, merged under the live points.

Metric names and labels are not written here: they are found in the exporter's metric table
(:data:`vgpumon.metrics.table.FAMILIES`) by evaluating every family on a probe snapshot whose
fields all hold different values, and keeping the family (and label values, e.g. ``sensor="gpu"``)
that returns the value the history reads for that metric. A renamed family is followed without a
change here, and a history metric with no family is simply not backfilled.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpumon.metrics.table import FAMILIES, GPU_LABELS, ExportOptions
from vgpumon.model import (
    CollectorStatus,
    Gpm,
    Gpu,
    Memory,
    MigGpuInstance,
    Snapshot,
    Temperatures,
    Utilization,
    VgpuInstance,
    VgpuUtilization,
)
from vgpumon.sources.history import (
    GPU_METRICS,
    MIG_METRICS,
    VGPU_METRICS,
    History,
    gpu_entity,
    mig_entity,
    vgpu_entity,
)
from vgpumon.sources.promapi import PrometheusClient, PrometheusError, quote, regex_of

log = logging.getLogger(__name__)

DEFAULT_WINDOW_SECONDS = 600.0
YIELD_EVERY = 20_000  # history points merged between two turns of the event loop
PROBE_UUID = "GPU-00000000-0000-0000-0000-00000000beef"


@dataclass(frozen=True)
class Series:
    """Where one history metric lives in Prometheus."""

    kind: str  # gpu | vgpu | mig
    metric: str  # the history's metric name
    family: str  # the Prometheus metric name
    match: tuple[tuple[str, str], ...]  # extra label values that pick this reading


def _probe() -> tuple[Snapshot, Gpu]:
    """A snapshot whose every graphed field has a value no other field has."""
    values = iter(range(1001, 2000))

    def v() -> float:
        return next(values) / 7919.0  # distinct, below 1 (ratios), not round

    vgpu = VgpuInstance(
        vgpu_id=3,
        utilization=VgpuUtilization(sm=v(), memory=v()),
        framebuffer_used_bytes=int(v() * 1e12),
        framebuffer_total_bytes=int(v() * 1e12),
    )
    mig = MigGpuInstance(
        id=5,
        memory_used_bytes=int(v() * 1e12),
        memory_total_bytes=int(v() * 1e12),
        gpm=Gpm(sm_active=v(), dram_active=v(), tensor_active=v(), sm_occupancy=v()),
    )
    gpu = Gpu(
        index=0,
        uuid=PROBE_UUID,
        virtualization_mode="host_vgpu",
        utilization=Utilization(gpu=v(), memory=v(), encoder=v(), decoder=v()),
        memory=Memory(
            total_bytes=int(v() * 1e12), used_bytes=int(v() * 1e12), free_bytes=int(v() * 1e12)
        ),
        power_watts=v() * 1000,
        power_limit_watts=v() * 1000,
        temperatures=Temperatures(gpu_celsius=v() * 100, memory_celsius=v() * 100),
        gpm=Gpm(sm_active=v(), dram_active=v(), tensor_active=v(), sm_occupancy=v()),
        vgpu_instances=(vgpu,),
        mig_instances=(mig,),
    )
    collectors = tuple(CollectorStatus(name, True, 0.0) for name in ("vgpu", "mig", "gpm"))
    return Snapshot(timestamp=0.0, gpus=(gpu,), collectors=collectors), gpu


@functools.cache
def series_table() -> tuple[Series, ...]:
    """Every history metric that a family of the metric table exports, found by value."""
    snapshot, gpu = _probe()
    samples: list[tuple[str, dict[str, str], float]] = []
    for family in FAMILIES:
        try:
            for label_values, value in family.samples(snapshot, ExportOptions()):
                labels = dict(zip(family.labels, label_values, strict=False))
                samples.append((family.name, labels, value))
        except Exception:  # noqa: BLE001 - a family the probe cannot feed is not graphed
            continue
    wanted: list[tuple[str, str, float | None, tuple[str, ...]]] = []
    wanted += [("gpu", m, read(gpu), GPU_LABELS) for m, read in GPU_METRICS.items()]
    vgpu, mig = gpu.vgpu_instances[0], gpu.mig_instances[0]
    ids = (*GPU_LABELS, "vgpu_id")
    wanted += [("vgpu", m, read_v(vgpu), ids) for m, read_v in VGPU_METRICS.items()]
    mids = (*GPU_LABELS, "gpu_instance")
    wanted += [("mig", m, read_m(mig), mids) for m, read_m in MIG_METRICS.items()]
    found = []
    for kind, metric, wanted_value, identity in wanted:
        if wanted_value is None:
            continue
        value = float(wanted_value)
        for name, labels, sample in samples:
            if abs(sample - value) <= 1e-9 * max(1.0, abs(sample)):
                extra = tuple(sorted((k, v) for k, v in labels.items() if k not in identity))
                found.append(Series(kind, metric, name, extra))
                break
    return tuple(found)


def _entity(kind: str, labels: Mapping[str, Any]) -> str | None:
    uuid = labels.get("uuid")
    if not isinstance(uuid, str):
        return None
    try:
        if kind == "vgpu":
            return vgpu_entity(uuid, int(labels["vgpu_id"]))
        if kind == "mig":
            return mig_entity(uuid, int(labels["gpu_instance"]))
    except (KeyError, ValueError, TypeError):
        return None
    return gpu_entity(uuid)


def _selector(series: Series, uuids: list[str], client: PrometheusClient) -> str:
    parts = [f"uuid=~{quote(regex_of(uuids))}"] + [f"{k}={quote(v)}" for k, v in series.match]
    return client.select(series.family, *parts)


class PrometheusBackfill:
    """Range queries against one Prometheus server, written into a history."""

    def __init__(
        self,
        client: PrometheusClient | str,
        *,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        step_seconds: float = 1.0,
    ) -> None:
        self.client = client if isinstance(client, PrometheusClient) else PrometheusClient(client)
        self.url = self.client.url
        self.window = window_seconds
        self.step = max(step_seconds, window_seconds / 10000)  # Prometheus' 11k points cap

    async def close(self) -> None:
        await self.client.close()

    async def fill(self, history: History, host: str, snapshot: Snapshot) -> int:
        """Query the window before ``snapshot`` for its GPUs; returns the points added."""
        uuids = [g.uuid for g in snapshot.gpus]
        if not uuids:
            return 0
        end = snapshot.timestamp
        start = end - self.window
        added = 0
        for series in series_table():
            body = await self._query(_selector(series, uuids, self.client), start, end)
            # Read in a worker thread: an answer of a large host is millions of points.
            found = await asyncio.to_thread(_points, body, series.kind, end)
            merged = 0
            for entity, points in found.items():
                history.merge(host, entity, series.metric, points)
                added += len(points)
                merged += len(points)
                if merged >= YIELD_EVERY:
                    merged = 0
                    await asyncio.sleep(0)  # keys and redraws go on meanwhile
        return added

    async def _query(self, query: str, start: float, end: float) -> Any:
        """The answer of a range query (capped and decoded by the client, off the loop when
        large); its matrix is read by :func:`_points`."""
        try:
            return await self.client.range_query(query, start, end, self.step)
        except PrometheusError as exc:
            raise ConnectionError(exc.reason) from None


def _points(body: Any, kind: str, end: float) -> dict[str, list[tuple[float, float | None]]]:
    """The (time, value) points of a range query's answer per entity; what is not shaped as
    Prometheus shapes a matrix, or holds no time, is skipped (a NaN value is a gap)."""
    data = body.get("data") if isinstance(body, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    out: dict[str, list[tuple[float, float | None]]] = {}
    for item in result if isinstance(result, list) else ():
        labels = item.get("metric") if isinstance(item, dict) else None
        values = item.get("values") if isinstance(item, dict) else None
        entity = _entity(kind, labels) if isinstance(labels, dict) else None
        if entity is None or not isinstance(values, list):
            continue
        for pair in values:
            try:
                t, value = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError, KeyError):
                continue
            if not math.isfinite(t) or t >= end:
                continue  # not a time; or the present, which the live data owns
            out.setdefault(entity, []).append((t, value if math.isfinite(value) else None))
    return out
