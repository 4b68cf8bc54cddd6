"""The rich table helpers of ``vgpumon snapshot``'s picture, shared by render.py and
vgpu_render.py (a module of its own, so neither imports the other)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

__all__ = ["FOLDING", "HOST", "WIDE_AT", "row_table", "titled_table"]

from rich import box
from rich.table import Table

from vgpumon.view.columns import WIDE_AT, Column, visible

R = TypeVar("R")
HOST = "local"
# Columns whose text may fold at its spaces (names); everything else stays on one line.
FOLDING = frozenset(
    {"name", "process", "modes", "note", "product", "held", "state", "expires", "badges", "pod"}
)


def titled_table(title: str, *columns: str) -> Table:
    """A section of the snapshot picture: bold left-aligned title, light borders."""
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    for column in columns:
        table.add_column(column, no_wrap=True)
    return table


def row_table(
    title: str,
    columns: Sequence[Column[R]],
    rows: Sequence[R],
    *,
    wide: bool,
    lead: tuple[str, ...] = (),
    lead_cells: Sequence[tuple[str, ...]] = (),
    has: frozenset[str] = frozenset(),
) -> Table:
    """A table of view rows; ``lead`` columns (e.g. the GPU index) come before the row's own;
    ``has`` turns on the columns of optional data (:func:`vgpumon.view.columns.present`)."""
    shown = visible(columns, wide, has)
    table = titled_table(title)
    for name in lead:
        table.add_column(name, no_wrap=True, justify="right")
    for c in shown:
        folds = c.key in FOLDING
        table.add_column(
            c.label,
            justify="right" if c.numeric else "left",
            no_wrap=not folds,
            # A name folds at its spaces; any other value that does not fit shows that it was
            # cut (an ellipsis), never a silently shorter value (41% as 41).
            overflow="fold" if folds else "ellipsis",
        )
    for i, row in enumerate(rows):
        extra = lead_cells[i] if lead_cells else ()
        table.add_row(*extra, *(c.cell(row) for c in shown))
    return table
