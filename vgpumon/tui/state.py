"""What the screens read from the running ``top`` (:class:`TopState`), as a protocol.

The app (:class:`vgpumon.tui.app.VgpumonApp`) owns the screens and holds what they show: the hosts'
newest updates, their history, the filter, the palette. The screens read it through this
protocol instead of importing the app, so the app imports its screens and never the other way
round. The app states that it conforms (a check mypy runs), so the two cannot drift apart.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from vgpumon.feed import HostUpdate
from vgpumon.sources.history import History
from vgpumon.sources.procinfo import ProcInfo, ProcTable
from vgpumon.sources.usage import UsageClient
from vgpumon.tui.cells import Palette
from vgpumon.view.events import Event
from vgpumon.view.filter import Query
from vgpumon.view.rows import HostRows


class TopState(Protocol):
    """The app as its screens see it."""

    host_names: tuple[str, ...]  # the feed's hosts, in its order
    history: History
    hosts: dict[str, HostUpdate]  # each host's newest update
    events: deque[tuple[int, Event]]  # (sequence, event), oldest first
    tree_mode: bool
    filter_query: Query
    palette: Palette
    usage: UsageClient | None  # the usage screen's windows (top --prometheus)
    proc_table: ProcTable | None  # this host's processes; None for remote or simulated hosts
    send_signal: Callable[[int, int], None]

    @property
    def multi_host(self) -> bool: ...

    @property
    def graph_window(self) -> float: ...

    def local_processes(self, pids: Iterable[int]) -> dict[int, ProcInfo] | None: ...

    def rows(self, host: str) -> HostRows | None: ...

    def set_query(self, query: Query) -> None: ...
