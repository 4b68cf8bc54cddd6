"""Which body a /metrics request gets: format from ``Accept``, gzip from ``Accept-Encoding``.

The answers are prometheus-client's (``choose_encoder``, ``gzip_accepted``) for every header they
handle correctly, so Prometheus sees the same content types as before. Two differences, both
fixes:

* a media range or coding with ``q=0`` means "not acceptable" (RFC 9110 12.4.2), so
  ``gzip;q=0`` gets no gzip and ``application/openmetrics-text;q=0`` no OpenMetrics;
* an OpenMetrics version this exporter does not write (anything but 1.0.0) is never echoed in the
  ``Content-Type``: that entry is skipped like an unsupported media type, and the next acceptable
  one (in the client's order of preference) decides.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

OPENMETRICS = "application/openmetrics-text"
TEXT = "text/plain"
OPENMETRICS_VERSION = "1.0.0"
CONTENT_TYPE_TEXT_0_0_4 = "text/plain; version=0.0.4; charset=utf-8"
CONTENT_TYPE_TEXT_1_0_0 = "text/plain; version=1.0.0; charset=utf-8"
CONTENT_TYPE_OPENMETRICS = "application/openmetrics-text; version=1.0.0; charset=utf-8"
# prometheus-client names these escaping schemes; anything else reads as "underscores".
ESCAPINGS = ("allow-utf-8", "underscores", "dots", "values")


@dataclass(frozen=True)
class Choice:
    openmetrics: bool
    content_type: str


@dataclass(frozen=True)
class _Range:
    media_type: str
    params: dict[str, str]
    q: float


def _q(value: str) -> float:
    try:
        q = float(value)
    except ValueError:
        return 1.0  # prometheus-client ignores q; an unreadable one must not refuse a format
    return q if 0.0 <= q <= 1.0 else 1.0


def _ranges(header: str) -> list[_Range]:
    out = []
    for entry in header.split(","):
        parts = entry.split(";")
        params: dict[str, str] = {}
        for part in parts[1:]:
            key, sep, value = part.strip().partition("=")
            if sep:
                params.setdefault(key.strip().lower(), value.strip())
        q = _q(params.pop("q", "1"))
        out.append(_Range(parts[0].strip().lower(), params, q))
    # Most preferred first; equal preference keeps the client's order (a stable sort).
    return sorted((r for r in out if r.q > 0), key=lambda r: -r.q)


def _version_at_least_1(version: str) -> bool:
    # ASCII digits only, compared without int(): "\xb2" is a digit to str.isdigit() and int()
    # refuses it, and int() refuses 4,300+ digits; either was a 500 for anyone who sent it.
    head = version.split(".")[0]
    return head.isascii() and head.isdigit() and head.lstrip("0") != ""


@functools.lru_cache(maxsize=128)  # a scraper sends the same header every time
def choose(accept: str | None) -> Choice:
    """The format and ``Content-Type`` for an ``Accept`` header (text 0.0.4 when nothing fits)."""
    for r in _ranges(accept or ""):
        version = r.params.get("version", "")
        escaping = r.params.get("escaping", "underscores")
        escaping = escaping if escaping in ESCAPINGS else "underscores"
        if r.media_type == OPENMETRICS:
            if not version:
                return Choice(True, CONTENT_TYPE_OPENMETRICS)
            if version == OPENMETRICS_VERSION:
                return Choice(True, f"{CONTENT_TYPE_OPENMETRICS}; escaping={escaping}")
        elif r.media_type == TEXT and _version_at_least_1(version):
            # prometheus-client answers text 1.0.0 (the same bytes for legacy names) here.
            return Choice(False, f"{CONTENT_TYPE_TEXT_1_0_0}; escaping={escaping}")
    return Choice(False, CONTENT_TYPE_TEXT_0_0_4)


@functools.lru_cache(maxsize=128)
def gzip_wanted(accept_encoding: str | None) -> bool:
    """True when ``gzip`` is listed with a non-zero quality."""
    return any(r.media_type == "gzip" for r in _ranges(accept_encoding or ""))
