"""Idle holders as a badge and a filter term, contention and usage as rows (docs/metering.md)."""

from __future__ import annotations

from vgpumon.model import (
    Gpu,
    GpuMetering,
    Process,
    ProcessMeter,
    Snapshot,
    Usage,
    VgpuInstance,
    VgpuMeter,
    VgpuScheduler,
    VgpuShare,
    VirtualMachine,
)
from vgpumon.sources.usage import UsageReport, UsageRow
from vgpumon.view import badges as b
from vgpumon.view import rows as vr
from vgpumon.view.columns import IDLE, present
from vgpumon.view.filter import parse
from vgpumon.view.metering import contention_lines, merge_reports, usage_lines

VM_ID = "6f9c984a-d134-bbaa-478c-f15eeba17637"


def gpu(vgpu_idle: float | None, process_idle: float | None) -> Gpu:
    return Gpu(
        index=0,
        uuid="GPU-0",
        virtualization_mode="host_vgpu",
        vgpu_instances=(
            VgpuInstance(vgpu_id=1, vm_id=VM_ID),
            VgpuInstance(vgpu_id=2, vm_id="x", vm=VirtualMachine(name="vm-render-07")),
        ),
        processes=(Process(pid=42, name="python3", used_memory_bytes=1 << 30),),
        metering=GpuMetering(
            vgpus=(VgpuMeter(1, Usage(), vgpu_idle), VgpuMeter(2, Usage(), 0.0)),
            processes=(ProcessMeter(42, "python3", usage=Usage(), idle_seconds=process_idle),),
        ),
    )


def snapshot(g: Gpu) -> Snapshot:
    return Snapshot(timestamp=1000.0, gpus=(g,))


def test_a_vgpu_idle_long_enough_carries_the_idle_badge_and_matches_badge_idle() -> None:
    g = gpu(b.IDLE_VGPU_AFTER_SECONDS, None)
    rows = {r.vgpu_id: r for r in vr.vgpu_rows("h", snapshot(g), g)}
    assert rows[1].idle and rows[1].idle_seconds == b.IDLE_VGPU_AFTER_SECONDS
    assert not rows[2].idle
    query = parse("badge:idle")
    assert [r.vgpu_id for r in rows.values() if query.matches(r.fields)] == [1]
    assert "idle" in b.labels(vr.gpu_row("h", snapshot(g), g).badges)


def test_idle_for_less_than_the_badge_time_is_not_idle() -> None:
    g = gpu(b.IDLE_VGPU_AFTER_SECONDS - 1, b.IDLE_PROCESS_AFTER_SECONDS - 1)
    assert not any(r.idle for r in vr.vgpu_rows("h", snapshot(g), g))
    assert not any(r.idle for r in vr.process_rows("h", g))
    assert "idle" not in b.labels(vr.gpu_row("h", snapshot(g), g).badges)
    assert IDLE not in present(snapshot(g))


def test_a_process_holding_memory_unused_is_idle_and_shows_the_idle_column() -> None:
    g = gpu(None, b.IDLE_PROCESS_AFTER_SECONDS + 60)
    (row,) = vr.process_rows("h", g)
    assert row.idle and parse("badge:idle").matches(row.fields)
    assert IDLE in present(snapshot(g))
    assert vr.idle_holders(g) == 1


def test_contention_names_the_starved_vgpu_and_each_neighbour_above_its_due() -> None:
    """From the scheduler's share verdicts: the starved vGPU beside each neighbour that received
    more than its due (never a verdict of its own)."""
    shares = (
        VgpuShare(1, "starved", due=0.5, received=0.1, waited=0.5, window_seconds=60.0),
        VgpuShare(2, "ok", due=0.5, received=0.75, waited=0.0, window_seconds=60.0),
    )
    g = Gpu(
        index=0,
        uuid="GPU-0",
        vgpu_instances=gpu(None, None).vgpu_instances,
        vgpu_schedulers=(VgpuScheduler(policy="equal_share", shares=shares),),
    )
    (line,) = contention_lines("h", snapshot(g), [g])
    assert (line.vgpu_id, line.ran, line.due, line.waited) == (1, 0.1, 0.5, 0.5)
    assert (line.neighbour, line.neighbour_vm, line.above) == (2, "vm-render-07", 0.25)
    assert line.vm == VM_ID[:8] + "…"  # NVML's id shortened, as in the vGPU tables
    assert parse(f"vm:{VM_ID}").matches(line.fields)
    assert parse("vm:render").matches(line.fields)
    assert contention_lines("h", snapshot(gpu(None, None)), [gpu(None, None)]) == []


def test_usage_rows_merge_hosts_and_give_each_its_share() -> None:
    one = UsageReport("vm", 0, 10, (UsageRow(("a",), {"gpu_hours": 3.0, "energy_kwh": 1.0}),))
    two = UsageReport(
        "vm",
        0,
        20,
        (
            UsageRow(("a",), {"gpu_hours": 1.0, "energy_kwh": 0.5}),
            UsageRow(("b",), {"gpu_hours": 4.0}),
        ),
    )
    merged = merge_reports([one, two], "vm")
    lines = {u.name: u for u in usage_lines(merged)}
    assert (lines["a"].gpu_hours, lines["a"].energy_kwh, lines["a"].share) == (4.0, 1.5, 0.5)
    assert (lines["b"].share, lines["b"].energy_kwh) == (0.5, None)
    pods = usage_lines(UsageReport("pod", 0, 1, (UsageRow(("ns", "p"), {"gpu_hours": 1.0}),)))
    assert pods[0].name == "ns/p" and parse("ns:ns pod:p").matches(pods[0].fields)
