"""What every live screen shares: header, footer, filter bar, the "too small" message, sorting.

A live screen draws from the app's newest data in :meth:`LiveScreen.draw`; the app calls it only
for the active screen, and a screen redraws itself when it is shown again or resized.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, cast

from rich.cells import cell_len
from rich.console import RenderableType
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Static

from vgpumon.text import printable
from vgpumon.tui.cells import CellCache, Layout
from vgpumon.tui.state import TopState
from vgpumon.tui.widgets.filter_bar import FilterBar
from vgpumon.tui.widgets.keyed_table import Cells, KeyedTable, Source, cell_width
from vgpumon.view.columns import Column, fit, sort_rows

R = TypeVar("R")
CELL_GAP = 2  # a table pads each cell by one on either side
SCROLLBAR = 2  # a table's vertical scrollbar takes this much of the width when rows overflow
UP, DOWN = " ▲", " ▼"  # after the sort column's label: smallest first, largest first
TALL_FROM = 36  # rows from which graphs get taller
MIN_WIDTH = 40
MIN_HEIGHT = 10
TOO_SMALL = f"Terminal too small for vgpumon top: needs at least {MIN_WIDTH}×{MIN_HEIGHT}."


@dataclass
class TableSort:
    """How one table is sorted: by ``key`` (None: the screen's own order), ``reverse``; its
    ``columns`` as last drawn are what ``s`` cycles through."""

    key: str | None = None
    reverse: bool = False
    columns: list[Column[Any]] = field(default_factory=list)


class LiveScreen(Screen[None]):
    # What the screen shows, for a feed that reads only that (vgpumon.feed.Focus): one of
    # vgpumon.feed.SCREENS; a screen of one host says so with its ``host``.
    FOCUS: ClassVar[str] = "fleet"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back", "back"),
        Binding("s", "sort_next", "sort"),
        Binding("S", "sort_reverse", "reverse", show=False),
        Binding("j", "cursor('down')", show=False),
        Binding("k", "cursor('up')", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        # Each sortable table's order (by table id); ``s`` sorts the focused one.
        self.sorts: dict[str, TableSort] = {}
        self.main_table = ""  # the screen's first table: where ``s`` acts when no table is focused
        self.cell_cache = CellCache()
        self._shown: dict[int, RenderableType] = {}  # what each Static shows (by widget id)
        self._composed = False  # set on mount: a pushed screen is active before its children exist

    @property
    def vapp(self) -> TopState:
        """The running app, as the screens read it (:mod:`vgpumon.tui.state`)."""
        return cast("TopState", self.app)

    def compose(self) -> ComposeResult:
        yield Header()
        with Container(id="body"):
            yield from self.compose_body()
        yield Static(TOO_SMALL, id="too-small")
        yield FilterBar()
        # Without Textual's command palette (ctrl+p still opens it): at 80 columns its corner
        # would take the room of vgpumon's own keys.
        yield Footer(show_command_palette=False)

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
        self.set_class(self.app.size.height >= TALL_FROM, "-tall")

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
            table.forget_lines()

    def cells(self, row: Any, columns: Sequence[Column[Any]]) -> tuple[Any, ...]:
        """The row's cells in the current layout and palette (cached while the row is unchanged)."""
        return self.cell_cache.row(row, columns, self.layout_now, self.vapp.palette)

    def lazy_cells(
        self, rows: Sequence[Any], columns: Sequence[Column[Any]]
    ) -> list[tuple[str, Source]]:
        """Each row's key and the function that builds its cells (called only for the rows a
        table shows: :meth:`fill`). A row may come as ``(key, maker)``: its row model is made
        then too."""
        layout, palette, cache = self.layout_now, self.vapp.palette, self.cell_cache

        def made(make: Callable[[], Any]) -> Cells:
            return cache.row(make(), columns, layout, palette)

        return [
            (r[0], functools.partial(made, r[1]))
            if isinstance(r, tuple)
            else (r.key, functools.partial(cache.row, r, columns, layout, palette))
            for r in rows
        ]

    def show(self, widget: Static, content: RenderableType) -> None:
        """Put ``content`` in ``widget`` unless it is there already: a new content lays the
        screen out again, a cost every refresh would pay for a title that did not change."""
        if self._shown.get(id(widget)) != content:
            self._shown[id(widget)] = content
            widget.update(content)

    # ------------------------------------------------------------------ tables

    def fill(
        self,
        table: KeyedTable,
        columns: Sequence[Column[Any]],
        rows: Sequence[tuple[str, Source]],
        *,
        main: bool = False,
        sortable: bool = False,
    ) -> list[Column[Any]]:
        """Show ``rows`` (cells for every one of ``columns``) in ``table``, keeping the columns
        that fit the screen's width (:func:`vgpumon.view.columns.fit`: least important and widest
        drop first, never cut at the edge), each as wide as its widest cell on screen now (or
        its ``width``). The main table's header marks the sort column; its shown columns are
        what ``s`` cycles through (also for a ``sortable`` one, sorted by :meth:`sorted_rows`
        with its id).

        A row may come as a function that builds its cells: it is called only for the rows on
        screen now (their cells measure the columns) and, later, for a row the table draws when it
        scrolls into view; so a host with hundreds of instances costs what one screenful costs."""
        window = table.visible_rows()
        shown: list[tuple[str, Source]] = []
        measured: list[Cells] = []
        for i, (key, cells) in enumerate(rows):
            if i in window:
                if callable(cells):
                    cells = cells()
                measured.append(cells)
            shown.append((key, cells))
        table_id = table.id or ""
        if main and not self.main_table:
            self.main_table = table_id
        order = self.sorts.setdefault(table_id, TableSort()) if main or sortable else None
        labels = [self._label(c, order) for c in columns]
        widths = [
            max([cell_len(label), columns[i].width, *(cell_width(cells[i]) for cells in measured)])
            for i, label in enumerate(labels)
        ]
        # The width the table's container gives it (a scrolling container's scrollbar excluded).
        parent = table.parent
        room = (
            parent.scrollable_content_region.width
            if isinstance(parent, Widget) and parent.size.width
            else self.size.width or self.app.size.width
        )
        if table.size.height and len(rows) + 1 > table.size.height:
            room -= SCROLLBAR  # rows overflow: the vertical scrollbar takes its width
        kept = tuple(fit(columns, widths, room, CELL_GAP))
        table.sync(
            [(columns[i].key, labels[i]) for i in kept],
            shown,
            [widths[i] for i in kept],
            pick=None if len(kept) == len(columns) else kept,
        )
        visible = [columns[i] for i in kept]
        if order is not None and [c.key for c in visible] != [c.key for c in order.columns]:
            had = bool(self.sortable)
            order.columns = visible
            if had != bool(self.sortable):
                self.refresh_bindings()
        return visible

    def _label(self, column: Column[Any], order: TableSort | None) -> str:
        if order is not None and column.key == order.key:
            return column.label + (DOWN if order.reverse else UP)
        return column.label

    # ------------------------------------------------------------------ sorting

    @property
    def sortable(self) -> list[Column[Any]]:
        """The columns ``s`` cycles through now: the focused table's, else the main table's."""
        return self._sort_target().columns

    @property
    def sort_key(self) -> str | None:
        """The main table's sort column (None: the screen's own order)."""
        return self.sorts.get(self.main_table, TableSort()).key

    @property
    def sort_reverse(self) -> bool:
        return self.sorts.get(self.main_table, TableSort()).reverse

    def _sort_target(self) -> TableSort:
        focused = self.focused
        if isinstance(focused, KeyedTable):
            order = self.sorts.get(focused.id or "")
            if order is not None and order.columns:
                return order
        return self.sorts.get(self.main_table) or TableSort()

    def sorted_rows(
        self, rows: Sequence[R], columns: Sequence[Column[R]], table: str | None = None
    ) -> list[R]:
        """``rows`` in the order of ``table`` (by id; the main table when None)."""
        order = self.sorts.get(self.main_table if table is None else table)
        column = None if order is None else next((c for c in columns if c.key == order.key), None)
        if order is None or column is None:
            return list(rows)
        return sort_rows(rows, column, order.reverse)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``s``/``S`` only where a table can be sorted (hidden from the footer elsewhere: a
        disabled key would be drawn dimmed, below the contrast text needs)."""
        return bool(self.sortable) or action not in ("sort_next", "sort_reverse")

    def action_sort_next(self) -> None:
        """The focused table's next shown column; load-like columns start largest first."""
        order = self._sort_target()
        if not order.columns:
            return
        keys = [c.key for c in order.columns]
        i = keys.index(order.key) + 1 if order.key in keys else 0
        column = order.columns[i % len(order.columns)]
        order.key, order.reverse = column.key, column.descending
        self.refresh_data()

    def action_sort_reverse(self) -> None:
        order = self._sort_target()
        order.reverse = not order.reverse
        self.refresh_data()

    def on_keyed_table_header_selected(self, event: KeyedTable.HeaderSelected) -> None:
        order = self.sorts.get(event.table.id or "")
        if order is None:
            return
        key = event.column_key
        if key == order.key:
            order.reverse = not order.reverse
        else:
            column = next((c for c in order.columns if c.key == key), None)
            order.key = key
            order.reverse = column is not None and column.descending
        self.refresh_data()

    # ------------------------------------------------------------------ signals

    def signal_process(self, table_id: str) -> None:
        """Ask, then send a signal to the process under the cursor of ``table_id`` (a table of
        process rows keyed ``host/uuid/pid/PID/kind``); only for this host's processes."""
        app = self.vapp
        try:
            key = self.query_one(f"#{table_id}", KeyedTable).highlighted_key
        except NoMatches:
            key = None
        parts = [] if key is None else key.split("/")
        if len(parts) < 4 or parts[2] != "pid":
            self.notify("Put the cursor on a process first.", timeout=3)
            return
        pid = int(parts[3])
        info = (app.local_processes([pid]) or {}).get(pid)
        if app.proc_table is None or info is None:
            self.notify(
                "Signals go only to processes of this host (not remote or simulated hosts).",
                severity="warning",
                timeout=4,
            )
            return
        from vgpumon.tui.screens.signal import ConfirmSignal

        def send(sig: signal.Signals | None) -> None:
            if sig is None:
                return
            try:
                app.send_signal(pid, sig)
            except OSError as exc:
                self.notify(
                    printable(f"{sig.name} to {pid}: {exc.strerror or exc}"),
                    severity="error",
                    markup=False,
                )
            else:
                self.notify(f"sent {sig.name} to {pid}", timeout=3)

        self.app.push_screen(ConfirmSignal(pid, info), send)

    # ------------------------------------------------------------------ keys

    def action_cursor(self, direction: str) -> None:
        focused = self.focused
        if isinstance(focused, KeyedTable):
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
