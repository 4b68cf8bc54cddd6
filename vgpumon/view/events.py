"""The event log: what changed between two readings of a host, as one-line events.

No source sends events; they are derived by comparing a host's previous and current snapshot (and
its connection state), so every front end gets the same log from the same data: Xid errors, a GPU
lost and back, hung GPUs, license state changes, vGPUs created and destroyed (and, from the
collector's verdict, one gone while its VM still runs), the sampler wedged, a host unreachable
and back.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpumon.model import Gpu, Snapshot
from vgpumon.view.format import license_state


@dataclass(frozen=True)
class Event:
    timestamp: float
    host: str
    severity: str  # error | warning | info
    text: str


def _gpus(snap: Snapshot | None) -> dict[str, Gpu]:
    return {} if snap is None else {g.uuid: g for g in snap.gpus}


def connection_events(
    host: str, now: float, before: str | None, after: str, error: str | None
) -> list[Event]:
    """The host's reachability changed (states are ``HostState`` values)."""
    if before == after:
        return []
    if after == "unreachable":
        return [Event(now, host, "error", f"host unreachable: {error or 'no answer'}")]
    if after == "up" and before == "unreachable":
        return [Event(now, host, "info", "host reachable again")]
    return []


def snapshot_events(
    host: str, old: Snapshot | None, new: Snapshot, now: float | None = None
) -> list[Event]:
    """Events between two snapshots of one host; the first snapshot gives only standing alarms.

    GPU events carry the snapshot's time. The sampler's own state (wedged, recovered) carries
    ``now`` when given: a wedged sampler repeats its last good snapshot, time included, so that
    time is not when it wedged."""
    t = new.timestamp
    health_t = t if now is None else now
    out: list[Event] = []
    before, after = _gpus(old), _gpus(new)
    for uuid, g in after.items():
        prev = before.get(uuid)
        label = f"GPU {g.index}"
        if not g.up and (prev is None or prev.up):
            out.append(Event(t, host, "error", f"{label} lost ({g.down_reason or 'down'})"))
        if g.up and prev is not None and not prev.up:
            out.append(Event(t, host, "info", f"{label} back"))
        prev_xid = {} if prev is None else prev.xid_errors
        for xid, count in sorted(g.xid_errors.items()):
            if count > prev_xid.get(xid, 0):
                n = count - prev_xid.get(xid, 0)
                out.append(Event(t, host, "error", f"{label} Xid {xid} (+{n})"))
        old_vgpus = {} if prev is None else {v.vgpu_id: v for v in prev.vgpu_instances}
        new_vgpus = {v.vgpu_id: v for v in g.vgpu_instances}
        if prev is not None:
            for vid in sorted(new_vgpus.keys() - old_vgpus.keys()):
                vm = new_vgpus[vid].vm_id or "?"
                out.append(Event(t, host, "info", f"{label} vGPU {vid} created (VM {vm})"))
            for vid in sorted(old_vgpus.keys() - new_vgpus.keys()):
                out.append(Event(t, host, "info", f"{label} vGPU {vid} destroyed"))
        for vid, v in sorted(new_vgpus.items()):
            was = old_vgpus.get(vid)
            if was is not None and was.license.state != v.license.state:
                sev = "warning" if (v.license.state or "").startswith("unlicensed") else "info"
                out.append(
                    Event(
                        t,
                        host,
                        sev,
                        f"{label} vGPU {vid} license {license_state(was.license.state)} → "
                        f"{license_state(v.license.state)}",
                    )
                )
        # The collector's verdict (docs/verdicts.md): a vGPU gone while its VM still runs.
        was_vanished = (
            {v.vgpu_id for v in prev.vgpu_departures.vanished}
            if prev is not None and prev.vgpu_departures is not None
            else set()
        )
        for lost in g.vgpu_departures.vanished if g.vgpu_departures is not None else ():
            if lost.vgpu_id not in was_vanished:
                vm = lost.vm_name or lost.vm_uuid or "?"
                out.append(
                    Event(
                        t,
                        host,
                        "error",
                        # A host read from Prometheus knows how many vanished, not which.
                        f"{label} {f'vGPU {lost.vgpu_id}' if lost.vgpu_id >= 0 else 'a vGPU'} "
                        f"vanished while VM {vm} still runs",
                    )
                )
    for uuid in before.keys() - after.keys():
        out.append(Event(t, host, "warning", f"GPU {before[uuid].index} gone from the host"))
    hung_before = set() if old is None else set(old.health.hung_gpus)
    for uuid in sorted(set(new.health.hung_gpus) - hung_before):
        g2 = after.get(uuid)
        name = f"GPU {g2.index}" if g2 is not None else uuid
        out.append(Event(t, host, "error", f"{name} hung (NVML calls do not return)"))
    if new.health.wedged and (old is None or not old.health.wedged):
        out.append(Event(health_t, host, "error", "sampler wedged: showing the last good data"))
    if not new.health.wedged and old is not None and old.health.wedged:
        out.append(Event(health_t, host, "info", "sampler recovered"))
    return out
