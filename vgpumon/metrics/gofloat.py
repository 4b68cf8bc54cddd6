"""Sample values as the Prometheus exposition writes them (Go's float formatting).

The same function as prometheus-client's ``floatToGoString`` (Apache-2.0, like vgpumon), kept here
so that ``serve`` never imports prometheus-client: importing any part of that package loads all of
it (its HTTP and WSGI servers, urllib, the parser), resident for the life of the exporter, for this
one function (docs/measurements.md). ``tests/metrics/test_gofloat.py`` holds it to the original.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from itertools import compress, repeat
from operator import ge

INF = float("inf")
MINUS_INF = float("-inf")
# From here up Go writes an exponent where Python's repr may write all the digits: up to here,
# for every finite value, Go writes what repr does.
EXPONENT_FROM = 1e6


def go_float(value: float) -> str:
    """``value`` as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` (what Prometheus writes)."""
    d = float(value)
    if MINUS_INF < d < EXPONENT_FROM:  # the common case (a NaN compares False)
        return repr(d)
    if d == INF:
        return "+Inf"
    if d == MINUS_INF:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    return _exponent(repr(d))


def _exponent(s: str) -> str:
    """The repr ``s`` of a finite value of at least ``EXPONENT_FROM``, as Go writes it."""
    dot = s.find(".")
    # Go switches to exponents sooner than Python (only positive values need it: le, quantile).
    if dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def go_floats(values: Iterable[float]) -> list[str]:
    """``[go_float(v) for v in values]``, with the common cases done in C, not value by value."""
    floats = list(map(float, values))
    if not math.isfinite(sum(floats)):  # an Inf or a NaN (or a sum past the largest double)
        return list(map(go_float, floats))
    packed = array("d", floats).tobytes()
    if packed == packed[:8] * len(floats):  # one value throughout, to the bit (flags, sizes)
        return [go_float(floats[0])] * len(floats) if floats else []
    texts = list(map(repr, floats))
    exponents: dict[float, str] = {}  # large values repeat (sizes, timestamps): each made once
    for i in compress(range(len(floats)), map(ge, floats, repeat(EXPONENT_FROM))):
        text = exponents.get(floats[i])
        if text is None:
            text = exponents[floats[i]] = _exponent(texts[i])
        texts[i] = text
    return texts
