"""User-facing failures.

Anything raised as :class:`VgpumonError` is printed by the CLI as one line and turns into a non-zero
exit status; everything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from vgpumon.text import printable


class VgpumonError(Exception):
    """A failure the user can act on; ``str(err)`` is the whole message, always one line.

    Messages quote what the user typed (flag values, file names), which may hold a newline or a
    terminal escape: control characters are written as escapes here, once for every message.
    """

    exit_code = 2

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(printable(str(message)), *args)


class ConfigError(VgpumonError):
    """A bad flag, config file, scenario file or web-config file."""


def one_line(value: object, limit: int = 400) -> str:
    """``value`` (a message or an exception) as one line of at most ``limit`` characters.

    Every user-facing error is one line (docs/design.md, rule 7); library messages (OpenSSL,
    PyYAML, CUDA) often span several, and an exception with an empty message is named by type.
    """
    text = " ".join(str(value).split())
    if not text and isinstance(value, BaseException):
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"
