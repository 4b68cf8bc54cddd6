"""Text safe to write to a terminal: the one function every shown string goes through.

Names vgpumon shows come from people it does not trust: a VM's tenant names the processes in
its guest, anyone on a host names their processes, a remote exporter or Prometheus sends any
string it likes. A terminal obeys control characters in what it is sent: ESC starts sequences
that set the clipboard (OSC 52), the window title or hyperlinks, clear the screen or move the
cursor (kubectl's CVE-2021-25743); C1 characters (U+0080..U+009F) do the same on terminals that
honour them, and bidirectional overrides (U+202A..U+202E, U+2066..U+2069) make text read in
another order than it is written (CVE-2021-42574). :func:`printable` writes every character that
is not printable as a visible escape (``\\x1b``, ``\\u202e``), so a hostile name shows as what
it is and nothing reaches the terminal but text.

It is a leaf (no imports): errors (whose messages quote what users typed), the views, the
terminal UI and the commands all use it. Rich markup is a second, separate concern: text shown
through Rich goes in as :class:`rich.text.Text`, never as markup.
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:
        # A byte that was not UTF-8, kept by ``surrogateescape`` decoding: show the byte.
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with every character that is not printable written as a visible escape.

    Not printable (Python's :meth:`str.isprintable`): C0 and C1 controls, DEL, format characters
    (bidirectional overrides and isolates, zero-width characters), line and paragraph
    separators, surrogates, private-use and unassigned code points, and every space but U+0020.
    Idempotent: what it returns is printable, so applying it twice changes nothing.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)
