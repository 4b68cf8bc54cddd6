"""A license lease not renewed when due (vgpumon.collect.leases, docs/licensing.md): the one license
verdict that the alert, the badge, the node label and check read. A healthy lease, renewed on
time, always ends soon and is never "expiring"; one whose renewals stopped is."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from vgpu_helpers import by_id

from vgpumon.collect.leases import LeaseTracker
from vgpumon.commands.check import check_license
from vgpumon.metrics.exposition import render
from vgpumon.model import Snapshot
from vgpumon.nodefeatures import license_state
from vgpumon.view import rows as vr


def test_a_renewed_lease_is_never_overdue_one_not_renewed_is_after_half() -> None:
    leases = LeaseTracker()
    # A 100 s lease renewed every 15 s: the end moves forward, never overdue.
    for t in range(0, 300, 5):
        end = 100.0 + 15 * (t // 15)
        assert leases.overdue("renewed", float(t), True, end) is False
    # Not renewed: overdue once more than half of it has passed, and past its end.
    assert leases.overdue("stuck", 0.0, True, 100.0) is False
    assert leases.overdue("stuck", 50.0, True, 100.0) is False
    assert leases.overdue("stuck", 51.0, True, 100.0) is True
    assert leases.overdue("stuck", 120.0, True, 100.0) is True
    assert leases.overdue("stuck", 121.0, True, 200.0) is False  # renewed at last
    # No lease: not licensed, or no expiry (permanent, not applicable).
    assert leases.overdue("off", 0.0, False, 100.0) is None
    assert leases.overdue("permanent", 0.0, True, None) is None


def _at(sim_host: Any, t_end: int) -> Snapshot:
    async def run() -> Snapshot:
        host = sim_host("vgpu-license-expiry")
        snap = await host.cycle()
        for _ in range(t_end):
            host.advance(1.0, poll_every=None)
            snap = await host.cycle()
        return snap

    return asyncio.run(run())


def test_a_healthy_renewing_lease_is_no_alarm_anywhere(sim_host: Any) -> None:
    """vGPU 37's lease is renewed every 9 s and always ends within a minute: ok on every surface
    (before, its expiry within 7 days made it 'expiring' for ever). vGPU 38's renewals stopped
    at 20 s: overdue from about 49 s, on every surface."""
    snap = _at(sim_host, 40)
    gpu = snap.gpus[0]
    v37, v38 = by_id(gpu)[37].license, by_id(gpu)[38].license
    assert v37.expiry_timestamp_seconds is not None
    assert v37.expiry_timestamp_seconds - snap.timestamp < 7 * 86400  # ends within the week
    assert (v37.renewal_overdue, v38.renewal_overdue) == (False, False)
    rows = {r.vgpu_id: r for r in vr.vgpu_rows("h", snap, gpu)}
    assert not rows[37].expiring and not rows[38].expiring
    assert b"vgpumon_vgpu_license_renewal_overdue" in render(snap)

    later = _at(sim_host, 55)
    gpu = later.gpus[0]
    assert by_id(gpu)[38].license.renewal_overdue is True
    assert by_id(gpu)[37].license.renewal_overdue is False
    rows = {r.vgpu_id: r for r in vr.vgpu_rows("h", later, gpu)}
    assert rows[38].expiring and not rows[37].expiring
    assert "expiring" in [b.kind for b in vr.gpu_row("h", later, gpu).badges]
    text = render(later).decode()
    overdue = [line for line in text.splitlines() if "renewal_overdue{" in line]
    assert [line.endswith(" 1.0") for line in overdue if 'vgpu_id="38"' in line] == [True]


def test_node_label_and_check_follow_the_lease_verdict(sim_host: Any) -> None:
    # At 5 s: vGPU 31 is licensed with a lease ending at 20 s, not overdue yet; vGPUs 37 and 38
    # renew. The node is "unlicensed" because of vGPUs 34-36's states: take only the leases.
    snap = _at(sim_host, 5)
    leased = [37, 38]

    def only(s: Snapshot, ids: list[int]) -> Snapshot:
        g = s.gpus[0]
        g = dataclasses.replace(
            g, vgpu_instances=tuple(v for v in g.vgpu_instances if v.vgpu_id in ids)
        )
        return dataclasses.replace(s, gpus=(g,))

    assert license_state(only(snap, leased)) == "ok"
    assert check_license(only(snap, leased)) == (0, "vGPU licenses ok")
    later = _at(sim_host, 55)
    assert license_state(only(later, leased)) == "expiring"
    code, line = check_license(only(later, leased))
    assert code == 0 and "not renewed" in line
