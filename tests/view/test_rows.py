"""Row models built from the built-in scenarios: modes, badges, share verdicts, urgency, sorting."""

from __future__ import annotations

import dataclasses

from view_helpers import snapshot_of

from vgpumon.model import Gpu, Snapshot, VgpuInstance, VgpuScheduler, VgpuShare
from vgpumon.view import columns as vr_columns
from vgpumon.view import rows as vr
from vgpumon.view.columns import GPU_COLUMNS, sort_rows


def test_gpu_rows_keep_absent_values_absent() -> None:
    snap = snapshot_of("a100-mig-mixed")
    rows = vr.gpu_rows("h", snap)
    mig = next(r for r in rows if r.mode == "mig")
    assert mig.utilization is None  # NVML gives no whole-GPU utilization in MIG mode
    assert mig.migs == 4 and mig.instances == 4
    bare = next(r for r in rows if r.mode == "baremetal")
    assert bare.utilization == snap.gpus[bare.index].utilization.gpu is not None


def test_vgpu_rows_carry_vm_type_license() -> None:
    snap = snapshot_of("kvm-vgpu-timesliced")
    gpu = snap.gpus[0]
    rows = vr.vgpu_rows("h", snap, gpu)
    assert [r.vgpu_id for r in rows] == [v.vgpu_id for v in gpu.vgpu_instances]
    for r, v in zip(rows, gpu.vgpu_instances, strict=True):
        assert (r.vm, r.type_name, r.license_state) == (v.vm_id, v.type_name, v.license.state)
    assert [r.unlicensed for r in rows] == [False, True, True, False]  # grace, restricted
    assert "unlicensed" in [b.kind for b in vr.gpu_row("h", snap, gpu).badges]


def test_lost_and_hung_badges() -> None:
    lost = snapshot_of("fault-gpu-lost", at=12.0)
    badges = {r.index: [b.kind for b in r.badges] for r in vr.gpu_rows("h", lost)}
    assert badges == {0: [], 1: [], 2: ["lost"], 3: []}
    hung_snap = Snapshot(
        timestamp=0.0,
        gpus=(Gpu(index=0, uuid="GPU-a"), Gpu(index=1, uuid="GPU-b")),
    )
    from dataclasses import replace

    from vgpumon.model import SamplerHealth

    hung_snap = replace(hung_snap, health=SamplerHealth(up=True, hung_gpus=("GPU-b",)))
    kinds = [[b.kind for b in r.badges] for r in vr.gpu_rows("h", hung_snap)]
    assert kinds == [[], ["hung"]]


def test_expiring_is_a_lease_not_renewed_and_license_urgency() -> None:
    snap = snapshot_of("vgpu-license-expiry", at=12.0)
    rows = {r.subject: r for r in vr.all_license_rows("h", snap)}
    assert 0 < rows["31"].expires_in < 10  # its lease ends at 20 s
    vgpus = {r.vgpu_id: r for r in vr.vgpu_rows("h", snap, snap.gpus[0])}
    # Expiring is the collector's lease verdict (docs/licensing.md), read from the snapshot: a
    # lease ending soon is not, one not renewed when due is.
    assert not vgpus[32].expiring and not vgpus[33].expiring and not vgpus[37].expiring
    v31 = dataclasses.replace(
        snap.gpus[0].vgpu_instances[0],
        license=dataclasses.replace(snap.gpus[0].vgpu_instances[0].license, renewal_overdue=True),
    )
    g = dataclasses.replace(snap.gpus[0], vgpu_instances=(v31,))
    assert vr.vgpu_rows("h", snap, g)[0].expiring
    order = [r.subject for r in vr.all_license_rows("h", snapshot_of("vgpu-license-expiry", 41.0))]
    assert order[0] == "31"  # unlicensed after the lease ran out: most urgent


