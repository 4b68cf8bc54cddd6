"""A DataTable updated by keyed difference: rows are added, removed and changed cell by cell.

A live table that is cleared and refilled every refresh loses the cursor, the scroll position and
costs a full re-layout. :meth:`KeyedTable.sync` compares the new rows with the cells it holds, by
row key, and touches only what changed; the order is applied as a permutation of existing rows.
Only a change of columns (the terminal got wider) rebuilds the table.

Column widths are given by the caller, measured from the cells it shows now, so a column shrinks
again when its widest value goes away (DataTable's own measuring only ever grows a column) and the
first layout never depends on which rows had arrived when the table was first drawn.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import RenderableType
from rich.text import Text
from textual._two_way_dict import TwoWayDict
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

Cells = tuple[RenderableType, ...]


def cell_width(cell: RenderableType) -> int:
    if isinstance(cell, Text):
        return cell.cell_len
    return cell_len(cell) if isinstance(cell, str) else 0


class KeyedTable(DataTable[RenderableType]):
    """DataTable with :meth:`sync`; ``cursor_type`` is row, since rows are what one drills into."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes, cursor_type="row", zebra_stripes=False)
        self._held: dict[str, Cells] = {}
        self._columns_sig: tuple[tuple[str, str], ...] = ()
        self.updates = 0  # cells changed, rows added or removed: a test sees that sync was keyed

    @property
    def held_keys(self) -> list[str]:
        """Row keys in display order."""
        return [str(row.key.value) for row in self.ordered_rows]

    @property
    def highlighted_key(self) -> str | None:
        if not self.row_count:
            return None
        row = self.ordered_rows[min(self.cursor_row, self.row_count - 1)]
        return None if row.key.value is None else str(row.key.value)

    class Scrolled(Message):
        """The table scrolled vertically: rows that came into view may hold old cells."""

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if int(old) != int(new):
            self.post_message(self.Scrolled())

    def cells(self, key: str) -> Cells | None:
        return self._held.get(key)

    def sync(
        self,
        columns: Sequence[tuple[str, str]],
        rows: Sequence[tuple[str, Cells]],
        widths: Sequence[int] | None = None,
    ) -> None:
        """Show ``rows`` (key, cells) in this order under ``columns`` (key, label), each column
        ``widths`` cells wide (default: the widest of its label and cells)."""
        cursor_key = self.highlighted_key
        if len({k for k, _ in rows}) != len(rows):
            # Two rows under one key (the same PID listed twice by a peer) would leave the table's
            # rows and positions disagreeing: the first of them is shown.
            first: dict[str, Cells] = {}
            for key, cells in rows:
                first.setdefault(key, cells)
            rows = list(first.items())
        if widths is None:
            widths = [
                max([cell_len(label), *(cell_width(cells[i]) for _, cells in rows)])
                for i, (_, label) in enumerate(columns)
            ]
        signature = tuple(columns)
        if signature != self._columns_sig:
            self.clear(columns=True)
            for (key, label), width in zip(columns, widths, strict=True):
                self.add_column(label, key=key, width=width)
            self._held = {}
            self._columns_sig = signature
        else:
            resized = False
            for (key, _label), width in zip(columns, widths, strict=True):
                held = self.columns[ColumnKey(key)]
                if held.width != width:
                    held.width = width
                    resized = True
            if resized:
                self._require_update_dimensions = True
                self._update_count += 1  # cached lines were cut to the old widths
                self.refresh()
        wanted = dict(rows)
        rows_before = len(self._held)
        for key in [k for k in self._held if k not in wanted]:
            self.remove_row(key)
            del self._held[key]
            self.updates += 1
        column_keys = [c for c, _ in columns]
        for key, cells in rows:
            old = self._held.get(key)
            if old is None:
                self.add_row(*cells, key=key)
                self.updates += 1
            elif old is not cells and old != cells:
                for column, before, after in zip(column_keys, old, cells, strict=True):
                    if before != after:
                        # Widths are the caller's: no re-measuring per cell.
                        self.update_cell(key, column, after, update_width=False)
                        self.updates += 1
            self._held[key] = cells
        order = [k for k, _ in rows]
        if self.held_keys != order:
            # What DataTable.sort does, with the order given instead of computed from cells.
            self._row_locations = TwoWayDict({RowKey(k): i for i, k in enumerate(order)})
            self._update_count += 1
            self.refresh()
        if len(self._held) != rows_before:
            # An auto-height table grows or shrinks with its rows: lay out again once DataTable
            # has measured them (it does so on its next refresh).
            self.call_after_refresh(self.refresh, layout=True)
        if cursor_key is not None and cursor_key in wanted:
            index = order.index(cursor_key)
            if index != self.cursor_row:
                self.move_cursor(row=index, animate=False)
