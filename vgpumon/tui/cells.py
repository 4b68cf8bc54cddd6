"""View rows to table cells for the terminal: the view's columns plus gauges and alarm colours.

The text, style role, badges and gauge of every cell come from the column
(:mod:`vgpumon.view.columns`); this module only maps them to what a terminal shows: the palette's
colours for the roles (bold and reverse video in the monochrome theme, which has no colours to
spend) and block gauges. Everything is a :class:`rich.text.Text`, never markup, so a VM or process
named ``[red]`` shows as written, and printable (:func:`vgpumon.text.printable`), so one named
with terminal escapes writes nothing to the terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rich.console import RenderableType
from rich.text import Text

from vgpumon.text import printable
from vgpumon.view import format as f
from vgpumon.view.badges import Badge
from vgpumon.view.columns import DIM, WIDE_AT, Column, visible

R = TypeVar("R")
COMPACT_BELOW = 80  # below this width gauges are left out


@dataclass(frozen=True)
class Palette:
    """The styles of the columns' roles. Colours come from the theme, made legible
    (:mod:`vgpumon.tui.contrast`): bold alarms at 3:1, other text at 4.5:1 against the tables."""

    error: str = "bold red"
    warning: str = "bold yellow"
    good: str = "green"
    dim: str = "grey62"  # de-emphasised, never the terminal's dim attribute (unknown contrast)
    gauge: str = "cyan"

    def role(self, name: str | None) -> str:
        """The style of a column's palette role (:data:`vgpumon.view.columns.ERROR` ...)."""
        return "" if name is None else str(getattr(self, name, ""))

    @property
    def branch(self) -> str:
        """The tree's branches (``├``, ``└``)."""
        return self.dim


COLOUR = Palette()


def palette_for(variables: Mapping[str, str], mono: bool) -> Palette:
    """The palette of a theme, from its legible variables
    (:func:`vgpumon.tui.contrast.legible_variables`). The monochrome theme has no colours to
    spend: errors are bold reverse video, warnings bold and underlined."""
    muted = variables.get("vgpumon-muted", COLOUR.dim)
    if mono:
        return Palette(error="bold reverse", warning="bold underline", good="", dim=muted, gauge="")
    return Palette(
        error=f"bold {variables.get('vgpumon-error', 'red')}",
        warning=f"bold {variables.get('vgpumon-warning', 'yellow')}",
        good=variables.get("vgpumon-good", COLOUR.good),
        dim=muted,
        gauge=variables.get("vgpumon-gauge", COLOUR.gauge),
    )


@dataclass(frozen=True)
class Layout:
    """How much the terminal's width allows."""

    wide: bool
    compact: bool

    @classmethod
    def for_width(cls, width: int) -> Layout:
        return cls(wide=width >= WIDE_AT, compact=width < COMPACT_BELOW)

    @property
    def gauge(self) -> int:
        return 0 if self.compact else (10 if self.wide else 3)

    def gauge_for(self, column: Column[Any]) -> int:
        """Gauges of ``gauge_narrow`` columns whenever there is room; the others only when wide."""
        if column.gauge is None:
            return 0
        return self.gauge if column.gauge_narrow or self.wide else 0


def badges_text(badges: Sequence[Badge], palette: Palette) -> Text:
    text = Text()
    for i, b in enumerate(badges):
        if i:
            text.append(" ")
        text.append(printable(b.label), style=palette.error if b.error else palette.warning)
    return text


def gauge(ratio: float | None, label: str, width: int, palette: Palette) -> RenderableType:
    if width <= 0:
        return Text(printable(label))
    text = Text()
    text.append(f.bar(ratio, width), style=palette.gauge)  # the bar in colour, the value not
    text.append(f" {printable(label)}")
    return text


def table_columns(
    columns: Sequence[Column[R]], layout: Layout, has: frozenset[str] = frozenset()
) -> list[Column[R]]:
    """The columns a screen may show (``has``: :func:`vgpumon.view.columns.present` turns on the
    columns of optional data such as pods); which of them fit is decided when the cells are known
    (:func:`vgpumon.view.columns.fit`), so every layout keeps the most important ones."""
    return visible(columns, True, has)


class CellCache:
    """Cells already built for a row model, one entry per row key: rows are frozen and hashable,
    so an unchanged row (most of them, from one refresh to the next) costs a dictionary look-up,
    not new Text objects, and the keyed table sees the very same cells and skips comparing them.
    Only a row's newest cells are kept, so memory follows the number of rows, not run time."""

    LIMIT = 50_000  # row keys; cleared whole when exceeded (hosts and GPUs that came and went)

    def __init__(self) -> None:
        self._cells: dict[str, tuple[Any, tuple[RenderableType, ...]]] = {}

    def get(
        self, key: str, signature: Any, build: Callable[[], tuple[RenderableType, ...]]
    ) -> tuple[RenderableType, ...]:
        held = self._cells.get(key)
        if held is not None and held[0] == signature:
            return held[1]
        if held is None and len(self._cells) >= self.LIMIT:
            self._cells.clear()
        cells = build()
        self._cells[key] = (signature, cells)
        return cells

    def __len__(self) -> int:
        return len(self._cells)

    def clear(self) -> None:
        self._cells.clear()

    def row(
        self, row: Any, columns: Sequence[Column[Any]], layout: Layout, palette: Palette
    ) -> tuple[RenderableType, ...]:
        signature = (row, tuple(c.key for c in columns), layout, palette)
        return self.get(row.key, signature, lambda: row_cells(row, columns, layout, palette))


def cell(row: R, column: Column[R], layout: Layout, palette: Palette) -> Text:
    """One cell: the column's text with the column's style, badges or gauge."""
    value = printable(column.cell(row))
    if column.parts is not None:
        parts = column.parts(row)
        if parts:
            text = Text()
            for i, (label, role) in enumerate(parts):
                if i:
                    text.append(" ")
                text.append(printable(label), style=palette.role(role))
            return text
    width = layout.gauge_for(column)
    if width and column.gauge is not None and value:
        bar = Text()
        bar.append(f.bar(column.gauge(row), width), style=palette.gauge)  # the value uncoloured
        bar.append(f" {value}")
        return bar
    role = None if column.style is None else column.style(row)
    if role is None and value == f.DASH:
        role = DIM
    return Text(value, style=palette.role(role), justify="right" if column.numeric else "left")


def row_cells(
    row: R, columns: Sequence[Column[R]], layout: Layout, palette: Palette
) -> tuple[RenderableType, ...]:
    return tuple(cell(row, c, layout, palette) for c in columns)
