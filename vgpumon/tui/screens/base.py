"""What every live screen shares: header, footer, filter bar, the "too small" message, sorting.

A live screen draws from the app's newest data in :meth:`LiveScreen.draw`; the app calls it only
for the active screen, and a screen redraws itself when it is shown again or resized.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from vgpumon.tui.cells import CellCache, Layout
from vgpumon.tui.widgets.filter_bar import FilterBar
from vgpumon.tui.widgets.keyed_table import KeyedTable
from vgpumon.view.columns import Column, sort_rows

if TYPE_CHECKING:
    from vgpumon.tui.app import VgpumonApp

R = TypeVar("R")
MIN_WIDTH = 40
MIN_HEIGHT = 10
TOO_SMALL = f"Terminal too small for vgpumon top: needs at least {MIN_WIDTH}×{MIN_HEIGHT}."


class LiveScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "back"),
        Binding("s", "sort_next", "sort"),
        Binding("S", "sort_reverse", "reverse", show=False),
        Binding("j", "cursor('down')", show=False),
        Binding("k", "cursor('up')", show=False),
    ]
    # Columns ``s`` cycles through on this screen's main table (set by subclasses).
    SORT_COLUMNS: Sequence[Column[Any]] = ()

    def __init__(self) -> None:
        super().__init__()
        self.sort_key: str | None = None
        self.sort_reverse = False
        self.cell_cache = CellCache()
        self._composed = False  # set on mount: a pushed screen is active before its children exist

    @property
    def vapp(self) -> VgpumonApp:
        return cast("VgpumonApp", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        with Container(id="body"):
            yield from self.compose_body()
        yield Static(TOO_SMALL, id="too-small")
        yield FilterBar()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        raise NotImplementedError

    @property
    def layout_now(self) -> Layout:
        return Layout.for_width(self.size.width or self.app.size.width)

    @property
    def too_small(self) -> bool:
        width, height = self.app.size
        return width < MIN_WIDTH or height < MIN_HEIGHT

    def on_mount(self) -> None:
        self._composed = True
        self._apply_size()
        self.refresh_data()

    def on_screen_resume(self) -> None:
        self.refresh_data()

    def on_resize(self) -> None:
        self._apply_size()
        self.refresh_data()

    def _apply_size(self) -> None:
        self.set_class(self.too_small, "-too-small")
        self.set_class(self.layout_now.compact, "-compact")

    def refresh_data(self) -> None:
        if self.too_small or not self._composed:
            return
        try:
            self.draw()
        except NoMatches:
            return  # the screen is being taken down (or not built yet): nothing to draw on

    def draw(self) -> None:
        raise NotImplementedError

    def forget_cells(self) -> None:
        """Colours changed (theme): rebuild every cell on the next draw."""
        self.cell_cache.clear()
        for table in self.query(KeyedTable):
            table._columns_sig = ()

    def cells(self, row: Any, columns: Sequence[Column[Any]]) -> tuple[Any, ...]:
        """The row's cells in the current layout and palette (cached while the row is unchanged)."""
        return self.cell_cache.row(row, columns, self.layout_now, self.vapp.palette)

    # ------------------------------------------------------------------ sorting

    def sorted_rows(self, rows: Sequence[R], columns: Sequence[Column[R]]) -> list[R]:
        column = next((c for c in columns if c.key == self.sort_key), None)
        if column is None:
            return list(rows)
        return sort_rows(rows, column, self.sort_reverse)

    def action_sort_next(self) -> None:
        keys = [c.key for c in self.SORT_COLUMNS]
        if not keys:
            return
        i = keys.index(self.sort_key) + 1 if self.sort_key in keys else 0
        self.sort_key = keys[i % len(keys)]
        self.notify(f"sorted by {self.sort_key}", timeout=1.5)
        self.refresh_data()

    def action_sort_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self.refresh_data()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        key = event.column_key.value
        if key == self.sort_key:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_key, self.sort_reverse = key, False
        self.refresh_data()

    # ------------------------------------------------------------------ keys

    def action_cursor(self, direction: str) -> None:
        focused = self.focused
        if isinstance(focused, DataTable):
            if direction == "down":
                focused.action_cursor_down()
            else:
                focused.action_cursor_up()

    async def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
        elif self.app.current_mode != "overview":
            await self.app.switch_mode("overview")

    def on_filter_bar_applied(self, message: FilterBar.Applied) -> None:
        self.vapp.set_query(message.query)
        self._focus_table()

    def on_filter_bar_closed(self) -> None:
        self._focus_table()

    def _focus_table(self) -> None:
        tables = list(self.query(KeyedTable))
        if tables:
            tables[0].focus()
