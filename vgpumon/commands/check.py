"""Check this node's GPUs for node-problem-detector (its custom-plugin protocol).

Prints one line and exits 0 when the check finds nothing wrong, 1 when it finds a problem, 2 when
it cannot tell: NVML down, the exporter unreachable, bad flags, and whenever the snapshot cannot
support a verdict (the sampler wedged, a GPU NVML counts but cannot read, a GPU not read, the
collector the check reads failed or did not run). A problem seen wins over "cannot tell".
``license``: a vGPU (host side) or a licensed feature (guest side) that is unlicensed; ``gpus``:
a GPU lost, hung, or whose row remapping failed; ``xid``: an Xid that needs a reset or a drain
(the critical set of docs/runbooks.md); ``recovery``: the driver asks for a reset, a reboot or a
drain (R565+); ``repair``: a channel or TPC repair waits for the GPU's next reset (R580+);
``memory``: memory the row remapper can no longer repair (R590+); these three are unknown (exit
2) where no GPU's driver says; ``scheduler``: a vGPU the collector's share verdict calls starved
(the one rule of docs/verdicts.md, read from the snapshot, never decided here); ``all``: every
check, the worst result first. Locally the Xids seen are those of the --window; with --url, those
the exporter counted since it started. A share verdict needs a minute of scheduler counters,
which only a running exporter has: locally ``scheduler`` says why there is none (exit 2), and
``all`` reports that without letting it hide the other checks' results.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable

from vgpumon.commands import node_source
from vgpumon.commands.node_features import add_expiring_argument, warn_retired
from vgpumon.errors import VgpumonError, one_line
from vgpumon.model import Gpu, Snapshot
from vgpumon.nodefeatures import LICENSE_EXPIRING, UNLICENSED_STATES, license_state
from vgpumon.text import printable

OK, PROBLEM, UNKNOWN = 0, 1, 2  # node-problem-detector's plugin exit codes
HOST_MODES = ("host_vgpu", "host_vsga")  # GPUs whose vGPUs carry licenses (the others: guest)
CHECKS = ("license", "gpus", "xid", "scheduler", "recovery", "repair", "memory", "all")
Result = tuple[int, str]


def _gpu_name(index: int, uuid: str) -> str:
    return f"GPU {index} ({uuid})"


def _first(bad: list[str]) -> str:
    more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
    return f"{bad[0]}{more}"


def _node_unread(snapshot: Snapshot) -> str | None:
    """Why the snapshot says nothing sure of the node as a whole, or None."""
    h = snapshot.health
    if not h.up:
        return f"NVML not available: {h.down_reason or 'not initialised'}"
    if h.wedged:
        return "the sampler is wedged: its newest data is stale"
    counted = h.gpus_counted
    if counted is not None and counted > len(snapshot.gpus):
        return f"NVML counts {counted} GPUs, {len(snapshot.gpus)} could be read"
    return None


def _collectors_unread(
    snapshot: Snapshot, names: tuple[str, ...], if_run: tuple[str, ...] = ()
) -> str | None:
    """Why the readings of collectors ``names`` (which must have run) and ``if_run`` (which
    may be switched off) cannot be trusted this cycle, or None."""
    status = {c.name: c.success for c in snapshot.collectors}
    failed = [n for n in (*names, *if_run) if status.get(n) is False]
    if failed:
        return f"the {', '.join(failed)} collector failed in the last cycle"
    missing = [n for n in names if n not in status]
    if missing:
        return f"the {', '.join(missing)} collector did not run"
    return None


def _unknown(*reasons: str | None) -> Result | None:
    said = [r for r in reasons if r]
    return (UNKNOWN, f"cannot tell: {said[0]}") if said else None


def check_license(snapshot: Snapshot) -> Result:
    bad = []
    for g in snapshot.gpus:
        for v in g.vgpu_instances:
            lic = v.license
            if lic.state in UNLICENSED_STATES or (lic.licensed is False and lic.state is None):
                vm = v.vm.name if v.vm is not None else v.vm_id
                state = lic.state or "unlicensed"
                bad.append(f"vGPU {v.vgpu_id} on GPU {g.index} (VM {vm}) {state}")
        for f in g.guest_licenses:
            if f.enabled is not False and (f.licensed is False or f.state == "unlicensed"):
                bad.append(f"{f.feature} license on GPU {g.index} unlicensed")
    if bad:
        return PROBLEM, f"vGPU license problem: {_first(bad)}"
    # Nothing unlicensed seen: that says "ok" only if every license could be seen.
    hosts = any(g.virtualization_mode in HOST_MODES for g in snapshot.gpus)
    guests = any(g.virtualization_mode not in HOST_MODES for g in snapshot.gpus)
    needed = (("vgpu", "license") if hosts else ()) + (("guest",) if guests else ())
    unread = [_gpu_name(g.index, g.uuid) for g in snapshot.gpus if not g.up]
    unread += list(snapshot.health.hung_gpus)
    unknown = _unknown(
        _node_unread(snapshot),
        f"{_first(unread)} not read: its licenses are unknown" if unread else None,
        _collectors_unread(snapshot, needed),
    )
    if unknown is not None:
        return unknown
    overall = license_state(snapshot)
    if overall is None:
        return OK, "no vGPU licenses on this node"
    if overall == LICENSE_EXPIRING:
        return OK, "vGPU licenses ok; a lease was not renewed when due (docs/licensing.md)"
    return OK, "vGPU licenses ok"


def check_gpus(snapshot: Snapshot) -> Result:
    if not snapshot.health.up:
        return UNKNOWN, f"NVML not available: {snapshot.health.down_reason or 'not initialised'}"
    bad = []
    hung = set(snapshot.health.hung_gpus)
    for g in snapshot.gpus:
        if not g.up:
            bad.append(f"{_gpu_name(g.index, g.uuid)} down: {g.down_reason or 'not answering'}")
        elif g.uuid in hung:
            bad.append(f"{_gpu_name(g.index, g.uuid)} does not answer")
        elif g.remapped_rows.failed:
            bad.append(f"{_gpu_name(g.index, g.uuid)} row remapping failed")
    if bad:
        return PROBLEM, _first(bad)
    unknown = _unknown(
        _node_unread(snapshot), _collectors_unread(snapshot, ("device",), if_run=("remapped_rows",))
    )
    if unknown is not None:
        return unknown
    if not snapshot.gpus:
        return OK, "no GPUs on this node"
    return OK, f"{len(snapshot.gpus)} GPU(s) ok"


def check_xid(snapshot: Snapshot) -> Result:
    from vgpumon.metrics.table import XID_CATALOG, XID_CRITICAL

    bad = []
    seen = 0
    for g in snapshot.gpus:
        for xid, count in sorted(g.xid_errors.items()):
            if count <= 0:
                continue
            seen += count
            if xid in XID_CRITICAL or xid not in XID_CATALOG:
                bad.append(f"Xid {xid} on {_gpu_name(g.index, g.uuid)} ({count}x)")
    if bad:
        return PROBLEM, _first(bad)
    if not any(c.name == "xid" for c in snapshot.collectors):
        return UNKNOWN, "Xids are not watched (the xid collector did not run)"
    unknown = _unknown(_node_unread(snapshot), _collectors_unread(snapshot, ("xid",)))
    if unknown is not None:
        return unknown
    if seen:
        return OK, f"no critical Xid ({seen} informational)"
    return OK, "no Xid"


def _health(
    snapshot: Snapshot,
    what: str,
    verdict: Callable[[Gpu], bool | None],
    problem: Callable[[Gpu], str],
    ok: str,
) -> Result:
    """One driver-health verdict over the node's GPUs (decided in the model, read here)."""
    if not snapshot.health.up:
        return UNKNOWN, f"NVML not available: {snapshot.health.down_reason or 'not initialised'}"
    bad, known = [], 0
    for g in snapshot.gpus:
        if not g.up:
            continue
        said = verdict(g)
        if said is None:
            continue
        known += 1
        if said:
            bad.append(f"{_gpu_name(g.index, g.uuid)} {problem(g)}")
    if bad:
        more = f" and {len(bad) - 1} more" if len(bad) > 1 else ""
        return PROBLEM, f"{bad[0]}{more}"
    # Nothing wrong seen: that says "ok" only if every GPU could be read this cycle.
    unknown = _unknown(_health_unread(snapshot, what))
    if unknown is not None:
        return unknown
    if not snapshot.gpus:
        return OK, "no GPUs on this node"
    if not known:
        return UNKNOWN, f"the driver does not report {what} (an older driver)"
    return OK, ok


