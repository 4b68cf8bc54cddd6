"""nvidia-smi's printed values -> vgpumon's base units (bytes, hertz, watts, ratios, Celsius).

nvidia-smi prints every value as text with a unit (``8191 MiB``, ``135 MHz``, ``37 C``, ``7 %``)
or a placeholder where NVML gave nothing. Each function here returns ``None`` for a placeholder or
for text it cannot read, so a field nvidia-smi did not report is absent rather than 0.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

# Placeholders nvidia-smi prints instead of a value (brackets and case vary between drivers).
_ABSENT = frozenset(
    {
        "n/a",
        "not supported",
        "not available",
        "insufficient permissions",
        "unknown error",
        "gpu is lost",
        "",
    }
)
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z/%]*)\s*$")
_BYTES = {"b": 1, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "kb": 1000, "mb": 1000**2}
_HERTZ = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}


def element_text(element: ET.Element | None, path: str | None = None) -> str | None:
    """The stripped text at ``path`` under ``element``; None when missing or a placeholder."""
    if element is None:
        return None
    node = element.find(path) if path else element
    if node is None or node.text is None:
        return None
    value = node.text.strip()
    if value.strip("[]").strip().lower() in _ABSENT:
        return None
    return value


def subtree(element: ET.Element | None, path: str) -> ET.Element | None:
    """The element at ``path`` when it is a subtree; None when it is missing or a placeholder
    where a subtree belongs (``<processes>N/A</processes>``: unknown, not empty)."""
    node = element.find(path) if element is not None else None
    if node is None:
        return None
    if len(node) == 0 and (node.text or "").strip() and element_text(node) is None:
        return None
    return node


def _number(value: str | None) -> tuple[float, str] | None:
    if value is None:
        return None
    match = _NUMBER.match(value)
    if match is None:
        return None
    return float(match.group(1)), match.group(2).lower()


def number(element: ET.Element | None, path: str | None = None) -> float | None:
    got = _number(element_text(element, path))
    return None if got is None else got[0]


def integer(element: ET.Element | None, path: str | None = None) -> int | None:
    got = number(element, path)
    return None if got is None else int(got)


def size_bytes(element: ET.Element | None, path: str | None = None) -> int | None:
    got = _number(element_text(element, path))
    if got is None or got[1] not in _BYTES:
        return None
    return int(got[0] * _BYTES[got[1]])


def hertz(element: ET.Element | None, path: str | None = None) -> float | None:
    got = _number(element_text(element, path))
    if got is None or got[1] not in _HERTZ:
        return None
    return got[0] * _HERTZ[got[1]]


def ratio(element: ET.Element | None, path: str | None = None) -> float | None:
    """``7 %`` -> 0.07."""
    got = _number(element_text(element, path))
    if got is None or got[1] != "%":
        return None
    return got[0] / 100.0


def watts(element: ET.Element | None, path: str | None = None) -> float | None:
    got = _number(element_text(element, path))
    return None if got is None or got[1] != "w" else got[0]


def celsius(element: ET.Element | None, path: str | None = None) -> float | None:
    got = _number(element_text(element, path))
    return None if got is None or got[1] != "c" else got[0]


def seconds_from_us(element: ET.Element | None, path: str | None = None) -> float | None:
    """An encoder/FBC latency (printed in microseconds, without a unit) in seconds."""
    got = number(element, path)
    return None if got is None else got / 1e6


def enabled(element: ET.Element | None, path: str | None = None) -> bool | None:
    """``Enabled``/``Disabled`` (also ``Yes``/``No``, ``Active``/``Not Active``) -> bool."""
    value = element_text(element, path)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("enabled", "yes", "active", "on", "true"):
        return True
    if lowered in ("disabled", "no", "not active", "off", "false"):
        return False
    return None


def link_width(element: ET.Element | None, path: str | None = None) -> int | None:
    """``16x`` -> 16."""
    value = element_text(element, path)
    if value is None or not value.lower().endswith("x"):
        return None
    digits = value[:-1].strip()
    return int(digits) if digits.isdigit() else None


def pstate(element: ET.Element | None, path: str | None = None) -> int | None:
    """``P8`` -> 8."""
    value = element_text(element, path)
    if value is None or not value.upper().startswith("P") or not value[1:].isdigit():
        return None
    return int(value[1:])
