"""Configured NVML fields in the exposition: per-GPU families beside the table, both formats.

Expected samples are computed from the snapshot's raw values and the declarations (scale,
scope), and the families go through the same renderer as the table's.
"""

from __future__ import annotations

import dataclasses
import gc
import shutil
import subprocess
import weakref

import pytest
from export_helpers import rich_snapshot, samples_by_name
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)

from vgpumon.metrics.exposition import Renderer
from vgpumon.metrics.extra_fields import ExtraField, field_families
from vgpumon.metrics.table import FAMILIES, HTTP_SERVER_PREFIX, ExportOptions
from vgpumon.model import FieldValue, Snapshot

FIELDS = (
    ExtraField(95, "vgpumon_gpu_pcie_replay_rollovers_total", "counter", "Replay rollovers."),
    ExtraField(187, "vgpumon_gpu_power_min_limit_watts", "gauge", "Min limit.", scale=0.001),
    ExtraField(140, "vgpumon_gpu_nvlink0_raw_tx_bytes_total", "counter", "Raw TX.", 1024.0, 0),
    ExtraField(140, "vgpumon_gpu_nvlink1_raw_tx_bytes_total", "counter", "Raw TX.", 1024.0, 1),
    ExtraField(250, "vgpumon_gpu_custom", "gauge", 'Odd help: "quoted" \\ back.'),
)
# Raw values by GPU index. GPU 2 answered nothing for 187 and 250 (not supported); GPU 3 is down
# in the rich snapshot, so whatever it holds has no sample.
RAW = {
    0: [
        FieldValue(95, 3.0),
        FieldValue(187, 200000.0),
        FieldValue(140, 10.0, 0),
        FieldValue(140, 20.0, 1),
        FieldValue(250, -1.5),
    ],
    1: [FieldValue(95, 0.0), FieldValue(187, 100000.0)],
    2: [FieldValue(95, 1.0), FieldValue(140, 5.0, 0)],
    3: [FieldValue(95, 9.0)],
}


def snapshot() -> Snapshot:
    snap = rich_snapshot()
    gpus = tuple(
        dataclasses.replace(g, extra_fields=tuple(RAW.get(g.index, ()))) for g in snap.gpus
    )
    return dataclasses.replace(snap, gpus=gpus)


def expected(snap: Snapshot) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for spec in FIELDS:
        for gpu in snap.gpus:
            if not gpu.up:
                continue
            for v in gpu.extra_fields:
                if (v.field_id, v.scope_id) == (spec.field_id, spec.scope_id):
                    labels = {"gpu": str(gpu.index), "uuid": gpu.uuid}
                    out.setdefault(spec.name, []).append((labels, v.value * spec.scale))
    return out


def render(snap: Snapshot) -> tuple[str, str]:
    options = ExportOptions(processes=True, pod_series=True, families=field_families(FIELDS))
    exposition = Renderer(options).render(snap)
    return exposition.text.decode(), exposition.openmetrics.decode()


def test_text_format_has_each_field_per_gpu() -> None:
    snap = snapshot()
    assert not snap.gpus[3].up
    text, _ = render(snap)
    samples = samples_by_name(text)
    want = expected(snap)
    assert {name: samples[name] for name in want} == want
    assert "# TYPE vgpumon_gpu_pcie_replay_rollovers_total counter\n" in text
    assert '# HELP vgpumon_gpu_custom Odd help: "quoted" \\\\ back.\n' in text
    # The table's families are all still there, before the configured ones.
    from_snapshots = {f.name for f in FAMILIES if not f.name.startswith(HTTP_SERVER_PREFIX)}
    assert set(samples) - set(want) == from_snapshots
    assert text.index("vgpumon_gpu_custom") > text.index("# TYPE vgpumon_gpu_up ")


def test_openmetrics_has_the_same_series_with_units_and_counter_families() -> None:
    snap = snapshot()
    text, om = render(snap)
    families = {f.name: f for f in parse_openmetrics(om)}
    assert families["vgpumon_gpu_pcie_replay_rollovers"].type == "counter"
    assert families["vgpumon_gpu_power_min_limit_watts"].unit == "watts"
    assert families["vgpumon_gpu_nvlink0_raw_tx_bytes"].unit == "bytes"
    assert families["vgpumon_gpu_custom"].documentation == 'Odd help: "quoted" \\ back.'
    om_samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in families.values():
        for s in family.samples:
            om_samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    assert om_samples == samples_by_name(text)
    assert om.endswith("# EOF\n")


def test_no_declared_fields_render_exactly_the_table() -> None:
    snap = snapshot()
    plain = Renderer(ExportOptions()).render(snap)
    assert plain == Renderer(ExportOptions(families=field_families(()))).render(snap)
    assert plain.text == Renderer().render(rich_snapshot()).text  # the values alone add nothing


def test_equal_declarations_give_the_same_families() -> None:
    again = tuple(dataclasses.replace(f) for f in FIELDS)
    assert field_families(again) is field_families(FIELDS)
    assert ExportOptions(families=field_families(again)) == ExportOptions(
        families=field_families(FIELDS)
    )
    changed = (*FIELDS[:-1], dataclasses.replace(FIELDS[-1], help="Other."))
    assert field_families(changed)[-1].help == "Other."


def test_families_take_the_per_gpu_identity_labels() -> None:
    gpu_up = next(f for f in FAMILIES if f.name == "vgpumon_gpu_utilization_ratio")
    for family in field_families(FIELDS):
        assert family.labels == gpu_up.labels
        assert family.section == gpu_up.section
        assert family.collector == "fields"


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_exposition_with_fields() -> None:
    text, _ = render(snapshot())
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_rendering_keeps_no_snapshot_alive() -> None:
    """The families' per-snapshot index holds the snapshot weakly (the publisher's memory bound:
    a replaced snapshot is freed)."""
    snap = snapshot()
    ref = weakref.ref(snap)
    render(snap)
    del snap
    gc.collect()
    assert ref() is None
