"""View rows to table cells for the terminal: the view's columns plus gauges and alarm colours.

The text of every cell comes from :mod:`vgpumon.view.columns`; this module only adds what a
terminal can show and a plain table cannot: gauges for utilization and memory, red and yellow for
badges (bold and reverse video in the monochrome theme, which has no colours to spend).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from rich.console import RenderableType
from rich.text import Text

from vgpumon.view import format as f
from vgpumon.view.badges import Badge
from vgpumon.view.columns import WIDE_AT, Column, visible

R = TypeVar("R")
COMPACT_BELOW = 80  # below this width gauges are left out


@dataclass(frozen=True)
class Palette:
    error: str = "bold red"
    warning: str = "bold yellow"
    good: str = "green"
    dim: str = "dim"
    gauge: str = "cyan"


COLOUR = Palette()
MONO = Palette(error="bold reverse", warning="bold underline", good="", dim="dim", gauge="")


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

    def gauge_for(self, key: str) -> int:
        """Utilization always gets a gauge when there is room; memory only in wide layouts."""
        return self.gauge if key == "util" or self.wide else 0


def badges_text(badges: Sequence[Badge], palette: Palette) -> Text:
    text = Text()
    for i, b in enumerate(badges):
        if i:
            text.append(" ")
        text.append(b.label, style=palette.error if b.error else palette.warning)
    return text


def gauge(ratio: float | None, label: str, width: int, palette: Palette) -> RenderableType:
    if width <= 0:
        return label
    text = Text(f.bar(ratio, width), style=palette.gauge)
    text.append(f" {label}")
    return text


def table_columns(
    columns: Sequence[Column[R]], layout: Layout, has: frozenset[str] = frozenset()
) -> list[Column[R]]:
    """The columns of a table at this layout; ``has`` (:func:`vgpumon.view.columns.present`)
    turns on the columns of optional data such as pods."""
    return visible(columns, layout.wide, has)


# Column key -> ratio getter for the columns that get a gauge in front of their text.
GAUGES: dict[str, Callable[[Any], float | None]] = {
    "util": lambda r: getattr(r, "utilization", None),
    "memory": lambda r: getattr(r, "memory_ratio", None),
    "fb": lambda r: getattr(r, "framebuffer_ratio", None),
}


def _has_ratio(row: object, key: str) -> bool:
    return hasattr(
        row, {"util": "utilization", "memory": "memory_ratio"}.get(key, "framebuffer_ratio")
    )


class CellCache:
    """Cells already built for a row model: rows are frozen and hashable, so an unchanged row
    (most of them, from one refresh to the next) costs a dictionary look-up, not new Text objects,
    and the keyed table sees the very same cells and skips comparing them."""

    LIMIT = 50_000  # entries; cleared whole when exceeded (old rows are never asked for again)

    def __init__(self) -> None:
        self._cells: dict[Any, tuple[RenderableType, ...]] = {}

    def get(
        self, key: Any, build: Callable[[], tuple[RenderableType, ...]]
    ) -> tuple[RenderableType, ...]:
        cells = self._cells.get(key)
        if cells is None:
            if len(self._cells) >= self.LIMIT:
                self._cells.clear()
            cells = self._cells[key] = build()
        return cells

    def clear(self) -> None:
        self._cells.clear()

    def row(
        self, row: Any, columns: Sequence[Column[Any]], layout: Layout, palette: Palette
    ) -> tuple[RenderableType, ...]:
        key = (row, tuple(c.key for c in columns), layout, palette)
        return self.get(key, lambda: row_cells(row, columns, layout, palette))


def row_cells(
    row: R, columns: Sequence[Column[R]], layout: Layout, palette: Palette
) -> tuple[RenderableType, ...]:
    cells: list[RenderableType] = []
    for c in columns:
        value = c.cell(row)
        if c.key == "badges" or c.key == "note":
            badges = getattr(row, "badges", ())
            error = getattr(row, "error", None)
            cells.append(
                Text(value, style=palette.error) if error else badges_text(badges, palette)
            )
        elif c.key in GAUGES and layout.gauge_for(c.key) and _has_ratio(row, c.key):
            cells.append(gauge(GAUGES[c.key](row), value, layout.gauge_for(c.key), palette))
        elif c.key in ("license", "state") and value.startswith("unlicensed"):
            cells.append(Text(value, style=palette.warning))
        elif (c.key == "starved" and value) or (
            c.key == "state" and value.startswith("unreachable")
        ):
            cells.append(Text(value, style=palette.error))
        elif value == f.DASH:
            cells.append(Text(value, style=palette.dim))
        else:
            cells.append(Text(value, justify="right" if c.numeric else "left"))
    return tuple(cells)