def test_rows_read_the_share_verdict_and_decide_none() -> None:
    """A vGPU row's share, due and starved mark are the snapshot's verdict (docs/verdicts.md):
    a vGPU asking for 1 % and getting it, under half its due, stays unmarked unless the collector
    says otherwise; no verdict is never starved."""
    v1, v2 = VgpuInstance(vgpu_id=1, type_id=7), VgpuInstance(vgpu_id=2, type_id=7)
    shares = (
        VgpuShare(1, "ok", due=0.5, received=0.01, waited=0.0, window_seconds=60.0),
        VgpuShare(2, "missed_entries", due=0.5, received=0.05, waited=0.5, window_seconds=60.0),
    )
    gpu = Gpu(
        index=0, uuid="GPU-x", vgpu_instances=(v1, v2),
        vgpu_schedulers=(VgpuScheduler(policy="equal_share", shares=shares),),
    )  # fmt: skip
    snap = Snapshot(timestamp=1.0, gpus=(gpu,))
    rows = {r.vgpu_id: r for r in vr.vgpu_rows("h", snap, gpu)}
    assert (rows[1].received, rows[1].due, rows[1].share_state) == (0.01, 0.5, "ok")
    assert not rows[1].starved and not rows[2].starved
    assert rows[2].share_state == "missed_entries"
    (sched,) = vr.scheduler_rows("h", snap, gpu)
    assert (sched.starved, sched.undecided) == (0, "missed_entries")
    starved = dataclasses.replace(shares[0], state="starved")
    gpu = dataclasses.replace(
        gpu, vgpu_schedulers=(VgpuScheduler(policy="equal_share", shares=(starved, shares[1])),)
    )
    assert vr.vgpu_rows("h", snap, gpu)[0].starved
    assert "starved" in [b.kind for b in vr.gpu_row("h", snap, gpu).badges]
    assert vr.scheduler_rows("h", snap, gpu)[0].starved == 1


def test_sort_puts_absent_last_both_ways() -> None:
    snap = snapshot_of("a100-mig-mixed")
    rows = vr.gpu_rows("h", snap)
    util = next(c for c in GPU_COLUMNS if c.key == "util")
    assert sort_rows(rows, util)[-1].utilization is None
    assert sort_rows(rows, util, reverse=True)[-1].utilization is None


def test_fleet_host_row_sums_and_counts() -> None:
    snap = snapshot_of("kvm-vgpu-timesliced")
    row = vr.host_row("kvm-01", "up", snap)
    assert row.gpus == 3 and row.modes == (("vgpu-host", 3),) and row.vgpus == 11
    # vGPUs 2 (grace period), 3 (restricted) and 22 (unlicensed); vGPU 12's license ends within
    # days, but its lease is not overdue (docs/licensing.md): no problem
    assert row.license_problems == 3 and row.lost == 0
    assert row.memory_total == sum(g.memory.total_bytes for g in snap.gpus)
    down = vr.host_row("kvm-02", "unreachable", None, error="connection refused")
    assert down.gpus == 0 and down.utilization is None and down.error == "connection refused"


def test_rows_that_read_the_same_hold_their_order_by_key() -> None:
    """Two vGPUs both shown at 40%/25% swapped places every refresh when sorted by share: their
    raw shares (0.401, 0.399) trade places below the shown precision. Rows that read the same tie
    and keep the order they came in (the screen's own) in both directions."""
    snap = snapshot_of("kvm-vgpu-timesliced")
    gpu = snap.gpus[0]
    base = vr.vgpu_rows("h", snap, gpu)[0]
    share = next(c for c in vr_columns.VGPU_COLUMNS if c.key == "share")

    def rows(a: float, b: float) -> list[vr.VgpuRow]:
        twelve = dataclasses.replace(base, key="h/GPU/vgpu/12", vgpu_id=12, received=a, due=0.25)
        three = dataclasses.replace(base, key="h/GPU/vgpu/3", vgpu_id=3, received=b, due=0.25)
        low = dataclasses.replace(base, key="h/GPU/vgpu/1", vgpu_id=1, received=0.1, due=0.25)
        return [twelve, low, three]

    for reverse in (False, True):
        orders = {
            tuple(r.vgpu_id for r in sort_rows(rows(a, b), share, reverse))
            for a, b in ((0.401, 0.399), (0.399, 0.401))
        }
        assert orders == {(1, 12, 3) if not reverse else (12, 3, 1)}, (reverse, orders)


