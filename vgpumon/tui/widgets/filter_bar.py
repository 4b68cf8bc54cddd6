"""The ``/`` filter line: an input that parses the view's filter grammar on Enter."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input

from vgpumon.errors import ConfigError
from vgpumon.text import printable
from vgpumon.view.filter import Query, parse


class FilterBar(Input):
    """Hidden until ``/``; Enter applies the query, Escape closes without change."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "close", "close filter", show=False)]

    class Applied(Message):
        def __init__(self, query: Query) -> None:
            super().__init__()
            self.query = query

    class Closed(Message):
        pass

    def __init__(self) -> None:
        super().__init__(
            placeholder="filter: vm:NAME license:unlicensed type:L40S mode:mig words…",
            id="filter",
        )

    def open(self, current: Query) -> None:
        self.value = str(current)
        self.add_class("-open")
        self.focus()

    def action_close(self) -> None:
        self.remove_class("-open")
        self.post_message(self.Closed())

    async def action_submit(self) -> None:
        try:
            query = parse(self.value)
        except ConfigError as exc:
            self.app.notify(printable(str(exc)), severity="error", timeout=4, markup=False)
            return
        self.remove_class("-open")
        self.post_message(self.Applied(query))
