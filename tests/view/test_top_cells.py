"""What top's cells say on a MIG-backed vGPU host and a time-sliced one (issue: memory and shares
that disagreed): the GPU and each GPU instance show the memory their vGPUs hold, a guest
process's SM share is said to be of its vGPU, a license state has one spelling everywhere, and
column names say what they hold."""

from __future__ import annotations

from view_helpers import snapshot_of

from vgpumon.model import VGPU_LICENSE_STATES
from vgpumon.view import format as f
from vgpumon.view import rows as vr
from vgpumon.view.columns import (
    GPU_COLUMNS,
    HOST_TREE_COLUMNS,
    LICENSE_COLUMNS,
    PROCESS_COLUMNS,
    VGPU_COLUMNS,
)
from vgpumon.view.events import snapshot_events

GIB = 2**30


def _col(columns: tuple, key: str):  # type: ignore[no-untyped-def, type-arg]
    return next(c for c in columns if c.key == key)


def test_mig_backed_vgpus_memory_counts_on_the_gpu_and_its_instances() -> None:
    snap = snapshot_of("h100-mig-backed-vgpu", 3.0)
    gpu = snap.gpus[0]
    held = {v.gpu_instance_id: v.framebuffer_used_bytes for v in gpu.vgpu_instances}
    assert gpu.memory.used_bytes == 0  # NVML's own figure, still exported as it is
    migs = {m.gpu_instance_id: m for m in vr.mig_rows("h", gpu, snap)}
    for gi, used in held.items():
        assert migs[gi].memory_used == used  # not 0 above its vGPU's 30 GiB
    row = vr.gpu_row("h", snap, gpu)
    assert row.memory_used == sum(v for v in held.values() if v) == 45 * GIB
    mem = _col(GPU_COLUMNS, "memory")
    assert mem.cell(row).startswith("45.0/")
    # A time-sliced GPU keeps NVML's figure (the vGPUs' framebuffer is counted there).
    sliced = snap.gpus[1]
    assert vr.gpu_row("h", snap, sliced).memory_used == sliced.memory.used_bytes


def test_a_guest_process_share_is_of_its_vgpu_and_said_so() -> None:
    snap = snapshot_of("h100-mig-backed-vgpu", 3.0)
    gpu = snap.gpus[0]
    (proc,) = [p for p in vr.process_rows("h", gpu) if p.kind == "vgpu"]
    of_gpu, of_vgpu = _col(PROCESS_COLUMNS, "sm"), _col(PROCESS_COLUMNS, "sm_vgpu")
    assert (of_gpu.label, of_vgpu.label) == ("sm of GPU", "sm of vGPU")
    assert of_gpu.cell(proc) == f.DASH and of_vgpu.cell(proc) == f.pct(proc.sm)


def test_one_spelling_per_license_state_everywhere() -> None:
    snap = snapshot_of("kvm-vgpu-timesliced", 3.0)
    vgpus = [v for g in snap.gpus for v in vr.vgpu_rows("h", snap, g)]
    licenses = vr.all_license_rows("h", snap)
    in_tables = {v.license_state: _col(VGPU_COLUMNS, "license").cell(v) for v in vgpus}
    in_tree = {v.license_state: _col(HOST_TREE_COLUMNS, "license").cell(v) for v in vgpus}
    on_screen = {r.state: _col(LICENSE_COLUMNS, "state").cell(r) for r in licenses}
    assert in_tables == in_tree == {k: v for k, v in on_screen.items() if k in in_tables}
    assert {f.license_state(s) for s in VGPU_LICENSE_STATES} >= set(in_tables.values()) - {f.DASH}
    later = snapshot_of("vgpu-license-expiry", 41.0)
    changes = [
        e.text for e in snapshot_events("h", snapshot_of("vgpu-license-expiry", 30.0), later)
    ]
    assert "GPU 0 vGPU 31 license restricted → unlicensed" in changes


def test_column_names_say_what_they_hold() -> None:
    snap = snapshot_of("h100-mig-backed-vgpu", 3.0)
    row = vr.gpu_row("h", snap, snap.gpus[0])
    inst = _col(GPU_COLUMNS, "inst")
    assert (inst.label, inst.cell(row)) == ("instances", "4 MIG 3 vGPU")
    assert _col(HOST_TREE_COLUMNS, "inst").cell(row) == "4 MIG 3 vGPU"
    assert _col(GPU_COLUMNS, "held").label == "clock limit"  # clock event reasons
