"""docs/metrics.md is generated from the metric table and must be regenerated when it changes."""

from __future__ import annotations

from vgpumon.metrics.docs_gen import DOC_PATH, render_markdown
from vgpumon.metrics.table import FAMILIES


def test_committed_metrics_doc_matches_the_table() -> None:
    committed = DOC_PATH.read_text(encoding="utf-8")
    assert committed == render_markdown(), (
        "docs/metrics.md is out of date: run python -m vgpumon.metrics.docs_gen"
    )


def test_every_family_is_documented() -> None:
    text = render_markdown()
    for family in FAMILIES:
        assert f"| `{family.name}` |" in text
