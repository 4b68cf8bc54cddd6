"""A history graph on a fixed axis that scrolls in time.

Autoscaled sparklines make a flat 40 % look exactly like a flat 95 %. This graph's vertical range
is fixed by the caller (0-100 % for ratios, 0 to the power limit for watts, 0 to the memory size
for bytes) and its horizontal axis is wall time: each column is one slice of the last ``window``
seconds, so the picture moves left as time passes and a gap in the data stays a gap.

An axis never invents a range: when its top is unknown (no power limit, no memory size, a lost
GPU) the graph draws no bars and says so, rather than scaling to a made-up 0-1. The title shows
the newest value; when that is missing it says so and names the last known one, and ``stale``
(a lost GPU, a wedged sampler, an unreachable host) marks the whole graph as old data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.text import Text
from textual.widget import Widget

Point = tuple[float, float | None]
LEVELS = " ▁▂▃▄▅▆▇█"


def columns_for(
    points: Sequence[Point], now: float, window: float, width: int
) -> list[float | None]:
    """The value shown in each of ``width`` time slices ending at ``now`` (the slice's newest)."""
    out: list[float | None] = [None] * width
    if width <= 0 or window <= 0:
        return out
    start = now - window
    step = window / width
    for t, v in points:
        if t < start or t > now + step or v is None:
            continue
        i = min(width - 1, int((t - start) / step))
        out[i] = v
    return out


def plot(values: Sequence[float | None], lo: float, hi: float, height: int) -> list[str]:
    """Rows of block characters, top first; each column's height is its value on [lo, hi]."""
    span = hi - lo
    eighths: list[int | None] = []
    for v in values:
        if v is None or span <= 0:
            eighths.append(None)
            continue
        ratio = min(1.0, max(0.0, (v - lo) / span))
        eighths.append(round(ratio * height * 8))
    rows = []
    for r in range(height):
        level = height - 1 - r
        line = []
        for e in eighths:
            if e is None:
                line.append("·" if level == 0 else " ")
                continue
            filled = e - level * 8
            line.append(LEVELS[max(0, min(8, filled))])
        rows.append("".join(line))
    return rows


class Graph(Widget):
    """Title line (current value and the fixed range) over a block plot of the recent past."""

    DEFAULT_CSS = """
    Graph { height: 5; min-width: 16; }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"graph--scale"}  # the range, de-emphasised

    def __init__(
        self,
        title: str,
        fmt: Callable[[float | None], str],
        *,
        lo: float = 0.0,
        hi: float | None = 1.0,
        window: float = 120.0,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.title = title
        self.fmt = fmt
        self.lo, self.hi = lo, hi
        self.window = window
        self.points: list[Point] = []
        self.now = 0.0
        self.stale = False

    def show(
        self, points: Sequence[Point], now: float, hi: float | None, *, stale: bool = False
    ) -> None:
        """New data with the axis top (a fixed top, or the power limit or memory size; None when
        unknown: then no bars are drawn)."""
        new_hi = None if hi is None or hi <= self.lo else hi
        pts = list(points)
        if pts == self.points and (now, new_hi, stale) == (self.now, self.hi, self.stale):
            return
        self.points, self.now, self.hi, self.stale = pts, now, new_hi, stale
        self.refresh()

    def heading(self) -> tuple[str, str]:
        """The title (newest value) and the range, as shown on the graph's first line."""
        newest = self.points[-1][1] if self.points else None
        head = f"{self.title} {self.fmt(newest)}"
        if newest is None:
            last = next((v for _, v in reversed(self.points) if v is not None), None)
            if last is not None:
                head += f" (last {self.fmt(last)})"
        if self.stale:
            head += " stale"
        if self.hi is None:
            return head, "no range: limit unknown"
        return head, f"{self.fmt(self.lo)}–{self.fmt(self.hi)}"

    def render(self) -> Text:
        width, height = self.size.width, max(1, self.size.height - 1)
        head, scale = self.heading()
        pad = max(1, width - len(head) - len(scale))
        text = Text(head, style="bold")
        text.append(" " * pad + scale, style=self.get_component_rich_style("graph--scale"))
        values = columns_for(self.points, self.now, self.window, width)
        if self.hi is None:
            values = [None] * width
        for row in plot(values, self.lo, self.hi or self.lo, height):
            text.append("\n")
            text.append(row)
        return text
