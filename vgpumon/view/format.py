"""Turning model values into short display strings, the same way in every front end.

The model keeps base units (bytes, hertz, watts, seconds, ratios in [0, 1]) and ``None`` for a
value NVML did not give. Every function here prints ``None`` as :data:`DASH` and never as 0, so a
reader can tell "not reported" from "zero". Values are short (a number and a unit) so that tables
can keep each one on one line (``no_wrap`` columns) and fold only text such as names.
"""

from __future__ import annotations

import datetime
import math

DASH = "—"
KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4


def _absent(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def or_dash(value: object) -> str:
    """Any value as text; None or an empty string is absent."""
    return DASH if value is None or value == "" else str(value)


def pct(ratio: float | None, digits: int = 0) -> str:
    """A 0-1 ratio as a percentage (NVML's percent is stored divided by 100)."""
    if ratio is None or _absent(ratio):
        return DASH
    return f"{ratio * 100:.{digits}f}%"


def size(value: int | float | None) -> str:
    """Bytes with the largest binary unit that keeps the number readable (``12.5 GiB``)."""
    if value is None or _absent(value):
        return DASH
    v = float(value)
    for unit, scale in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(v) >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v:.0f} B"


def used_total(used: int | None, total: int | None) -> str:
    """``used/total GiB`` in the total's unit, so both numbers compare at a glance."""
    if used is None and total is None:
        return DASH
    scale, unit = GIB, "GiB"
    if total is not None and total < GIB:
        scale, unit = MIB, "MiB"
    u = DASH if used is None else f"{used / scale:.1f}"
    t = DASH if total is None else f"{total / scale:.1f}"
    return f"{u}/{t} {unit}"


def hertz(value: float | None) -> str:
    """A clock in MHz (what every GPU tool prints)."""
    if value is None or _absent(value):
        return DASH
    return f"{value / 1e6:.0f} MHz"


def watts(value: float | None) -> str:
    return DASH if value is None or _absent(value) else f"{value:.0f} W"


def power_of_limit(power: float | None, limit: float | None) -> str:
    """``212/300 W``: the draw against the limit the board enforces."""
    if limit is None:
        return watts(power)
    p = DASH if power is None else f"{power:.0f}"
    return f"{p}/{limit:.0f} W"


def celsius(value: float | None) -> str:
    return DASH if value is None or _absent(value) else f"{value:.0f} °C"


def duration(seconds: float | None) -> str:
    """A duration with the unit that fits: ``2 ms``, ``41 s``, ``3 min``, ``5 h``, ``12 d``."""
    if seconds is None or _absent(seconds):
        return DASH
    s = float(seconds)
    sign = "-" if s < 0 else ""
    s = abs(s)
    if s < 1e-3:
        out = f"{s * 1e6:.0f} µs"
    elif s < 1:
        out = f"{s * 1e3:g} ms" if s * 1e3 == int(s * 1e3) else f"{s * 1e3:.1f} ms"
    elif s < 120:
        out = f"{s:.0f} s"
    elif s < 7200:
        out = f"{s / 60:.0f} min"
    elif s < 172800:
        out = f"{s / 3600:.0f} h"
    else:
        out = f"{s / 86400:.0f} d"
    return sign + out


def flag(value: bool | None, yes: str = "on", no: str = "off") -> str:
    return DASH if value is None else (yes if value else no)


def when(timestamp: float | None) -> str:
    """A Unix time as ``2026-01-01 00:00 UTC`` (UTC: hosts of a fleet sit in many zones)."""
    if timestamp is None or _absent(timestamp):
        return DASH
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


_LICENSE = {
    "unlicensed_restricted": "unlicensed (restricted)",
    "unlicensed_unrestricted": "unlicensed (full use)",
}
_EXPIRY = {"not_available": "n/a", "not_applicable": "n/a"}


def license_state(state: str | None) -> str:
    """NVML's license state in words; filters match the raw name (``unlicensed_restricted``)."""
    return DASH if state is None else _LICENSE.get(state, state)


_LICENSE_SHORT = {
    "unlicensed_restricted": "unlic (restr)",
    "unlicensed_unrestricted": "unlic (full)",
}


def license_short(state: str | None) -> str:
    """:func:`license_state` in at most 13 cells, for tables that must fit 80 columns."""
    return DASH if state is None else _LICENSE_SHORT.get(state, state)


# What a scheduler share verdict says (collect/starvation.py, docs/verdicts.md), in words: the two
# verdicts, and why there is none.
_SHARE_STATE = {
    "starved": "STARVED",
    "ok": "",
    "short_window": "no verdict: window too short",
    "missed_entries": "no verdict: log entries missed",
    "unknown_policy": "no verdict: policy unknown",
}


def share_state(state: str | None) -> str:
    """A vGPU's share verdict: STARVED, nothing when ok, else why there is no verdict."""
    return DASH if state is None else _SHARE_STATE.get(state, state)


def expiry_status(status: str | None) -> str:
    return DASH if status is None else _EXPIRY.get(status, status)


def vgpu_type(name: str | None) -> str:
    """A vGPU type without the vendor prefix every type carries (``L40S-8Q``)."""
    if name is None:
        return DASH
    return name.removeprefix("NVIDIA ").removeprefix("GRID ")


def bar(ratio: float | None, width: int) -> str:
    """A text gauge ``█████░░░░░`` of ``width`` cells; absent is a dashed gauge, not an empty one.

    Eighth-blocks give the last cell sub-cell resolution, so 40 % and 45 % differ on a 10-cell bar.
    """
    if width <= 0:
        return ""
    if ratio is None or _absent(ratio):
        return "╌" * width
    r = min(1.0, max(0.0, float(ratio)))
    eighths = round(r * width * 8)
    full, part = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[part] if part else ""
    body = "█" * full + partial
    return body + "░" * (width - len(body))
