"""Snapshots as a Prometheus server holds them: each family's samples, as the exporter renders
them (the tests of vgpumon.metrics.rebuild and of the Prometheus fleet read them back)."""

from __future__ import annotations

from pathlib import Path

from export_helpers import samples_by_name

from vgpumon.metrics.table import FAMILIES, ExportOptions
from vgpumon.model import Snapshot

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
OPTIONS = ExportOptions(processes=True, pod_series=True)
Sample = tuple[tuple[tuple[str, str], ...], float]
Samples = dict[str, list[tuple[dict[str, str], float]]]


def rendered(snapshot: Snapshot, options: ExportOptions = OPTIONS) -> dict[str, list[Sample]]:
    """Every family's samples as Prometheus stores them (an empty label is no label), as
    sorted (labels, value) pairs."""
    out = {}
    for family in FAMILIES:
        out[family.name] = sorted(
            (tuple(sorted((k, v) for k, v in zip(family.labels, labels, strict=True) if v)), value)
            for labels, value in family.samples(snapshot, options)
        )
    return out


def as_input(samples: dict[str, list[Sample]]) -> Samples:
    """Rendered samples as Prometheus holds them and a rebuild takes them: labels as dicts,
    empty labels dropped (an empty label is no label in Prometheus)."""
    return {
        name: [({k: v for k, v in labels if v != ""}, value) for labels, value in got]
        for name, got in samples.items()
    }


def from_golden(name: str) -> Samples:
    """A scenario's golden exposition (tests/golden) as Prometheus holds it, by family name
    (counters' ``_total`` included, empty labels dropped)."""
    text = (GOLDEN_DIR / f"{name}.prom").read_text(encoding="utf-8")
    return {
        family: [({k: v for k, v in labels.items() if v != ""}, value) for labels, value in got]
        for family, got in samples_by_name(text).items()
    }
