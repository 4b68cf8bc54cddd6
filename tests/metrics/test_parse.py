"""The /metrics parser (metrics/parse.py): an exposition maps back onto the snapshot it came from,
and every name it reads comes from the metric table."""

from __future__ import annotations

import ast
import inspect

import pytest

from vgpumon.collect import Sampler
from vgpumon.metrics import parse
from vgpumon.metrics import table as metrics
from vgpumon.metrics.exposition import render
from vgpumon.metrics.parse import (
    PROCESS_SERIES_COMPLETE,
    PROCESS_SERIES_OFF,
    PROCESS_SERIES_TRUNCATED,
    ExpositionError,
    snapshot_from_metrics,
)
from vgpumon.metrics.table import ExportOptions
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock


async def test_metrics_map_back_to_the_snapshot_values():
    clock = ManualClock()
    session = open_session(sim="h100-mig-gpm", clock=clock)
    sampler = Sampler(session, clock=clock.now)
    try:
        await sampler.cycle()
        clock.advance(1.0)
        snap = await sampler.cycle()
    finally:
        sampler.close()
    text = render(snap, options=ExportOptions(processes=True)).decode()
    back, process_series = snapshot_from_metrics(text)
    assert process_series == PROCESS_SERIES_COMPLETE
    assert back.timestamp == pytest.approx(snap.timestamp)
    assert back.health.cycles_total == 2
    for gpu, again in zip(snap.gpus, back.gpus, strict=True):
        assert (again.index, again.uuid, again.name) == (gpu.index, gpu.uuid, gpu.name)
        assert again.mig_mode_current == gpu.mig_mode_current
        assert again.utilization.gpu == gpu.utilization.gpu
        assert again.memory.used_bytes == gpu.memory.used_bytes
        assert (again.gpm and again.gpm.sm_active) == (gpu.gpm and gpu.gpm.sm_active)
        assert [p.pid for p in again.processes or ()] == [p.pid for p in gpu.processes or ()]
        for gi, gi_again in zip(gpu.mig_instances, again.mig_instances, strict=True):
            assert gi_again.id == gi.id and gi_again.profile_name == gi.profile_name
            assert gi_again.memory_used_bytes == gi.memory_used_bytes
            assert (gi_again.gpm and gi_again.gpm.sm_active) == (gi.gpm and gi.gpm.sm_active)
            assert [c.mig_uuid for c in gi_again.compute_instances] == [
                c.mig_uuid for c in gi.compute_instances
            ]
    _, off = snapshot_from_metrics(render(snap).decode())
    assert off == PROCESS_SERIES_OFF
    # a cap that left processes out: the list is unknown, not "these are all the processes"
    capped = render(snap, options=ExportOptions(processes=True, processes_max=1)).decode()
    back, truncated = snapshot_from_metrics(capped)
    assert truncated == PROCESS_SERIES_TRUNCATED
    assert sum(len(g.processes or ()) for g in snap.gpus) > 1
    assert all(g.processes is None for g in back.gpus)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("something_else 1\n", "not a vgpumon exporter's"),
        ("this is { not metrics", "could not be parsed"),
    ],
)
def test_what_is_not_a_vgpumon_exposition_is_one_line(text: str, message: str):
    with pytest.raises(ExpositionError, match=message) as err:
        snapshot_from_metrics(text)
    assert "\n" not in str(err.value)


def test_the_parser_names_no_metric_itself():
    """Family names only come from the table's rows; no string in parse.py names a family."""
    tree = ast.parse(inspect.getsource(parse))
    names = {f.name for f in metrics.FAMILIES}
    literals = [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    assert not [text for text in literals if text in names or text.startswith("vgpumon_")]
    read = [
        getattr(metrics, a) for a in dir(metrics) if isinstance(getattr(metrics, a), metrics.Family)
    ]
    assert read and all(family in metrics.FAMILIES for family in read)


def test_a_label_the_table_does_not_have_stops_the_import():
    with pytest.raises(AssertionError, match="vgpumon_gpu_up has no label 'nope'"):
        parse._label(metrics.GPU_UP, "nope")
