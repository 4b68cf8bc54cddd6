"""The monochrome theme: for terminals without colour and for people who prefer none.

Alarms cannot rely on red and yellow here, so table cells use bold and reverse video instead
(see :func:`vgpumon.tui.cells.palette_for`).
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


def wants_monochrome(no_color: bool, term: str | None) -> bool:
    """Whether ``top`` starts in :data:`MONOCHROME` when no ``--theme`` is given: under
    ``NO_COLOR`` (no-color.org; Textual would grey every colour, alarms dimmer than text) and on a
    terminal terminfo names monochrome (``dumb``, and by its naming convention ``*-mono`` and
    ``*-m``, as ``xterm-mono``, ``vt100-m``)."""
    if no_color:
        return True
    name = (term or "").strip().lower()
    return name == "dumb" or name.endswith(("-mono", "-m"))
