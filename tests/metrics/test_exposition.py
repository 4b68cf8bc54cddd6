"""Both exposition formats: counter naming, units, parseability, promtool's lint."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from export_helpers import rich_snapshot, samples_by_name
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)

from vgpumon.metrics.exposition import render
from vgpumon.metrics.table import FAMILIES, HTTP_SERVER_PREFIX, ExportOptions

OPTIONS = ExportOptions(processes=True, pod_series=True)


def test_text_format_names_counters_with_total() -> None:
    text = render(rich_snapshot(), options=OPTIONS).decode()
    assert "# TYPE vgpumon_nvml_errors_total counter\n" in text
    assert "# TYPE vgpumon_gpu_energy_joules_total counter\n" in text
    assert 'vgpumon_gpu_energy_joules_total{gpu="0",uuid="GPU-00000000' in text
    assert "# UNIT" not in text and "# EOF" not in text


def test_openmetrics_names_counter_families_without_total() -> None:
    text = render(rich_snapshot(), openmetrics=True, options=OPTIONS).decode()
    assert "# TYPE vgpumon_nvml_errors counter\n" in text
    assert (
        "# TYPE vgpumon_gpu_energy_joules counter\n# UNIT vgpumon_gpu_energy_joules joules\n"
        in (text)
    )
    assert "\nvgpumon_gpu_energy_joules_total{" in text
    assert "# UNIT vgpumon_gpu_utilization_ratio ratio\n" in text
    assert text.endswith("# EOF\n")


def test_both_formats_carry_the_same_series() -> None:
    snapshot = rich_snapshot()
    text = samples_by_name(render(snapshot, options=OPTIONS).decode())
    om: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in parse_openmetrics(render(snapshot, openmetrics=True, options=OPTIONS).decode()):
        for sample in family.samples:
            om.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    assert text == om
    # The HTTP server's families come from its own counts, not from a snapshot (tests/export).
    from_snapshots = {f.name for f in FAMILIES if not f.name.startswith(HTTP_SERVER_PREFIX)}
    assert set(text) == from_snapshots


def test_values_and_labels_reach_the_exposition() -> None:
    snapshot = rich_snapshot()
    samples = samples_by_name(render(snapshot, options=OPTIONS).decode())
    util = {s[0]["gpu"]: s[1] for s in samples["vgpumon_gpu_utilization_ratio"]}
    assert util == {"0": 0.5, "2": 0.5}
    mig = {
        (s[0]["gpu"], s[0]["gpu_instance"]): s[1] for s in samples["vgpumon_mig_memory_total_bytes"]
    }
    assert mig == {("1", "1"): 10 * 1024**3, ("1", "2"): 40 * 1024**3}
    (build,) = samples["vgpumon_build_info"]
    assert build[0]["version"] and build[1] == 1.0
    up = {s[0]["gpu"]: s[1] for s in samples["vgpumon_gpu_up"]}
    assert up == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 0.0}


def test_label_values_are_escaped() -> None:
    import dataclasses

    snapshot = rich_snapshot()
    odd = dataclasses.replace(snapshot.gpus[0], name='GPU "quoted" \\ back\nslash')
    snapshot = dataclasses.replace(snapshot, gpus=(odd,))
    samples = samples_by_name(render(snapshot).decode())
    (info,) = samples["vgpumon_gpu_info"]
    assert info[0]["name"] == 'GPU "quoted" \\ back\nslash'


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_promtool_accepts_the_full_exposition() -> None:
    # promtool check metrics reads the text format; OpenMetrics is checked by parsing above.
    body = render(rich_snapshot(), options=OPTIONS)
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
