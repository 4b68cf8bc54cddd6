"""Due share and starvation: the one rule, decided here once (docs/verdicts.md, "Starvation").

From the scheduler log's counters per vGPU (``run_seconds_total``: time it ran on the engine;
``preemption_seconds_total``: time it was held off with work left), over a sliding window of
:data:`WINDOW_SECONDS`. Per scheduler (a time-sliced GPU, or one GPU instance of a MIG-backed
vGPU host), each vGPU's *due* share of the engine's time is:

* ``fixed_share``: ``1 / max_instances`` of its vGPU type, whether or not others run;
* ``equal_share``: ``1 / N``, N the vGPUs the scheduler serves;
* ``best_effort``: ``1 / R``, R the vGPUs that ran or waited in the window (round robin among
  those that want the engine); no policy known: no verdict (``unknown_policy``).

A vGPU is **starved** when, over a window of at least :data:`MIN_WINDOW_SECONDS`,

1. it ran less than :data:`STARVED_BELOW_DUE` of its due,
2. it waited (was preempted with work left) at least :data:`MIN_WAITED` of the window: it wanted
   more than it got, and
3. it asked for at least :data:`MIN_ASKED` of the window (ran plus waited): a vGPU that asked for
   little is never starved, whatever its due.

Otherwise it is ``ok``. There is no verdict (and the state says why) while the counters cover less
than the minimum window (``short_window``: vgpumon just started, or the vGPU is new) and when the
scheduler log lost entries in the window (``missed_entries``: the ring wrapped between two reads,
so the counters may understate what ran; docs/nvml-notes.md). Shares are published with every
verdict; the exporter, ``top``, ``check`` and the node features read them from the snapshot.

The verdicts are found again every :data:`UPDATE_SECONDS` (a reading of the counters is kept then),
which keeps a large host's cycles cheap; in between, the last verdicts stand.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from vgpumon.model import VgpuInstance, VgpuScheduler, VgpuShare, VgpuType

WINDOW_SECONDS = 60.0
MIN_WINDOW_SECONDS = 30.0
UPDATE_SECONDS = 5.0
STARVED_BELOW_DUE = 0.9
MIN_WAITED = 0.01
MIN_ASKED = 0.02

STARVED, OK, SHORT_WINDOW, MISSED_ENTRIES, UNKNOWN_POLICY = (
    "starved",
    "ok",
    "short_window",
    "missed_entries",
    "unknown_policy",
)


@dataclass(frozen=True)
class _Reading:
    timestamp: float
    missed: int  # the scheduler's missed-entries counter
    usage: dict[int, tuple[float, float]]  # vgpu_id -> (run, preemption) seconds, cumulative


def due_shares(
    policy: str | None,
    members: Sequence[VgpuInstance],
    types: Sequence[VgpuType],
    asked: Mapping[int, float],
) -> dict[int, float]:
    """Each member's due share under ``policy``; ``asked``: what each ran plus waited (seconds).

    Empty for an unknown policy. A fixed-share vGPU whose type gives no maximum is due an equal
    part, as the scheduler cannot promise it more.
    """
    ids = [v.vgpu_id for v in members]
    if policy == "fixed_share":
        most = {t.type_id: t.max_instances for t in types}
        out = {}
        for v in members:
            n = most.get(v.type_id) if v.type_id is not None else None
            out[v.vgpu_id] = 1.0 / n if n else 1.0 / max(1, len(ids))
        return out
    if policy == "equal_share":
        return dict.fromkeys(ids, 1.0 / max(1, len(ids)))
    if policy == "best_effort":
        wanting = [i for i in ids if asked.get(i, 0.0) > 0]
        share = 1.0 / max(1, len(wanting))
        return {i: (share if i in wanting else 0.0) for i in ids}
    return {}


def verdict(due: float, received: float, waited: float) -> str:
    """Starved or ok, for shares of a window long enough and free of missed entries."""
    asked = received + waited
    if received < STARVED_BELOW_DUE * due and waited >= MIN_WAITED and asked >= MIN_ASKED:
        return STARVED
    return OK


def _members(sch: VgpuScheduler, vgpus: Sequence[VgpuInstance]) -> list[VgpuInstance]:
    mine = [v for v in vgpus if v.gpu_instance_id == sch.gpu_instance_id]
    return mine or ([] if sch.gpu_instance_id is not None else list(vgpus))


class StarvationTracker:
    """One GPU's counter readings over the window, and the verdicts found from them.

    Lives in the scheduler reader's per-GPU state; :meth:`update` runs in that GPU's worker.
    """

    def __init__(
        self, window_seconds: float = WINDOW_SECONDS, update_seconds: float = UPDATE_SECONDS
    ) -> None:
        self.window = window_seconds
        self.every = update_seconds
        self._readings: dict[int | None, collections.deque[_Reading]] = {}
        self._last: dict[int | None, tuple[float, float | None, tuple[VgpuShare, ...]]] = {}

    def update(
        self,
        now: float,
        schedulers: Sequence[VgpuScheduler],
        vgpus: Sequence[VgpuInstance],
        types: Sequence[VgpuType],
    ) -> tuple[VgpuScheduler, ...]:
        """``schedulers`` with their window and share verdicts filled in."""
        out = []
        scopes = set()
        for sch in schedulers:
            scope = sch.gpu_instance_id
            scopes.add(scope)
            if not sch.usage:
                self._readings.pop(scope, None)
                self._last.pop(scope, None)
                out.append(sch)
                continue
            last = self._last.get(scope)
            if last is None or not 0.0 <= now - last[0] < self.every:
                window, shares = self._find(now, sch, _members(sch, vgpus), types)
                last = self._last[scope] = (now, window, shares)
            active = {u.vgpu_id for u in sch.usage}
            out.append(
                dataclasses.replace(
                    sch,
                    share_window_seconds=last[1],
                    shares=tuple(s for s in last[2] if s.vgpu_id in active),
                )
            )
        for scope in [s for s in self._readings if s not in scopes]:
            del self._readings[scope]
            self._last.pop(scope, None)
        return tuple(out)

    def _find(
        self,
        now: float,
        sch: VgpuScheduler,
        members: Sequence[VgpuInstance],
        types: Sequence[VgpuType],
    ) -> tuple[float | None, tuple[VgpuShare, ...]]:
        readings = self._readings.setdefault(sch.gpu_instance_id, collections.deque())
        usage = {u.vgpu_id: (u.run_seconds_total, u.preemption_seconds_total) for u in sch.usage}
        readings.append(_Reading(now, sch.log_entries_missed_total, usage))
        # Keep the newest reading at least a window old as the window's start.
        while len(readings) > 2 and now - readings[1].timestamp >= self.window:
            readings.popleft()
        first = readings[0]
        window = now - first.timestamp
        missed = sch.log_entries_missed_total > first.missed
        deltas: dict[int, tuple[float, float, float]] = {}  # vgpu -> run, waited, its window
        for vgpu in usage:
            # The vGPU's window starts at its oldest reading from which its counters never went
            # back (a counter that went back is a new vGPU under a reused id).
            start = readings[-1]
            for r in reversed(readings):
                got = r.usage.get(vgpu)
                if got is None or got[0] > start.usage[vgpu][0] or got[1] > start.usage[vgpu][1]:
                    break
                start = r
            run, wait = usage[vgpu]
            ran0, waited0 = start.usage[vgpu]
            deltas[vgpu] = (run - ran0, wait - waited0, now - start.timestamp)
        shares = due_shares(
            sch.policy,
            [v for v in members if v.vgpu_id in deltas] or members,
            types,
            {i: d[0] + d[1] for i, d in deltas.items()},
        )
        verdicts = []
        for vgpu, (run, wait, span) in sorted(deltas.items()):
            due = shares.get(vgpu)
            received = run / span if span > 0 else None
            waited = wait / span if span > 0 else None
            if span < MIN_WINDOW_SECONDS or received is None or waited is None:
                state = SHORT_WINDOW
            elif missed:
                state = MISSED_ENTRIES
            elif due is None:
                state = UNKNOWN_POLICY
            else:
                state = verdict(due, received, waited)
            verdicts.append(
                VgpuShare(
                    vgpu_id=vgpu,
                    state=state,
                    due=due,
                    received=received,
                    waited=waited,
                    window_seconds=span,
                )
            )
        return window, tuple(verdicts)
