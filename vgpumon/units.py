"""The one grammar for numbers with units: scenario files, command-line flags and config files.

The same text means the same value everywhere, and what one place refuses every place refuses
(docs/design.md, rule 9). The grammar:

* **Sizes** (result: whole bytes, case-insensitive unit): ``B`` or no unit; ``K``, ``M``, ``G``,
  ``T`` and ``KiB``, ``MiB``, ``GiB``, ``TiB`` are binary (powers of 1024, as ``free -h``, docker
  and the CUDA load flags read them); ``KB``, ``MB``, ``GB``, ``TB`` are decimal (powers of 1000,
  as disk vendors write them). At most 2^50 bytes (1 PiB): no GPU memory or load footprint comes
  near it, so a larger figure is a typo, never a value to wrap around.
* **Durations** (result: seconds, units are lower case so ``m`` (minute) can never be read as
  ``M``): ``ns``, ``us`` (also ``µs``/``μs``), ``ms``, ``s``, ``m`` (or ``min``), ``h``, ``d``
  (24 h) and ``w`` (7 d), as Prometheus reads them (``--range 30d``); parts may be chained as in
  Go (``1m30s``, ``1w2d``); a bare number is in the caller's unit (seconds unless said). Go's own
  dialect (:func:`parse_go_duration`, for Prometheus' web-config files) stops at ``h``.
* **Frequencies** (result: hertz, case-insensitive): ``Hz``, ``kHz``, ``MHz``, ``GHz``; a bare
  number is in the caller's unit (MHz for GPU clocks, as NVML reports them).
* **Power** (watts: ``W``, ``mW``, ``kW``), **temperature** (°C: ``C``, ``°C``), **ratios**
  (``0.85`` or ``85%``) and **byte rates** (a size followed by ``/s``) for scenario files.

Numbers are decimal, with an optional fraction and exponent; ``inf``, ``nan`` and anything whose
scaled value is not finite are refused. Every parser raises :class:`UnitError` (a ConfigError, so
the CLI prints it as one line, and a ValueError, so table-driven validators can add key and line).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, TypeVar

from vgpumon.errors import ConfigError

MAX_BYTES = 2**50
T = TypeVar("T")

_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_VALUE_RE = re.compile(rf"^\s*({_NUMBER})\s*([A-Za-z%°µμ/]*)\s*$")

SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
DURATION_UNITS: dict[str, float] = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,  # U+00B5 MICRO SIGN
    "μs": 1e-6,  # U+03BC GREEK SMALL LETTER MU (what Go prints)
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
FREQUENCY_UNITS: dict[str, float] = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}
POWER_UNITS: dict[str, float] = {"W": 1.0, "w": 1.0, "mW": 1e-3, "kW": 1e3, "KW": 1e3}
TEMPERATURE_UNITS = ("c", "°c")

SIZE_HELP = "bytes or a unit such as 512MiB, 2G, 1.5GiB (binary) or 4GB (decimal)"
DURATION_HELP = "seconds or a unit such as 100us, 500ms, 30s, 2m, 1h, 1m30s, 1d, 2w"
FREQUENCY_HELP = "a frequency such as 1980MHz, 1.98GHz or 500kHz"

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|min|s|m|h|d|w)")
# Go's time.ParseDuration knows no days or weeks (Prometheus' web-config files are read by Go).
_GO_UNITS = frozenset({"ns", "us", "µs", "μs", "ms", "s", "m", "h"})


class UnitError(ConfigError, ValueError):
    """Text that is not a value of the expected kind; ``str()`` is the one-line reason.

    ``reason`` is the part after the quoted value ("must be at most 1 PiB ..."), so a validator
    that names key and line itself can reuse it; ``syntax`` is False for a well-formed value that
    is out of range (not finite, negative, too large).
    """

    def __init__(self, message: str, *, reason: str = "", syntax: bool = True) -> None:
        super().__init__(message)
        self.reason = reason or message
        self.syntax = syntax


def _split(value: Any, kind: str, help_text: str) -> tuple[float, str]:
    """(number, unit as written); YAML numbers and Python numbers have no unit."""
    if isinstance(value, bool):
        raise UnitError(f"bad {kind} {value!r}: use {help_text}")
    if isinstance(value, (int, float)):
        number = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
        unit = ""
    elif isinstance(value, str):
        match = _VALUE_RE.match(value)
        if match is None:
            raise UnitError(f"bad {kind} {value!r}: use {help_text}")
        number, unit = float(match.group(1)), match.group(2)
    else:
        raise UnitError(f"bad {kind} {value!r}: use {help_text}")
    if not math.isfinite(number):
        raise _out_of_range(value, kind, "not a finite number")
    return number, unit


def _finite(result: float, value: Any, kind: str) -> float:
    if not math.isfinite(result):
        raise _out_of_range(value, kind, "not a finite number")
    return result


def _out_of_range(value: Any, kind: str, reason: str) -> UnitError:
    return UnitError(f"bad {kind} {value!r}: {reason}", reason=reason, syntax=False)


def check_range(
    result: float, value: Any, kind: str, lo: float | None, hi: float | None, unit: str = ""
) -> float:
    """``result`` within [lo, hi] (either bound optional), else a UnitError quoting the input."""
    if lo is not None and result < lo:
        raise _out_of_range(value, kind, f"must be at least {lo:g}{unit}")
    if hi is not None and result > hi:
        raise _out_of_range(value, kind, f"must be at most {hi:g}{unit}")
    return result


def parse_size(value: Any, *, hi: int = MAX_BYTES) -> int:
    """Whole bytes (rounded); never negative, at most ``hi`` (2^50 unless the caller says less)."""
    number, unit = _split(value, "size", SIZE_HELP)
    scale = SIZE_UNITS.get(unit.lower())
    if scale is None:
        raise UnitError(f"bad size {value!r}: use {SIZE_HELP}")
    result = _finite(number * scale, value, "size")
    if result > hi:
        limit = "1 PiB (2^50 bytes)" if hi == MAX_BYTES else f"{hi} bytes"
        raise _out_of_range(value, "size", f"must be at most {limit}")
    check_range(result, value, "size", 0, None, " bytes")
    return round(result)


def parse_duration(
    value: Any, *, bare_unit: str = "s", lo: float | None = 0.0, hi: float | None = None
) -> float:
    """Seconds; a bare number is in ``bare_unit``; parts may chain (``1h30m``). Never negative
    unless the caller lowers ``lo``."""
    if isinstance(value, str) and _VALUE_RE.match(value) is None:
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        total = _chained(text[1:] if text[:1] in "+-" else text)
        if total is None:
            raise UnitError(f"bad duration {value!r}: use {DURATION_HELP}")
        result = _finite(sign * total, value, "duration")
    else:
        number, unit = _split(value, "duration", DURATION_HELP)
        scale = DURATION_UNITS.get(unit or bare_unit)
        if scale is None:
            raise UnitError(f"bad duration {value!r}: use {DURATION_HELP}")
        result = _finite(number * scale, value, "duration")
    return check_range(result, value, "duration", lo, hi, " s")


def _chained(text: str, units: frozenset[str] | None = None) -> float | None:
    pos, total = 0, 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if match is None or (units is not None and match.group(2) not in units):
            return None
        total += float(match.group(1)) * DURATION_UNITS[match.group(2)]
        pos = match.end()
    return total


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` dialect of the grammar (Prometheus' web-config files): every
    part needs a unit, no spaces, ``0`` alone is zero."""
    sign, body = 1.0, text
    if body[:1] in ("+", "-"):
        sign, body = (-1.0 if body[0] == "-" else 1.0), body[1:]
    if body == "0":
        return 0.0
    total = _chained(body, _GO_UNITS) if body and body[-1].isalpha() else None
    if total is None or "min" in body:
        raise UnitError(f'invalid duration {text!r} (e.g. "1s", "500ms", "1m30s")')
    return _finite(sign * total, text, "duration")


