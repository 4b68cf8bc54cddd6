"""The rich table helpers of ``vgpumon snapshot``'s picture, shared by render.py and
vgpu_render.py (a module of its own, so neither imports the other).

Every cell is text, never Rich markup, and printable (:func:`vgpumon.text.printable`): a process
named ``[link=...]`` or ``ESC ] 52 ...`` shows as written and writes nothing to the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

__all__ = ["FOLDING", "HOST", "WIDE_AT", "TextTable", "row_table", "titled_table"]

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from vgpumon.text import printable
from vgpumon.view.columns import WIDE_AT, Column, visible

R = TypeVar("R")
HOST = "local"
# Columns whose text may fold at its spaces (names); everything else stays on one line.
FOLDING = frozenset(
    {"name", "process", "modes", "note", "product", "held", "state", "expires", "badges", "pod"}
)


class TextTable(Table):
    """A table whose string cells are plain printable text (a string given to Rich's own table
    is read as markup, and its control characters reach the terminal)."""

    def add_row(
        self,
        *renderables: RenderableType | None,
        style: Any = None,
        end_section: bool = False,
    ) -> None:
        cells = [Text(printable(c)) if isinstance(c, str) else c for c in renderables]
        super().add_row(*cells, style=style, end_section=end_section)


def titled_table(title: str, *columns: str) -> TextTable:
    """A section of the snapshot picture: bold left-aligned title, light borders."""
    table = TextTable(
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
) -> TextTable:
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
