"""The metric table read backwards: render a snapshot, rebuild it from the samples, render again,
and every sample comes back (vgpumon.metrics.rebuild, what ``top --prometheus`` shows)."""

from __future__ import annotations

import pytest
from export_helpers import rich_snapshot
from rebuild_helpers import Sample, as_input, from_golden, rendered

from vgpumon import sim
from vgpumon.metrics import rebuild as rb
from vgpumon.metrics.table import FAMILIES, ExportOptions


def differences(before: dict[str, list[Sample]], after: dict[str, list[Sample]]) -> list[str]:
    """Families whose samples differ (the exporter's version left out: it is the renderer's)."""
    return [
        f"{name}: lost {sorted(set(before[name]) - set(after[name]))[:3]}, "
        f"made up {sorted(set(after[name]) - set(before[name]))[:3]}"
        for name in before
        if name != "vgpumon_build_info" and before[name] != after[name]
    ]


@pytest.mark.parametrize("name", sorted(sim.builtin_scenarios()))
def test_every_scenario_comes_back_sample_for_sample(name: str) -> None:
    golden = from_golden(name)
    snapshot = rb.rebuild(golden)
    again = rendered(snapshot, ExportOptions(processes=True))
    before = {
        f.name: sorted((tuple(sorted(labels.items())), v) for labels, v in golden.get(f.name, []))
        for f in FAMILIES
    }
    found = differences(before, again)
    if name == "vgpu-guest":
        # A process's kind is not exported: the graphics process comes back as compute, and is
        # counted among the compute processes.
        found = [d for d in found if not d.startswith("vgpumon_gpu_processes:")]
    assert found == []


def test_names_pods_allocations_and_processes_come_back() -> None:
    original = rich_snapshot()
    samples = rendered(original)
    snapshot = rb.rebuild(as_input(samples))
    assert differences(samples, rendered(snapshot)) == []
    # What screens read beyond the samples themselves.
    assert snapshot.timestamp == original.timestamp
    assert snapshot.source == original.source
    assert snapshot.driver == original.driver
    assert [g.uuid for g in snapshot.gpus] == [g.uuid for g in original.gpus]
    vgpu = next(g for g in snapshot.gpus if g.vgpu_instances).vgpu_instances[0]
    assert vgpu.vm is not None and vgpu.vm.name == "vm-render-07"
    assert {a.pod for a in snapshot.allocations} == {a.pod for a in original.allocations}


def test_labels_beyond_the_family_s_are_ignored_and_bad_ones_skip_the_sample() -> None:
    samples = as_input(rendered(rich_snapshot()))
    for series in samples.values():
        for labels, _ in series:
            labels.update(instance="gpu-7:9839", job="vgpumon", cluster="eu-1")
    samples["vgpumon_gpu_utilization_ratio"].append(({"gpu": "x", "uuid": "GPU-bad"}, 0.5))
    samples["vgpumon_vgpu_utilization_ratio"].append(({"gpu": "0"}, 0.5))  # no uuid, no vgpu_id
    snapshot = rb.rebuild(samples)
    assert "GPU-bad" not in {g.uuid for g in snapshot.gpus}
    assert differences(rendered(rich_snapshot()), rendered(snapshot)) == []


def test_a_subset_of_families_gives_what_they_carry_and_drops_what_is_incomplete() -> None:
    samples = as_input(rendered(rich_snapshot()))
    # A collector's success without its duration: the status needs both, so it is left out.
    wanted = ("vgpumon_gpu_up", "vgpumon_gpu_utilization_ratio", "vgpumon_scrape_collector_success")
    snapshot = rb.rebuild({name: samples[name] for name in wanted}, timestamp=5.0)
    assert snapshot.timestamp == 5.0
    assert snapshot.collectors == ()
    assert [g.utilization.gpu for g in snapshot.gpus if g.up] == [
        g.utilization.gpu for g in rich_snapshot().gpus if g.up
    ]
    assert all(g.memory.used_bytes is None for g in snapshot.gpus)
    assert all(g.processes is None for g in snapshot.gpus)  # not asked for: unknown


def test_every_family_is_read_back_or_said_why_not() -> None:
    names = {f.name for f in FAMILIES}
    assert rb.READ_BACK | set(rb.DERIVED) == names
    assert not rb.READ_BACK & set(rb.DERIVED)