def _health_unread(snapshot: Snapshot, what: str) -> str | None:
    """Why the snapshot cannot support a driver-health verdict (beyond an older driver that
    does not say), or None."""
    unread = [_gpu_name(g.index, g.uuid) for g in snapshot.gpus if not g.up]
    unread += list(snapshot.health.hung_gpus)
    return (
        _node_unread(snapshot)
        or (f"{_first(unread)} not read: its {what} are unknown" if unread else None)
        or _collectors_unread(snapshot, (), if_run=("recovery",))
    )


# The driver-health checks: (what the driver may not report, the verdict the model decides,
# what is wrong, the all-clear).
HEALTH_CHECKS: dict[str, tuple[str, Callable[[Gpu], bool | None], Callable[[Gpu], str], str]] = {
    "recovery": (
        "recovery actions",
        lambda g: g.recovery.action_needed,
        lambda g: f"needs {(g.recovery.action or '').replace('_', ' ')} (the driver asks)",
        "no GPU asks for a reset, reboot or drain",
    ),
    "repair": (
        "repair status",
        lambda g: g.recovery.repair_pending,
        lambda g: f"has a {' and '.join(g.recovery.pending_repairs)} repair pending (next reset)",
        "no repair pending",
    ),
    "memory": (
        "unrepairable memory",
        lambda g: g.recovery.unrepairable_memory,
        lambda g: "has memory beyond repair (needs service)",
        "no unrepairable memory",
    ),
}


