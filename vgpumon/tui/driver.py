"""The terminal driver of ``top``: Textual's, with the terminal's loss reported.

Textual's driver writes the screen from a thread of its own; a write to a terminal that has gone
raises there, the thread dies, and the next screens wait forever on its full queue (a process
that outlives its terminal). Here the output is a :class:`~vgpumon.tui.lifeline.GuardedOutput`:
a failed write tells the app's :class:`~vgpumon.tui.lifeline.Lifeline`, which ends the process,
and later writes are dropped. The lifeline can also give the terminal its modes back at once
(its deadline), from what the driver saved when it started.
"""

from __future__ import annotations

from typing import Any

from textual.app import App
from textual.drivers.linux_driver import LinuxDriver

from vgpumon.tui.lifeline import GuardedOutput, Lifeline, restore_terminal


class TerminalDriver(LinuxDriver):
    def __init__(self, app: App[Any], **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        lifeline = getattr(app, "lifeline", None)
        if isinstance(lifeline, Lifeline):
            if self._file is not None:
                self._file = GuardedOutput(self._file, lifeline.terminal_lost)  # type: ignore[assignment]
            lifeline.restore = self.restore_now

    def restore_now(self) -> None:
        """The terminal's modes as before ``top`` (the lifeline's deadline: no waiting)."""
        restore_terminal(self.fileno, self.attrs_before)
