"""Recent values per (host, entity, metric), for graphs and rates, in bounded ring buffers.

A snapshot is one instant; graphs need the last minutes and some figures are rates of counters
(the share of the GPU a vGPU really ran = run-seconds increase / wall time). :class:`History` keeps
the newest ``maxlen`` points of each series in a ring of two preallocated float arrays (16 bytes a
point, allocated whole when the series first appears), so memory is fixed from the first reading
however long a UI runs, and is fed from :class:`HostUpdate` objects (a repeated snapshot is
recorded once). Older points can be merged in later (a Prometheus backfill) without losing order.

Entities are strings: a GPU's UUID, ``<uuid>/vgpu/<id>`` for a vGPU instance, ``<uuid>/gi/<id>``
for a MIG GPU instance. Absent values (``None``) are kept as gaps, never as 0.
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Callable, Iterable, Iterator

from vgpumon.feed import HostUpdate
from vgpumon.model import Gpm, Gpu, MigGpuInstance, Snapshot, VgpuInstance

DEFAULT_POINTS = 600  # ten minutes at a 1 s refresh
Point = tuple[float, float | None]


class Ring:
    """The newest ``maxlen`` points of one series in two preallocated ``array('d')`` rings; an
    absent value is stored as NaN and read back as None."""

    __slots__ = ("_len", "_start", "_t", "_v", "maxlen", "newest")

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._t = array("d", bytes(8 * maxlen))
        self._v = array("d", bytes(8 * maxlen))
        self._start = 0
        self._len = 0
        self.newest = -math.inf  # the newest point's time (every append is newer)

    def __len__(self) -> int:
        return self._len

    def append(self, point: Point) -> None:
        t, v = point
        n = self.maxlen
        if self._len < n:
            i = (self._start + self._len) % n
            self._len += 1
        else:
            i = self._start
            self._start = (self._start + 1) % n
        self._t[i] = t
        self._v[i] = math.nan if v is None else v
        self.newest = t

    def _at(self, k: int) -> Point:
        i = (self._start + k) % self.maxlen
        v = self._v[i]
        return self._t[i], None if math.isnan(v) else v

    def __getitem__(self, k: int) -> Point:
        if k < 0:
            k += self._len
        if not 0 <= k < self._len:
            raise IndexError(k)
        return self._at(k)

    def __iter__(self) -> Iterator[Point]:
        return (self._at(k) for k in range(self._len))

    def __reversed__(self) -> Iterator[Point]:
        return (self._at(k) for k in range(self._len - 1, -1, -1))

    def clear(self) -> None:
        self._start = self._len = 0
        self.newest = -math.inf

    def extend(self, points: Iterable[Point]) -> None:
        for p in points:
            self.append(p)


def gpu_entity(uuid: str) -> str:
    return uuid


def vgpu_entity(uuid: str, vgpu_id: int) -> str:
    return f"{uuid}/vgpu/{vgpu_id}"


def mig_entity(uuid: str, gpu_instance_id: int) -> str:
    return f"{uuid}/gi/{gpu_instance_id}"


def _gpm(attr: str) -> Callable[[Gpm | None], float | None]:
    return lambda g: None if g is None else getattr(g, attr)


_gpm_sm, _gpm_dram, _gpm_tensor = _gpm("sm_active"), _gpm("dram_active"), _gpm("tensor_active")

# metric name -> how to read it; these names are what graphs and the Prometheus backfill use.
GPU_METRICS: dict[str, Callable[[Gpu], float | None]] = {
    "util": lambda g: g.utilization.gpu,
    "memory_used": lambda g: g.memory.used_bytes,
    "memory_total": lambda g: g.memory.total_bytes,
    "power": lambda g: g.power_watts,
    "power_limit": lambda g: g.power_limit_watts,
    "temperature": lambda g: g.temperatures.gpu_celsius,
    "gpm_sm": lambda g: _gpm_sm(g.gpm),
    "gpm_dram": lambda g: _gpm_dram(g.gpm),
    "gpm_tensor": lambda g: _gpm_tensor(g.gpm),
}
VGPU_METRICS: dict[str, Callable[[VgpuInstance], float | None]] = {
    "sm": lambda v: v.utilization.sm,
    "memory": lambda v: v.utilization.memory,
    "framebuffer_used": lambda v: v.framebuffer_used_bytes,
}
MIG_METRICS: dict[str, Callable[[MigGpuInstance], float | None]] = {
    "memory_used": lambda m: m.memory_used_bytes,
    "gpm_sm": lambda m: _gpm_sm(m.gpm),
    "gpm_dram": lambda m: _gpm_dram(m.gpm),
    "gpm_tensor": lambda m: _gpm_tensor(m.gpm),
}


class History:
    """Bounded series of recent values, fed from host updates."""

    def __init__(self, maxlen: int = DEFAULT_POINTS) -> None:
        self.maxlen = max(2, maxlen)
        # host -> (entity, metric) -> points: a host's series found without building a key
        # object per point (a large host records thousands of points per reading).
        self._hosts: dict[str, dict[tuple[str, str], Ring]] = {}
        self._last: dict[str, float] = {}  # host -> timestamp of the newest recorded snapshot
        self._entities: dict[tuple[str, int], str] = {}  # (uuid, vGPU id) -> its entity name

    # ------------------------------------------------------------------ feeding

    def record(self, update: HostUpdate) -> bool:
        """Record the update's snapshot once; False when it was already recorded (or absent)."""
        snap = update.snapshot
        if snap is None or snap.timestamp <= self._last.get(update.host, float("-inf")):
            return False
        self.record_snapshot(update.host, snap)
        return True

    def record_snapshot(self, host: str, snap: Snapshot) -> None:
        self._last[host] = snap.timestamp
        t = snap.timestamp
        series = self._hosts.setdefault(host, {})
        add = self._adder(host, series, t)
        for gpu in snap.gpus:
            uuid = gpu.uuid
            if not gpu.up:
                for metric in GPU_METRICS:
                    add(uuid, metric, None)
                continue
            for metric, read in GPU_METRICS.items():
                add(uuid, metric, _num(read(gpu)))
            for v in gpu.vgpu_instances:
                entity = self._vgpu(uuid, v.vgpu_id)
                for metric, read_v in VGPU_METRICS.items():
                    add(entity, metric, _num(read_v(v)))
            for gi in gpu.mig_instances:
                entity = mig_entity(uuid, gi.id)
                for metric, read_m in MIG_METRICS.items():
                    add(entity, metric, _num(read_m(gi)))

    def _adder(
        self, host: str, series: dict[tuple[str, str], Ring], t: float
    ) -> Callable[[str, str, float | None], None]:
        """Appends points at time ``t`` to the host's series: at once when the point is the
        newest (every live reading), through :meth:`add` otherwise."""

        def add(entity: str, metric: str, value: float | None) -> None:
            ring = series.get((entity, metric))
            if ring is not None and t > ring.newest:
                ring.append((t, value))
            else:
                self.add(host, entity, metric, t, value)

        return add

    def _vgpu(self, uuid: str, vgpu_id: int) -> str:
        entity = self._entities.get((uuid, vgpu_id))
        if entity is None:
            if len(self._entities) > 100_000:  # vGPUs that came and went
                self._entities.clear()
            entity = self._entities[(uuid, vgpu_id)] = vgpu_entity(uuid, vgpu_id)
        return entity

    def add(self, host: str, entity: str, metric: str, t: float, value: float | None) -> None:
        """Append a point (or merge an older one in time order, e.g. from a backfill)."""
        series = self._hosts.setdefault(host, {})
        ring = series.get((entity, metric))
        if ring is None:
            ring = series[(entity, metric)] = Ring(self.maxlen)
        if t > ring.newest:
            ring.append((t, value))
            return
        points = list(ring)
        i = bisect.bisect_left(points, t, key=lambda p: p[0])
        if i < len(points) and points[i][0] == t:
            return  # already have this instant
        points.insert(i, (t, value))
        ring.clear()
        ring.extend(points[-self.maxlen :])

    def merge(self, host: str, entity: str, metric: str, points: Iterable[Point]) -> None:
        """Merge many (older) points at once, e.g. a backfill: one pass, where :meth:`add` of an
        older point copies the series each time (a series of n backfilled points would cost n**2).
        A point at an instant the series already has is dropped; the newest ``maxlen`` stay."""
        series = self._hosts.setdefault(host, {})
        ring = series.get((entity, metric))
        if ring is None:
            ring = series[(entity, metric)] = Ring(self.maxlen)
        held = list(ring)
        have = {t for t, _ in held}
        merged = held + [p for p in points if p[0] not in have]
        merged.sort(key=lambda p: p[0])
        ring.clear()
        ring.extend(merged[-self.maxlen :])

    def forget(self, host: str) -> None:
        self._hosts.pop(host, None)
        self._last.pop(host, None)

    # ------------------------------------------------------------------ reading

    def _ring(self, host: str, entity: str, metric: str) -> Ring | None:
        series = self._hosts.get(host)
        return None if series is None else series.get((entity, metric))

    def series(self, host: str, entity: str, metric: str) -> list[Point]:
        return list(self._ring(host, entity, metric) or ())

    def latest(self, host: str, entity: str, metric: str) -> float | None:
        ring = self._ring(host, entity, metric)
        return ring[-1][1] if ring else None


def _num(value: float | int | None) -> float | None:
    return None if value is None else float(value)
