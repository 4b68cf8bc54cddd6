"""The help screen's legend covers every column heading and badge top draws, and nothing else."""

from __future__ import annotations

from vgpumon.view import badges, columns, legend


def drawn_labels() -> set[str]:
    return {
        c.label
        for name in dir(columns)
        if name.endswith("COLUMNS")
        for c in getattr(columns, name)
        if isinstance(c, columns.Column)
    }


def test_every_column_heading_has_a_legend_entry_and_every_entry_a_heading() -> None:
    labels = drawn_labels()
    assert len(labels) > 50
    assert labels - set(legend.COLUMNS) == set(), "headings without a legend entry"
    assert set(legend.COLUMNS) - labels == set(), "legend entries for no heading"


def test_every_badge_has_a_legend_entry() -> None:
    assert set(legend.BADGES) == set(badges.KINDS)
