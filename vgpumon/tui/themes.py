"""The monochrome theme: for terminals without colour and for people who prefer none.

Alarms cannot rely on red and yellow here, so table cells use bold and reverse video instead
(see :data:`vgpumon.tui.cells.MONO`).
"""

from __future__ import annotations

from textual.theme import Theme

MONOCHROME = Theme(
    name="vgpumon-mono",
    primary="#e0e0e0",
    secondary="#bdbdbd",
    accent="#ffffff",
    warning="#ffffff",
    error="#ffffff",
    success="#e0e0e0",
    foreground="#e0e0e0",
    background="#000000",
    surface="#101010",
    panel="#202020",
    dark=True,
)
