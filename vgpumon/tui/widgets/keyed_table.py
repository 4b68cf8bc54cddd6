"""A table that draws only the rows on screen: :class:`KeyedTable`, a line-API widget.

A host of 16 GPUs with 48 vGPUs each is 784 rows in the host screen's tree. Textual's
``DataTable`` holds a cell object for every row and re-lays them out as they change, so a refresh
costs every row, on screen or not. This table is a ``ScrollView`` that renders line by line
(``render_line``, as ``DataTable`` and ``Log`` do) and holds, per row key, only what makes the row:

* :meth:`KeyedTable.sync` takes the rows in order as ``(key, cells)``, where cells may be a
  function that builds them; a function is called only when its row is drawn (or asked for by
  :meth:`KeyedTable.cells`), so rows off screen cost a list entry, not cells;
* a drawn row's line is cached with the cells it came from: a row whose cells are the very same
  tuple (the screens' cell cache returns the same tuple while a row's values are unchanged) costs
  a dictionary look-up; moving the cursor redraws two lines;
* column widths are the caller's (measured from the rows on screen), so the table never measures.

It looks and behaves as ``DataTable`` with a row cursor did (its component classes, header,
cursor, padding, scrolling, keys and messages), so what ``top`` shows did not change with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from rich.cells import cell_len
from rich.console import RenderableType
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual._segment_tools import line_crop
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.renderables.styled import Styled
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cells = tuple[RenderableType, ...]
Source = Cells | Callable[[], Cells]  # a row's cells, or the function that builds them
CELL_PADDING = 1  # blank cells on either side of each cell (DataTable's default)
_EMPTY = Text()


def cell_width(cell: RenderableType) -> int:
    if isinstance(cell, Text):
        return cell.cell_len
    return cell_len(cell) if isinstance(cell, str) else 0


class _RowMessage(Message):
    """What a table says of one of its rows: which table, which row, the row's key."""

    def __init__(self, table: KeyedTable, row: int, key: str | None) -> None:
        super().__init__()
        self.table, self.cursor_row, self.key = table, row, key

    @property
    def control(self) -> KeyedTable:
        return self.table


