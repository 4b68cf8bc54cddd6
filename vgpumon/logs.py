"""Log lines as the Prometheus exporters users already run write them: logfmt or JSON, UTC.

:func:`configure` sets up the root logger, so every logger's records (asyncssh's, aiohttp's)
come out in the same format: ``time=2026-01-02T03:04:05.678Z level=info logger=vgpumon.serve
msg="..."``, or one JSON object per line with ``time``, ``level``, ``logger`` and ``message``
(and ``exception`` where there is one). Times are UTC with the zone written (``Z``).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

FORMATS = ("logfmt", "json")
_HANDLER_NAME = "vgpumon"
_configured = False  # set by configure(): from then on notices go through logging


def configured() -> bool:
    """Whether :func:`configure` has run (a command's own notices then use the log format)."""
    return _configured


def utc_time(created: float) -> str:
    """``2026-01-02T03:04:05.678Z``: RFC 3339 in UTC, milliseconds."""
    seconds = int(created)
    millis = int((created - seconds) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, str]:
    out = {
        "time": utc_time(record.created),
        "level": record.levelname.lower(),
        "logger": record.name,
        "message": record.getMessage(),
    }
    if record.exc_info:
        out["exception"] = formatter.formatException(record.exc_info)
    elif record.exc_text:
        out["exception"] = record.exc_text
    return out


def _json(value: object) -> str:
    """JSON as UTF-8 text, with what JSON leaves raw but a terminal would obey (C1 controls,
    bidi overrides: a log line quotes names others chose) written as ``\\uXXXX`` escapes."""
    text = json.dumps(value, ensure_ascii=False)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(ord(c)) for c in text)


def _escape(code: int) -> str:
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000  # beyond the BMP: JSON writes a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line; newlines inside a message are escaped by JSON itself."""

    def format(self, record: logging.LogRecord) -> str:
        return _json(_fields(record, self))


class LogfmtFormatter(logging.Formatter):
    """``key=value`` pairs; values with spaces, quotes, ``=`` or control characters are quoted
    with JSON's escapes, so a line stays one line."""

    def format(self, record: logging.LogRecord) -> str:
        fields = _fields(record, self)
        fields["msg"] = fields.pop("message")
        exception = fields.pop("exception", None)
        if exception is not None:
            fields["exception"] = exception
        return " ".join(f"{key}={_logfmt_value(value)}" for key, value in fields.items())


def _logfmt_value(value: str) -> str:
    if value and not any(c in value for c in ' "=\\') and value.isprintable():
        return value
    return _json(value)


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record comes (not the one at start-up)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(level: str, fmt: str = "logfmt", stream: TextIO | None = None) -> None:
    """The root logger at ``level`` with one handler in ``fmt``, replacing the one an earlier
    call installed; every logger without handlers of its own (asyncssh's, aiohttp's) writes
    through it."""
    global _configured
    handler = _StderrHandler() if stream is None else logging.StreamHandler(stream)
    formatter: Any = JsonFormatter() if fmt == "json" else LogfmtFormatter()
    handler.setFormatter(formatter)
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in root.handlers[:]:
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    _configured = True