def check_scheduler(snapshot: Snapshot) -> Result:
    from vgpumon.view.format import pct, share_state

    starved = []
    undecided: dict[str, int] = {}
    decided = 0
    for g in snapshot.gpus:
        vms = {v.vgpu_id: (v.vm.name if v.vm is not None else v.vm_id) for v in g.vgpu_instances}
        for sch in g.vgpu_schedulers:
            for v in sch.shares:
                if v.state == "starved":
                    starved.append(
                        f"vGPU {v.vgpu_id} on GPU {g.index} (VM {vms.get(v.vgpu_id)}) starved: "
                        f"received {pct(v.received)} of a {pct(v.due)} due"
                    )
                elif v.state == "ok":
                    decided += 1
                else:
                    undecided[v.state] = undecided.get(v.state, 0) + 1
    if starved:
        return PROBLEM, _first(starved)
    hosts = any(g.virtualization_mode in HOST_MODES for g in snapshot.gpus)
    unknown = _unknown(
        _node_unread(snapshot),
        _collectors_unread(snapshot, ("scheduler",)) if hosts else None,
    )
    if unknown is not None:
        return unknown
    if undecided and not decided:
        why = max(sorted(undecided), key=lambda k: undecided[k])
        return UNKNOWN, f"scheduler: {share_state(why)}"
    if not decided:
        return OK, "no vGPU scheduler on this node"
    return OK, f"no vGPU starved ({decided} with a verdict)"


def run_checks(snapshot: Snapshot, which: str) -> Result:
    table: dict[str, Callable[[], Result]] = {
        "license": lambda: check_license(snapshot),
        "gpus": lambda: check_gpus(snapshot),
        "xid": lambda: check_xid(snapshot),
        **{name: functools.partial(_health, snapshot, *how) for name, how in HEALTH_CHECKS.items()},
        "scheduler": lambda: check_scheduler(snapshot),
    }
    if which != "all":
        return table[which]()
    results = [table[name]() for name in ("gpus", "xid", "license")]
    for name, (what, *_rest) in HEALTH_CHECKS.items():
        code, message = table[name]()
        # An older driver that says nothing of these is said, but does not make the whole
        # node unknown (the other checks still decide); a snapshot that cannot be read does.
        older_driver = snapshot.health.up and _health_unread(snapshot, what) is None
        results.append((OK if code == UNKNOWN and older_driver else code, message))
    code, message = table["scheduler"]()
    # No share verdict yet (a one-shot local check never has a minute of counters) is said, but
    # does not make the whole node unknown.
    results.append((OK if code == UNKNOWN else code, message))
    # The worst first: a problem over an unknown over OK (NPD shows the first line).
    rank = {PROBLEM: 0, UNKNOWN: 1, OK: 2}
    results.sort(key=lambda r: rank[r[0]])
    code = results[0][0]
    if code == OK:
        return OK, "; ".join(r[1] for r in results)
    return code, "; ".join(r[1] for r in results if r[0] == code)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "check",
        nargs="?",
        default="all",
        choices=CHECKS,
        help="what to check (default all)",
    )
    add_expiring_argument(parser)
    node_source.add_arguments(parser, "check", window_default="1s")


def run(args: argparse.Namespace) -> int:
    try:
        warn_retired(args)
        snapshot = node_source.node_snapshot(args)
        code, message = run_checks(snapshot, args.check)
    except VgpumonError as err:
        # Unknown, not a problem: node-problem-detector must not mark the node for our failure.
        code, message = UNKNOWN, f"cannot check: {one_line(err)}"
    # Names in the message (VMs, GPUs) come from others: escaped, never sent to the terminal.
    sys.stdout.write(printable(one_line(message, limit=1000)) + "\n")
    return code