def test_the_host_s_recovery_badge_says_what_its_gpus_ask_for() -> None:
    """One action: its label, whichever GPU asks; different actions: recover! (the GPUs' rows
    say which), as the fleet rules' figures give it for a host not read in full."""
    from vgpumon.model import HostRollup, Recovery

    def asking(*actions: str) -> Snapshot:
        gpus = tuple(
            Gpu(index=i, uuid=f"GPU-{i}", recovery=Recovery(action=a))
            for i, a in enumerate(actions)
        )
        return Snapshot(timestamp=1.0, gpus=gpus)

    def label(row: vr.HostRow) -> list[str]:
        return [b.label for b in row.badges if b.kind == "recovery"]

    assert label(vr.host_row("h", "up", asking("none", "gpu_reset", "none"))) == ["reset!"]
    assert label(vr.host_row("h", "up", asking("node_reboot", "gpu_reset"))) == ["recover!"]
    assert label(vr.host_row("h", "up", asking("gpu_reset", "node_reboot"))) == ["recover!"]
    assert label(vr.host_row("h", "up", asking("none"))) == []
    rollup = HostRollup(gpus=2, recovery_actions=("gpu_reset", "node_reboot"))
    assert label(vr.host_row_from_rollup("h", "up", rollup)) == ["recover!"]
    rollup = HostRollup(gpus=2, recovery_actions=("gpu_reset",))
    assert label(vr.host_row_from_rollup("h", "up", rollup)) == ["reset!"]


def test_the_host_row_holds_the_memory_its_gpu_rows_show() -> None:
    # The fleet rule sums the exporter's memory in use (vgpumon_gpu_memory_in_use_bytes), which
    # on a MIG-backed vGPU host holds the vGPUs' framebuffer NVML's memory info leaves out: the
    # host row must hold the same sum, or a host read through Prometheus and read from its
    # exporter differ on the fleet screen.
    for scenario in ("driver-surfaces", "a100-mig-mixed", "kvm-vgpu-timesliced"):
        snap = snapshot_of(scenario)
        gpus = vr.gpu_rows("h", snap)
        shown = [g.memory_used for g in gpus if g.memory_used is not None]
        assert vr.host_row("h", "up", snap).memory_used == sum(shown), scenario
        in_use = [g.memory_in_use_bytes for g in snap.gpus if g.memory_in_use_bytes is not None]
        assert shown == in_use, scenario  # the rows read the decided figure, decide nothing
    snap = snapshot_of("driver-surfaces")
    nvml = sum(g.memory.used_bytes for g in snap.gpus if g.memory.used_bytes is not None)
    assert vr.host_row("h", "up", snap).memory_used != nvml  # the case that differs is tested


def test_a_gpu_row_shows_the_decided_memory_and_nvml_s_from_an_older_exporter() -> None:
    """The rows read the memory in use the collector decided; a snapshot from an exporter older
    than that field (a remote ``top --url``) carries NVML's figure only, which is then shown."""
    from vgpumon.model import Memory, MigGpuInstance

    gib = 1 << 30
    gi = MigGpuInstance(id=1, memory_used_bytes=0, memory_total_bytes=10 * gib)
    older = Gpu(index=0, uuid="GPU-a", memory=Memory(total_bytes=80 * gib, used_bytes=gib))
    older = dataclasses.replace(older, mig_instances=(gi,))
    decided = dataclasses.replace(
        older,
        memory_in_use_bytes=7 * gib,
        mig_instances=(dataclasses.replace(gi, memory_in_use_bytes=6 * gib),),
    )
    for gpu, memory, gi_memory in ((older, gib, 0), (decided, 7 * gib, 6 * gib)):
        snap = Snapshot(timestamp=1.0, gpus=(gpu,))
        assert [r.memory_used for r in vr.gpu_rows("h", snap)] == [memory]
        assert [r.memory_used for r in vr.mig_rows("h", gpu)] == [gi_memory]
