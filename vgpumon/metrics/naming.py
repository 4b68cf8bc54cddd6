"""The metric naming rules (docs/exporter.md, "Metric naming rules") as code, in one place.

The metric table's tests check every built-in family against :func:`name_problem`, and the serve
config checks the families an operator declares (``fields:``, :mod:`vgpumon.config.fields`)
against the same function, so a configured name cannot break a rule the table keeps. A leaf
module: the config reader imports it without the metric table's machinery.
"""

from __future__ import annotations

import re

NAMESPACE = "vgpumon"
GAUGE, COUNTER = "gauge", "counter"
TYPES = (GAUGE, COUNTER)
# Unit suffixes, longest first so that "_bytes_per_second" wins over "_second(s)".
UNITS = (
    "bytes_per_second",
    "byte_seconds",  # memory held over time (metering): bytes x seconds
    "bytes",
    "seconds",
    "celsius",
    "watts",
    "hertz",
    "joules",
    "ratio",
)
NAME_RE = re.compile(rf"{NAMESPACE}_[a-z0-9]+(_[a-z0-9]+)*")
# Words that betray a non-base unit or a percentage (rule 2: base units and ratios).
NON_BASE_UNITS = frozenset(
    {
        "percent",
        "percentage",
        "pct",
        "ms",
        "milliseconds",
        "microseconds",
        "us",
        "ns",
        "mib",
        "mb",
        "gib",
        "gb",
        "kib",
        "kb",
        "mhz",
        "khz",
        "ghz",
        "mw",
        "kilowatts",
        "millijoules",
        "fahrenheit",
        "kelvin",
        "minutes",
        "hours",
        "days",
        "sec",
    }
)
# Suffixes OpenMetrics gives the samples of other types (histograms, summaries, gauge
# histograms, counters' creation time): a gauge or counter family named so reads as a part of
# another family in a parser.
RESERVED_SUFFIXES = ("_created", "_bucket", "_count", "_sum", "_gcount", "_gsum")


def unit_of(name: str) -> str:
    """The base unit a name ends in (``_total`` set aside), or "" for a count, flag or state."""
    base = name[: -len("_total")] if name.endswith("_total") else name
    return next((u for u in UNITS if base.endswith("_" + u)), "")


def base_name(name: str, type_: str) -> str:
    """The family name OpenMetrics uses: a counter's name without ``_total``."""
    return name[: -len("_total")] if type_ == COUNTER and name.endswith("_total") else name


def name_problem(name: str, type_: str, *, info: bool = False) -> str | None:
    """Why ``name`` breaks a naming rule for a family of ``type_``, or None when it keeps them.

    ``info``: a family of descriptive labels with the value 1 (rule 5), the only kind whose name
    ends in ``_info``.
    """
    if type_ not in TYPES:
        return f"type must be {' or '.join(TYPES)}, got {type_!r}"
    if not NAME_RE.fullmatch(name):
        return f"must start with {NAMESPACE}_ and be snake case ([a-z0-9] words joined by _)"
    words = set(name.split("_"))
    bad = sorted(words & NON_BASE_UNITS)
    if bad:
        return f"{bad[0]!r} is not a base unit (use bytes, seconds, hertz, watts, ratio, ...)"
    if name.endswith("_total") != (type_ == COUNTER):
        return "counters end in _total, and only counters do"
    if name.endswith("_info") != info:
        return "only info families (descriptive labels, value 1) end in _info"
    base = base_name(name, type_)
    reserved = next((s for s in RESERVED_SUFFIXES if base.endswith(s)), None)
    if reserved is not None:
        return f"{reserved} is a suffix OpenMetrics reserves for other metric types"
    unit = unit_of(name)
    if unit == "ratio" and type_ != GAUGE:
        return "a _ratio is a gauge"
    if unit == "joules" and type_ != COUNTER:
        return "energy is a counter (_joules_total)"
    return None