def parse_frequency(value: Any, *, bare_unit: str = "MHz") -> float:
    """Hertz; a bare number is in ``bare_unit``. Never negative."""
    number, unit = _split(value, "frequency", FREQUENCY_HELP)
    scale = FREQUENCY_UNITS.get((unit or bare_unit).lower())
    if scale is None:
        raise UnitError(f"bad frequency {value!r}: use {FREQUENCY_HELP}")
    result = _finite(number * scale, value, "frequency")
    return check_range(result, value, "frequency", 0, None)


def parse_watts(value: Any) -> float:
    """Watts; a bare number is watts. ``MW`` is refused: megawatts are never meant, ``mW`` is."""
    number, unit = _split(value, "power", 'a power such as "700W" or "350000mW"')
    scale = 1.0 if not unit else POWER_UNITS.get(unit)
    if scale is None:
        raise UnitError(f'bad power {value!r}: use a power such as "700W" or "350000mW"')
    return _finite(number * scale, value, "power")


def parse_celsius(value: Any) -> float:
    number, unit = _split(value, "temperature", "a temperature in °C such as 56")
    if unit and unit.lower() not in TEMPERATURE_UNITS:
        raise UnitError(f"bad temperature {value!r}: use a temperature in °C such as 56")
    return number


def _fraction(value: Any) -> float:
    number, unit = _split(value, "fraction", 'a fraction such as 0.85 or a percentage like "85%"')
    if unit == "%":
        return number / 100.0
    if unit:
        raise UnitError(f'bad fraction {value!r}: use a fraction such as 0.85 or "85%"')
    return number


def parse_ratio(value: Any) -> float:
    """A fraction in [0, 1]; ``85%`` is 0.85 (outside the range is not a fraction at all)."""
    number = _fraction(value)
    if number > 1.0 and not str(value).strip().endswith("%"):
        raise UnitError(f"bad fraction {value!r}: above 1; write 0.5 or 50% for half")
    if not 0.0 <= number <= 1.0:
        raise UnitError(f"bad fraction {value!r}: use a number from 0 to 1 or a percentage")
    return number


def parse_percent_open(value: Any) -> float:
    """A fraction that may exceed 1 (fan speeds are % of a nominal maximum and can pass 100)."""
    number = _fraction(value)
    if number < 0:
        raise UnitError(f"bad fraction {value!r}: must not be negative")
    return number


def parse_byte_rate(value: Any) -> float:
    """Bytes per second: ``3MiB/s`` or a bare number of bytes per second."""
    if isinstance(value, str) and value.strip().endswith("/s"):
        return float(parse_size(value.strip()[:-2]))
    if isinstance(value, (str, bool)):
        raise UnitError(f'bad rate {value!r}: use a rate such as "3MiB/s"')
    return float(parse_size(value))


def parse_number(value: Any) -> float:
    """A plain finite number, no unit."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UnitError(f"bad number {value!r}")
    number, _unit = _split(value, "number", "a number")
    return number


def for_flag(flag: str, parser: Callable[..., T], text: Any, **bounds: Any) -> T:
    """``parser(text)`` with the flag's name in front of any refusal (``--duty: bad fraction``)."""
    try:
        return parser(text, **bounds)
    except UnitError as err:
        raise UnitError(f"{flag}: {err}", reason=err.reason, syntax=err.syntax) from None


def format_bytes(n: int) -> str:
    """The inverse for people: the largest binary unit that keeps the number at least 1."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B"
