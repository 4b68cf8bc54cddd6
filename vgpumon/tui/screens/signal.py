"""Send a signal to a GPU process of this host, after a confirmation that names the process.

Only for a local, real host (:func:`vgpumon.tui.app.local_processes`): a remote or simulated
host's pid names nothing here, or worse, another process. The dialog shows the pid, user and
command line read from ``/proc`` just now, so what is confirmed is what gets the signal.
"""

from __future__ import annotations

import signal
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

from vgpumon.sources.procinfo import ProcInfo
from vgpumon.text import printable

# key -> signal; the dialog's footer line lists them in this order.
SIGNALS: dict[str, signal.Signals] = {
    "t": signal.SIGTERM,
    "i": signal.SIGINT,
    "k": signal.SIGKILL,
}


class ConfirmSignal(ModalScreen[signal.Signals | None]):
    """Dismissed with the chosen signal, or None (``n``, Escape)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(key, f"choose('{key}')", sig.name) for key, sig in SIGNALS.items()),
        Binding("n,escape", "cancel", "cancel"),
    ]
    DEFAULT_CSS = """
    ConfirmSignal { align: center middle; }
    ConfirmSignal > Vertical {
        width: 70; height: auto; padding: 1 2; border: thick $vgpumon-error; background: $surface;
    }
    """

    def __init__(self, pid: int, info: ProcInfo) -> None:
        super().__init__()
        self.pid = pid
        self.info = info

    def compose(self) -> ComposeResult:
        text = Text(f"Send a signal to process {self.pid}", style="bold")
        text.append(f"\nuser {printable(self.info.user or '?')}\n")
        text.append(printable(self.info.command or "(no command line)"))
        choices = "  ".join(f"{k}: {s.name}" for k, s in SIGNALS.items())
        text.append(f"\n\n{choices}  n/Esc: cancel")
        with Vertical():
            yield Static(text, id="signal-text")

    def action_choose(self, key: str) -> None:
        self.dismiss(SIGNALS[key])

    def action_cancel(self) -> None:
        self.dismiss(None)
