"""VM and pod names from the enrichers reach every row a person reads and filters.

NVML knows a VM only by an id; libvirt names it and the kubelet says which pod holds a device.
The rows show the name where one is known (the id otherwise), and ``vm:``, ``pod:`` and ``ns:``
filter terms match them.
"""

from __future__ import annotations

import dataclasses

from view_helpers import snapshot_of

from vgpumon.model import DeviceAllocation, VirtualMachine
from vgpumon.view import rows as vr
from vgpumon.view.filter import parse as parse_query


def _named() -> tuple[object, object]:
    snap = snapshot_of("kvm-vgpu-timesliced")
    gpu = next(g for g in snap.gpus if len(g.vgpu_instances) >= 2)
    named, pod_held = gpu.vgpu_instances[0], gpu.vgpu_instances[1]
    named = dataclasses.replace(named, vm=VirtualMachine(name="vm-render-07", uuid=named.vm_id))
    gpu = dataclasses.replace(gpu, vgpu_instances=(named, *gpu.vgpu_instances[1:]))
    allocation = DeviceAllocation(
        resource="nvidia.com/GRID_L40S-4Q",
        device_id="mdev",
        namespace="render",
        pod="virt-launcher-cad-01-abcde",
        vm_name="cad-01",
        kind="vgpu",
        gpu_uuid=gpu.uuid,
        vgpu_id=pod_held.vgpu_id,
    )
    snap = dataclasses.replace(
        snap,
        gpus=tuple(gpu if g.uuid == gpu.uuid else g for g in snap.gpus),
        allocations=(allocation,),
    )
    return snap, gpu


def test_vgpu_rows_show_libvirt_and_kubevirt_names_and_keep_the_id() -> None:
    snap, gpu = _named()
    rows = vr.vgpu_rows("local", snap, gpu)  # type: ignore[arg-type]
    first, second = rows[0], rows[1]
    assert first.vm == "vm-render-07"
    assert first.vm_id == gpu.vgpu_instances[0].vm_id  # type: ignore[attr-defined]
    assert second.vm == "cad-01"
    licenses = vr.license_rows("local", snap, gpu)  # type: ignore[arg-type]
    assert [r.vm for r in licenses[:2]] == ["vm-render-07", "cad-01"]


def test_vm_pod_and_ns_filter_terms_match_names_and_ids() -> None:
    snap, gpu = _named()
    rows = vr.vgpu_rows("local", snap, gpu)  # type: ignore[arg-type]
    vm_id = gpu.vgpu_instances[0].vm_id  # type: ignore[attr-defined]

    def hits(text: str) -> list[int]:
        query = parse_query(text)
        return [r.vgpu_id for r in rows if query.matches(r.fields)]

    assert hits("vm:render-07") == [rows[0].vgpu_id]
    assert hits(f"vm:{vm_id}") == [rows[0].vgpu_id]
    assert hits("pod:virt-launcher-cad") == [rows[1].vgpu_id]
    assert hits("ns:render") == [rows[1].vgpu_id]
    assert hits("pod:nobody") == []


def test_the_pod_column_shows_namespace_and_pod_and_only_when_there_are_pods() -> None:
    from vgpumon.view.columns import GPU_COLUMNS, VGPU_COLUMNS, present, visible

    snap, gpu = _named()
    rows = vr.vgpu_rows("local", snap, gpu)  # type: ignore[arg-type]
    pod = next(c for c in VGPU_COLUMNS if c.key == "pod")
    assert [pod.cell(r) for r in rows[:2]] == ["—", "render/virt-launcher-cad-01-abcde"]
    assert "pod" in [c.key for c in visible(VGPU_COLUMNS, False, present(snap))]  # type: ignore[arg-type]
    plain = dataclasses.replace(snap, allocations=())  # type: ignore[type-var]
    assert "pod" not in [c.key for c in visible(VGPU_COLUMNS, True, present(plain))]
    assert "pod" not in [c.key for c in visible(GPU_COLUMNS, True, present(None))]


def test_a_shared_gpu_shows_its_first_pod_and_how_many_more() -> None:
    snap = snapshot_of("kvm-vgpu-timesliced")
    gpu = snap.gpus[0]
    given = tuple(
        DeviceAllocation("nvidia.com/gpu", gpu.uuid, ns, pod, kind="gpu", gpu_uuid=gpu.uuid)
        for ns, pod in (("ml", "b-job"), ("ml", "a-job"), ("web", "c-job"))
    )
    row = vr.gpu_row("local", dataclasses.replace(snap, allocations=given), gpu)
    assert row.holders.label == "ml/a-job +2"
