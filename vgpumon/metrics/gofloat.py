"""Sample values as the Prometheus exposition writes them (Go's float formatting).

The same function as prometheus-client's ``floatToGoString`` (Apache-2.0, like vgpumon), kept here
so that ``serve`` never imports prometheus-client: importing any part of that package loads all of
it (its HTTP and WSGI servers, urllib, the parser), resident for the life of the exporter, for this
one function (docs/measurements.md). ``tests/export/test_gofloat.py`` holds it to the original.
"""

from __future__ import annotations

import math

INF = float("inf")
MINUS_INF = float("-inf")


def go_float(value: float) -> str:
    """``value`` as Go's ``strconv.FormatFloat(v, 'g', -1, 64)`` (what Prometheus writes)."""
    d = float(value)
    if d == INF:
        return "+Inf"
    if d == MINUS_INF:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    # Go switches to exponents sooner than Python (only positive values need it: le, quantile).
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s