class KeyedTable(ScrollView, can_focus=True):
    """Rows by key, drawn only where seen, with a row cursor (rows are what one drills into)."""

    DEFAULT_CSS = """
    KeyedTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;

        &:focus {
            background-tint: $foreground 5%;
            & > .datatable--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }

            & > .datatable--header {
                background-tint: $foreground 5%;
            }
        }

        & > .datatable--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .datatable--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }

        & > .datatable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }

    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "datatable--cursor",
        "datatable--header",
        "datatable--hover",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        # Home and End go to the first and last row, as in htop and nvitop (DataTable's scrolled
        # sideways in a row-cursor table: nothing on a table that fits the width).
        Binding("home,ctrl+home", "scroll_top", "First row", show=False),
        Binding("end,ctrl+end", "scroll_bottom", "Last row", show=False),
    ]

    cursor_row: reactive[int] = reactive(0, repaint=False, always_update=False)

    class RowHighlighted(_RowMessage):
        """The cursor moved to another row (``key``; None in an empty table)."""

    class RowSelected(_RowMessage):
        """Enter (or a click on the cursor's row) chose the row ``key``."""

    class HeaderSelected(Message):
        """A click on the header of the column ``column_key``."""

        def __init__(self, table: KeyedTable, column_key: str, index: int) -> None:
            super().__init__()
            self.table, self.column_key, self.column_index = table, column_key, index

        @property
        def control(self) -> KeyedTable:
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._columns: tuple[tuple[str, str], ...] = ()  # (key, label) of the shown columns
        self._labels: tuple[Text, ...] = ()
        self._widths: tuple[int, ...] = ()  # content widths of the shown columns
        self._pick: tuple[int, ...] | None = None  # the shown columns' places in a row's cells
        self._keys: list[str] = []  # row keys in display order
        self._index: dict[str, int] = {}
        self._source: dict[str, Source] = {}  # how to make each row's cells
        self._built: dict[str, Cells] = {}  # each drawn row's full cells, as built
        self._shown: dict[str, tuple[Cells, Cells]] = {}  # full cells -> the shown columns' cells
        self._lines: dict[str, tuple[object, Strip]] = {}  # row key -> (what made it, line)
        self._header: tuple[object, Strip] | None = None
        # base, header, cursor and hover styles (a frame's: the focus changes them)
        self._styles: tuple[Style, Style, Style, Style] | None = None
        self._highlighted: str | None = None  # the key the last RowHighlighted named
        self._hover: int | None = None  # the row under the mouse, once it moved over the table
        self.updates = 0  # cells changed, rows added or removed: a test sees that sync was keyed

    # ------------------------------------------------------------------ what a screen reads

    @property
    def held_keys(self) -> list[str]:
        """Row keys in display order."""
        return list(self._keys)

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def highlighted_key(self) -> str | None:
        if not self._keys:
            return None
        return self._keys[min(self.cursor_row, len(self._keys) - 1)]

    @property
    def column_keys(self) -> list[str]:
        return [key for key, _ in self._columns]

    @property
    def column_labels(self) -> list[str]:
        return [label for _, label in self._columns]

    @property
    def column_widths(self) -> list[int]:
        """Each shown column's width on screen, its padding included."""
        return [w + 2 * CELL_PADDING for w in self._widths]

    def cells(self, key: str) -> Cells | None:
        """The row's cells in the shown columns (built now if it was not drawn yet)."""
        if key not in self._source:
            return None
        return self._shown_cells(key)

    def visible_rows(self) -> range:
        """The indexes of the rows that can be on screen from the current scroll position: a
        terminal's height of them (a table that grows with its rows may show that many once it
        is laid out again; before its first layout it has no height to go by)."""
        top = int(self.scroll_y)
        return range(top, top + max(self.size.height, self.app.size.height))

    # ------------------------------------------------------------------ what a screen writes

    def sync(
        self,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[tuple[str, Source]],
        widths: Sequence[int] | None = None,
        pick: Sequence[int] | None = None,
    ) -> None:
        """Show ``rows`` (key, cells or a function that builds them) in this order under
        ``columns`` (key, label), each column ``widths`` cells wide (default: the widest of its
        label and of the cells given). ``pick``: which of a row's cells the columns are (all,
        in order, by default). The cursor stays on its row's key when that row is still there."""
        cursor_key = self.highlighted_key
        if len({k for k, _ in rows}) != len(rows):
            # Two rows under one key (the same PID listed twice by a peer) would leave the table's
            # rows and positions disagreeing: the first of them is shown.
            first: dict[str, Source] = {}
            for key, cells in rows:
                first.setdefault(key, cells)
            rows = list(first.items())
        if widths is None:
            given = [cells for _, cells in rows if not callable(cells)]
            widths = [
                max([cell_len(label), *(cell_width(c[pick[i] if pick else i]) for c in given)])
                for i, (_, label) in enumerate(columns)
            ]
        new_columns = tuple(columns) != self._columns or tuple(widths) != self._widths
        new_pick = None if pick is None else tuple(pick)
        if new_columns or new_pick != self._pick:
            self._columns, self._widths, self._pick = tuple(columns), tuple(widths), new_pick
            self._labels = tuple(Text(label) for _, label in columns)
            self._lines.clear()
            self._shown.clear()
            self._header = None
        keys = [key for key, _ in rows]
        old = self._built
        self._source = dict(rows)
        self._built = {}
        for key, cells in rows:
            if callable(cells):
                continue
            self._built[key] = cells
            held = old.get(key)
            if held is None:
                self.updates += 1  # a new row
            elif held is not cells:
                self.updates += sum(1 for a, b in zip(held, cells, strict=False) if a != b)
        self.updates += sum(1 for key in self._index if key not in self._source)
        if keys != self._keys:
            self._keys = keys
            self._index = {key: i for i, key in enumerate(keys)}
        if len(self._lines) > 4 * len(keys) + 200:
            self._lines.clear()
            self._shown.clear()
        if len(keys) + 1 != self.virtual_size.height:
            # An auto-height table grows or shrinks with its rows: the screen is laid out again.
            # Its width is the container's, never its columns' (they are fitted to it): a column
            # that widens must not cost a layout of the whole screen.
            self.virtual_size = Size(0, len(keys) + 1)
        if cursor_key is not None and cursor_key in self._index:
            self.move_cursor(row=self._index[cursor_key])
        elif self.cursor_row >= len(keys):
            self.move_cursor(row=max(0, len(keys) - 1))
        self.refresh()

    def forget_lines(self) -> None:
        """Draw every line anew (the colours changed)."""
        self._lines.clear()
        self._header = None
        self.refresh()

    # ------------------------------------------------------------------ the cursor

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._keys) - 1)) if self._keys else 0

    def watch_cursor_row(self, old: int, new: int) -> None:
        self._refresh_row(old)
        self._refresh_row(new)
        self._scroll_to_cursor()
        self._tell_highlighted()

    def _tell_highlighted(self) -> None:
        key = self.highlighted_key
        if key != self._highlighted:
            self._highlighted = key
            self.post_message(self.RowHighlighted(self, self.cursor_row, key))

    def move_cursor(self, *, row: int, animate: bool = False, scroll: bool = True) -> None:
        self.cursor_row = row
        if scroll:
            self._scroll_to_cursor()
        self._tell_highlighted()

    def _scroll_to_cursor(self) -> None:
        body = max(1, self.scrollable_content_region.height - 1)  # rows below the header
        if not self.scrollable_content_region.height:
            return  # not laid out yet: the first layout shows the top
        top = int(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, force=True)
        elif self.cursor_row >= top + body:
            self.scroll_to(y=self.cursor_row - body + 1, animate=False, force=True)

    def _refresh_row(self, row: int) -> None:
        y = row + 1 - int(self.scroll_y)
        if 1 <= y < self.size.height:
            self.refresh_line(y + int(self.scroll_y))

    def action_cursor_up(self) -> None:
        self._set_hover(None)  # the keyboard took over: the mouse's row is no longer marked
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self._set_hover(None)  # the keyboard took over: the mouse's row is no longer marked
        self.cursor_row += 1

    def action_page_down(self) -> None:
        self._set_hover(None)  # the keyboard took over: the mouse's row is no longer marked
        page = max(1, self.scrollable_content_region.height - 1)
        self.scroll_relative(y=page, animate=False, force=True)
        self.move_cursor(row=self.cursor_row + page - 1, scroll=False)

    def action_page_up(self) -> None:
        self._set_hover(None)  # the keyboard took over: the mouse's row is no longer marked
        page = max(1, self.scrollable_content_region.height - 1)
        self.scroll_relative(y=-page, animate=False)
        self.move_cursor(row=self.cursor_row - page + 1, scroll=False)

    def action_scroll_top(self) -> None:
        self._set_hover(None)  # the keyboard took over: the mouse's row is no longer marked
        self.cursor_row = 0

    def action_scroll_bottom(self) -> None:
        self._set_hover(None)  # the keyboard took over: the mouse's row is no longer marked
        self.cursor_row = len(self._keys) - 1

    def action_select_cursor(self) -> None:
        key = self.highlighted_key
        if key is not None:
            self.post_message(self.RowSelected(self, self.cursor_row, key))

    def _on_mouse_move(self, event: events.MouseMove) -> None:
        row = event.style.meta.get("row")
        self._set_hover(row if isinstance(row, int) and row >= 0 else None)

    def _on_leave(self, _: events.Leave) -> None:
        self._set_hover(None)

    def _set_hover(self, row: int | None) -> None:
        if row != self._hover:
            old, self._hover = self._hover, row
            for changed in (old, row):
                if changed is not None:
                    self._refresh_row(changed)

    async def _on_click(self, event: events.Click) -> None:
        meta = event.style.meta
        if "row" not in meta or "column" not in meta:
            return
        row, column = meta["row"], meta["column"]
        if row == -1:
            if 0 <= column < len(self._columns):
                self.post_message(self.HeaderSelected(self, self._columns[column][0], column))
            return
        if 0 <= row < len(self._keys):
            self.cursor_row = row
            self.action_select_cursor()
            event.stop()

    # ------------------------------------------------------------------ drawing

    def _shown_cells(self, key: str) -> Cells:
        full = self._built.get(key)
        if full is None:
            source = self._source[key]
            full = source() if callable(source) else source
            self._built[key] = full
        if self._pick is None:
            return full
        held = self._shown.get(key)
        if held is not None and held[0] is full:
            return held[1]
        shown = tuple(full[i] for i in self._pick)
        self._shown[key] = (full, shown)
        return shown

    def render_lines(self, crop: Region) -> list[Strip]:
        # The styles of this frame, once: the focus changes the base, header and cursor styles.
        self._styles = self._frame_styles()
        return super().render_lines(crop)

    def _frame_styles(self) -> tuple[Style, Style, Style, Style]:
        return (
            self.rich_style,
            self.get_component_rich_style("datatable--header"),
            self.get_component_rich_style("datatable--cursor"),
            self.get_component_rich_style("datatable--hover"),
        )

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        styles = self._styles or self._frame_styles()
        base, header, cursor, hover = styles
        if y == 0:
            heading = (width, styles, self._columns)
            if self._header is None or self._header[0] != heading:
                self._header = (heading, self._line(-1, self._labels, header, None, base, width))
            return self._header[1]
        row = y - 1 + int(self.scroll_y)
        if not 0 <= row < len(self._keys):
            return Strip.blank(width, base)
        key = self._keys[row]
        cells = self._shown_cells(key)
        marked: Style | None = None  # the hover's and the cursor's styles over the row's
        if row == self._hover:
            marked = hover
        if row == self.cursor_row:
            marked = cursor if marked is None else marked + cursor
        made = (cells, row, marked, width, styles)
        held = self._lines.get(key)
        if held is not None and held[0] == made:
            return held[1]
        strip = self._line(row, cells, base, marked, base, width)
        self._lines[key] = (made, strip)
        return strip

    def _line(
        self,
        row: int,
        cells: Sequence[RenderableType],
        row_style: Style,
        cursor: Style | None,
        base: Style,
        width: int,
    ) -> Strip:
        """One row (``-1``: the header) as DataTable draws it: each cell padded, in its
        column's width, over the row's style and the cursor's; the rest of the line filled."""
        console = self.app.console
        segments: list[Segment] = []
        component = cursor or Style()
        # The cursor's colour wins over a cell's own; its background does not (DataTable's
        # "css" foreground and "renderable" background priorities).
        post = Style.from_color(color=component.color) + Style.null()
        for column, cell in enumerate(cells):
            cell_width_ = self._widths[column] + 2 * CELL_PADDING
            options = console.options.update_dimensions(cell_width_, 1).update(no_wrap=True)
            meta = Style.from_meta({"row": row, "column": column})
            lines = console.render_lines(
                Styled(
                    Padding(cell if cell is not None else _EMPTY, (0, CELL_PADDING)),
                    pre_style=row_style + meta + component,
                    post_style=post,
                ),
                options,
            )
            segments.extend(lines[0])
        remaining = max(0, width - sum(self.column_widths))
        background = self.background_colors[1]
        if row_style.bgcolor is not None:
            faded = Color.from_rich_color(row_style.bgcolor).blend(background, factor=0.25)
            fill = Style.from_color(color=row_style.color, bgcolor=faded.rich_color)
        else:
            fill = Style.from_color(row_style.color, row_style.bgcolor)
        segments.append(Segment(" " * remaining, fill))
        cropped = line_crop(segments, 0, width, sum(self.column_widths) + remaining)
        return Strip(cropped).adjust_cell_length(width, base).simplify()

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()
        self._header = None


class OpeningTable(KeyedTable):
    """A table whose row Enter opens (a host, a GPU): the footer names the key. A focused
    widget's bindings win over its screen's, so a key the table binds hidden is hidden from the
    footer whatever the screen says; this table binds Enter shown."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "open", key_display="⏎"),
    ]
