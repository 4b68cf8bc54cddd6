"""Vanished or shut down (vgpumon.collect.vanished, docs/verdicts.md): a vGPU that went away with
its VM is an event; one gone while libvirt says its VM still runs is vanished."""

from __future__ import annotations

from vgpumon.collect.enrich.domains import Domain, Inventory
from vgpumon.collect.vanished import CONFIRM_SECONDS, DepartureTracker, with_vms
from vgpumon.model import Gpu, Snapshot, VgpuInstance

UUIDS = {1: "aaaaaaaa-0000-0000-0000-000000000001", 2: "aaaaaaaa-0000-0000-0000-000000000002"}


def vgpu(i: int, vm: int | None = None) -> VgpuInstance:
    owner = vm if vm is not None else i
    return VgpuInstance(
        vgpu_id=i, uuid=f"vgpu-{i}", vm_id=UUIDS.get(owner, f"vm-{owner}"), vm_id_type="uuid"
    )


def snap(t: float, *vgpus: VgpuInstance, up: bool = True) -> Snapshot:
    gpu = Gpu(index=0, uuid="GPU-0", up=up, virtualization_mode="host_vgpu", vgpu_instances=vgpus)
    return Snapshot(timestamp=t, gpus=(gpu,))


def inventory(**states: str) -> Inventory:
    """Domains vm1, vm2 (of UUIDS) in the given states; absent ones are undefined."""
    domains = [
        Domain(name=name, uuid=UUIDS[int(name[2:])], state=state) for name, state in states.items()
    ]
    return Inventory.build(domains)


def run(tracker: DepartureTracker, t: float, inv: Inventory, *vgpus: VgpuInstance) -> Gpu:
    return with_vms(snap(t, *vgpus), inv, tracker).gpus[0]


def test_a_vgpu_whose_vm_still_runs_is_vanished_once_confirmed() -> None:
    tracker = DepartureTracker()
    both = inventory(vm1="running", vm2="running")
    run(tracker, 0.0, both, vgpu(1), vgpu(2))
    gone = run(tracker, 5.0, both, vgpu(2))  # vGPU 1 gone, its VM runs
    assert gone.vgpu_departures is not None and gone.vgpu_departures.vanished == ()
    later = run(tracker, 5.0 + CONFIRM_SECONDS, both, vgpu(2))
    assert later.vgpu_departures is not None
    (lost,) = later.vgpu_departures.vanished
    assert (lost.vgpu_id, lost.vm_name, lost.since) == (1, "vm1", 5.0)
    assert later.vgpu_departures.counts["vanished"] == 1
    # The VM is shut down at last: no longer vanished, the count stays.
    stopped = run(tracker, 60.0, inventory(vm1="shutoff", vm2="running"), vgpu(2))
    assert stopped.vgpu_departures is not None and stopped.vgpu_departures.vanished == ()
    assert stopped.vgpu_departures.counts["vanished"] == 1


def test_a_vgpu_that_left_with_its_vm_is_an_event_not_vanished() -> None:
    tracker = DepartureTracker()
    run(tracker, 0.0, inventory(vm1="running", vm2="running"), vgpu(1), vgpu(2))
    # vm1 shut down (persistent domain, shutoff), vm2 destroyed (transient: no domain).
    run(tracker, 5.0, inventory(vm1="shutoff"))
    after = run(tracker, 5.0 + CONFIRM_SECONDS, inventory(vm1="shutoff"))
    d = after.vgpu_departures
    assert d is not None and d.vanished == ()
    assert (d.counts["vm_stopped"], d.counts["vanished"]) == (2, 0)


def test_a_vm_restarted_with_a_new_vgpu_is_not_vanished() -> None:
    tracker = DepartureTracker()
    inv = inventory(vm1="running")
    run(tracker, 0.0, inv, vgpu(1))
    run(tracker, 5.0, inv, vgpu(3, vm=1))  # the same VM now holds vGPU 3
    d = run(tracker, 5.0 + CONFIRM_SECONDS, inv, vgpu(3, vm=1)).vgpu_departures
    assert d is not None and d.vanished == () and d.counts["vm_holds_another"] == 1


def test_a_missed_reading_or_a_down_gpu_is_no_departure() -> None:
    tracker = DepartureTracker()
    inv = inventory(vm1="running")
    run(tracker, 0.0, inv, vgpu(1))
    run(tracker, 1.0, inv)  # not listed in one reading
    back = run(tracker, 2.0, inv, vgpu(1))
    assert back.vgpu_departures is not None
    assert sum(back.vgpu_departures.counts.values()) == 0
    down = with_vms(snap(3.0, up=False), inv, tracker)  # the GPU is lost: its vGPUs unlisted
    assert down.gpus[0].vgpu_departures is None
    again = run(tracker, 3.0 + 2 * CONFIRM_SECONDS, inv, vgpu(1))
    assert again.vgpu_departures is not None
    assert sum(again.vgpu_departures.counts.values()) == 0


def test_without_libvirts_view_nothing_is_judged_and_unknown_vms_never_vanish() -> None:
    tracker = DepartureTracker()
    run(tracker, 0.0, inventory(), vgpu(7))  # libvirt does not know vm-7
    got = with_vms(snap(100.0), None, tracker).gpus[0]  # libvirt not read yet
    assert got.vgpu_departures is not None and sum(got.vgpu_departures.counts.values()) == 0
    d = run(tracker, 200.0, inventory()).vgpu_departures
    assert d is not None and d.vanished == () and d.counts["vm_unknown"] == 1


def test_the_event_log_says_which_vgpu_vanished_once() -> None:
    from vgpumon.view.events import snapshot_events

    tracker = DepartureTracker()
    inv = inventory(vm1="running")
    before = with_vms(snap(0.0, vgpu(1)), inv, tracker)
    gone = with_vms(snap(5.0), inv, tracker)
    judged = with_vms(snap(5.0 + CONFIRM_SECONDS), inv, tracker)
    texts = [e.text for e in snapshot_events("h", gone, judged)]
    assert texts == ["GPU 0 vGPU 1 vanished while VM vm1 still runs"]
    assert [e.severity for e in snapshot_events("h", gone, judged)] == ["error"]
    assert snapshot_events("h", judged, with_vms(snap(40.0), inv, tracker)) == []
    assert [e.text for e in snapshot_events("h", before, gone)] == ["GPU 0 vGPU 1 destroyed"]
