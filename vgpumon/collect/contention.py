"""Contention on a vGPU scheduler: who was starved, and which neighbours ran above their due.

From the scheduler log's counters per vGPU (``run_seconds_total``: time it ran on the GPU;
``preemption_seconds_total``: time it was switched out while it had work), over a sliding window
(:data:`WINDOW_SECONDS`). Per scheduler (a time-sliced GPU, or one GPU instance of a MIG-backed
vGPU host), each vGPU's *due* in the window is its share of the engine:

* ``fixed_share``: ``1 / max_instances`` of its vGPU type (its share whether or not others run);
* ``equal_share``: ``1 / N``, N the vGPUs on the scheduler;
* ``best_effort`` (and unknown): ``1 / R``, R the vGPUs that ran or waited in the window.

A vGPU is *starved* when it waited (preemption above :data:`STARVED_MIN_WAIT_RATIO` of the
window) and ran under :data:`STARVED_UNDER_DUE_RATIO` of its due; its *neighbours above due* are
the other vGPUs of the same scheduler that ran more than their due, most excess first. Nothing
here is exported as a series yet: the TUI's scheduler screen and the dashboards read
:class:`vgpumon.model.Contention` from the snapshot.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

from vgpumon.model import Contention, ContentionNeighbour, Gpu, VgpuScheduler

WINDOW_SECONDS = 60.0
# The window is a minute: finding the starved vGPUs again every few seconds is fine enough, and
# spares a large host's cycles the work (the result stands in between).
UPDATE_SECONDS = 5.0
STARVED_MIN_WAIT_RATIO = 0.01
STARVED_UNDER_DUE_RATIO = 0.9
# A neighbour counts as above its due when it ran this much more (scheduler log granularity).
ABOVE_DUE_MARGIN_RATIO = 0.01


@dataclass(frozen=True)
class _Reading:
    timestamp: float
    usage: dict[int, tuple[float, float]]  # vgpu_id -> (run, preemption) seconds, cumulative


def _due_shares(
    gpu: Gpu, sch: VgpuScheduler, deltas: dict[int, tuple[float, float]]
) -> dict[int, float]:
    members = [
        v
        for v in gpu.vgpu_instances
        if v.vgpu_id in deltas and v.gpu_instance_id == sch.gpu_instance_id
    ] or [v for v in gpu.vgpu_instances if v.vgpu_id in deltas]
    ids = [v.vgpu_id for v in members] or list(deltas)
    if sch.policy == "fixed_share":
        max_of = {t.type_id: t.max_instances for t in gpu.vgpu_types}
        shares: dict[int, float] = {}
        for v in members:
            most = max_of.get(v.type_id) if v.type_id is not None else None
            shares[v.vgpu_id] = 1.0 / most if most else 1.0 / max(1, len(ids))
        return shares
    if sch.policy == "equal_share":
        return dict.fromkeys(ids, 1.0 / max(1, len(ids)))
    runnable = [i for i in ids if sum(deltas[i]) > 0]
    share = 1.0 / max(1, len(runnable))
    return {i: (share if i in runnable else 0.0) for i in ids}


def starved(
    gpu: Gpu, sch: VgpuScheduler, window: float, deltas: dict[int, tuple[float, float]]
) -> tuple[Contention, ...]:
    """The starved vGPUs of one scheduler over a window of ``deltas`` (run, preemption)."""
    if window <= 0 or not deltas:
        return ()
    shares = _due_shares(gpu, sch, deltas)
    due = {i: shares.get(i, 0.0) * window for i in deltas}
    above = sorted(
        (
            ContentionNeighbour(i, run, due[i])
            for i, (run, _) in deltas.items()
            if run > due[i] + ABOVE_DUE_MARGIN_RATIO * window
        ),
        key=lambda n: n.due_seconds - n.run_seconds,
    )
    out = []
    for i, (run, wait) in sorted(deltas.items()):
        if wait > STARVED_MIN_WAIT_RATIO * window and run < STARVED_UNDER_DUE_RATIO * due[i]:
            neighbours = tuple(n for n in above if n.vgpu_id != i)
            out.append(Contention(i, sch.gpu_instance_id, window, run, wait, due[i], neighbours))
    return tuple(out)


class ContentionTracker:
    """Keeps each scheduler's counter readings for the window and finds the starved vGPUs."""

    def __init__(
        self, window_seconds: float = WINDOW_SECONDS, update_seconds: float = UPDATE_SECONDS
    ) -> None:
        self.window = window_seconds
        self.every = update_seconds
        self._readings: dict[tuple[str, int | None], collections.deque[_Reading]] = {}
        self._last: dict[str, tuple[float, tuple[Contention, ...]]] = {}

    def update(self, now: float, gpu: Gpu) -> tuple[Contention, ...]:
        last = self._last.get(gpu.uuid)
        if last is not None and 0.0 <= now - last[0] < self.every:
            return last[1]
        found = self._update(now, gpu)
        self._last[gpu.uuid] = (now, found)
        return found

    def _update(self, now: float, gpu: Gpu) -> tuple[Contention, ...]:
        out: list[Contention] = []
        for sch in gpu.vgpu_schedulers:
            if not sch.usage:
                continue
            key = (gpu.uuid, sch.gpu_instance_id)
            readings = self._readings.setdefault(key, collections.deque())
            readings.append(
                _Reading(
                    now,
                    {
                        u.vgpu_id: (u.run_seconds_total, u.preemption_seconds_total)
                        for u in sch.usage
                    },
                )
            )
            # Keep the newest reading at least a window old as the window's start.
            while len(readings) > 2 and now - readings[1].timestamp >= self.window:
                readings.popleft()
            first, last = readings[0], readings[-1]
            deltas = {
                i: (run - first.usage[i][0], wait - first.usage[i][1])
                for i, (run, wait) in last.usage.items()
                if i in first.usage
                and run >= first.usage[i][0]
                and wait >= first.usage[i][1]  # a counter that went back: a new vGPU
            }
            out.extend(starved(gpu, sch, last.timestamp - first.timestamp, deltas))
        return tuple(out)

    def forget(self, keep: Iterable[str]) -> None:
        """Drop the readings of GPUs no longer in the snapshot."""
        kept = set(keep)
        for key in [k for k in self._readings if k[0] not in kept]:
            del self._readings[key]
        for uuid in [u for u in self._last if u not in kept]:
            del self._last[uuid]
