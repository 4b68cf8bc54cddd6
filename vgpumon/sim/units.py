"""Parsing of the unit-carrying values scenario files use ("80GiB", "100ms", "700W", "85%").

Each parser takes the raw YAML value and returns the base-unit number or raises ``ValueError``; the
schema turns that into a ConfigError that names the key and line. Bare numbers are accepted in the
unit stated by each parser so hand-written files stay short.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_NUMBER = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)"
_UNIT_RE = re.compile(rf"^\s*{_NUMBER}\s*([A-Za-z%/°]*)\s*$")

SIZE_UNITS = {
    "": 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 2**10,
    "MIB": 2**20,
    "GIB": 2**30,
    "TIB": 2**40,
}
DURATION_UNITS = {"": 1.0, "US": 1e-6, "MS": 1e-3, "S": 1.0, "M": 60.0, "MIN": 60.0, "H": 3600.0}
POWER_UNITS = {"": 1.0, "W": 1.0, "MW": 1e-3, "KW": 1e3}
FREQ_UNITS = {"": 1.0, "MHZ": 1.0, "GHZ": 1e3, "KHZ": 1e-3}
TEMP_UNITS = {"": 1.0, "C": 1.0, "°C": 1.0}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _split(value: Any) -> tuple[float, str]:
    if _is_number(value):
        return float(value), ""
    if not isinstance(value, str):
        raise ValueError
    m = _UNIT_RE.match(value)
    if not m:
        raise ValueError
    return float(m.group(1)), m.group(2)


def _scaled(value: Any, units: dict[str, float] | dict[str, int], upper: bool = True) -> float:
    number, unit = _split(value)
    key = unit.upper() if upper else unit
    if key not in units:
        raise ValueError
    return number * units[key]


def parse_size(value: Any) -> int:
    """Bytes; bare numbers are bytes. "GB" is 10^9 and "GiB" 2^30, as everywhere else."""
    number, unit = _split(value)
    key = unit.upper()
    if key not in SIZE_UNITS:
        raise ValueError
    result = number * SIZE_UNITS[key]
    if result < 0:
        raise ValueError
    return round(result)


def parse_duration(value: Any) -> float:
    """Seconds; bare numbers are seconds."""
    # "m" is minutes and "ms" milliseconds; compare case-sensitively for the one clash ("M" vs "m").
    number, unit = _split(value)
    if unit in ("MS", "Ms"):
        raise ValueError
    key = unit.upper()
    if key not in DURATION_UNITS:
        raise ValueError
    return number * DURATION_UNITS[key]


def parse_watts(value: Any) -> float:
    number, unit = _split(value)
    if unit == "MW":  # megawatts are never meant; "mW" is
        raise ValueError
    key = "MW" if unit == "mW" else unit.upper()
    if key not in POWER_UNITS:
        raise ValueError
    return number * POWER_UNITS[key]


def parse_mhz(value: Any) -> float:
    return _scaled(value, FREQ_UNITS)


def parse_celsius(value: Any) -> float:
    return _scaled(value, TEMP_UNITS)


def parse_ratio(value: Any) -> float:
    """A fraction in [0, 1]; "85%" is 0.85."""
    number, unit = _split(value)
    if unit == "%":
        number /= 100.0
    elif unit != "":
        raise ValueError
    if not 0.0 <= number <= 1.0:
        raise ValueError
    return number


def parse_percent_open(value: Any) -> float:
    """A fraction that may exceed 1 (fan speeds are % of a nominal maximum and can pass 100)."""
    number, unit = _split(value)
    if unit == "%":
        number /= 100.0
    elif unit != "":
        raise ValueError
    if number < 0:
        raise ValueError
    return number


def parse_byte_rate(value: Any) -> float:
    """Bytes per second; "3MiB/s" or a bare number of bytes per second."""
    if _is_number(value):
        if value < 0:
            raise ValueError
        return float(value)
    if not isinstance(value, str) or not value.strip().endswith("/s"):
        raise ValueError
    return float(parse_size(value.strip()[:-2]))


def parse_plain_number(value: Any) -> float:
    if not _is_number(value):
        raise ValueError
    return float(value)


# name -> (parser, how the expectation is phrased in error messages)
UNIT_PARSERS: dict[str, tuple[Callable[[Any], float], str]] = {
    "size": (lambda v: float(parse_size(v)), 'a size like "80GiB"'),
    "duration": (parse_duration, 'a duration like "10s" or "200ms"'),
    "watts": (parse_watts, 'a power like "700W"'),
    "mhz": (parse_mhz, 'a frequency like "1980MHz"'),
    "celsius": (parse_celsius, "a temperature in °C like 56"),
    "ratio": (parse_ratio, 'a fraction in [0, 1] or a percentage like "85%"'),
    "percent_open": (parse_percent_open, 'a fraction or a percentage like "45%"'),
    "byte_rate": (parse_byte_rate, 'a rate like "3MiB/s"'),
    "number": (parse_plain_number, "a number"),
}
