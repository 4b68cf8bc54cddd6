"""glibc malloc settings for the long-running exporter (``vgpumon serve``).

:func:`tune` (before any thread starts) fixes the mmap threshold at glibc's starting value, so
large bodies go back to the system when freed, and caps the arenas at two, as the GIL keeps
threads from allocating at the same moment; an operator's own ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_ARENA_MAX`` wins, and other C libraries (musl) are left alone. :func:`trim` is
``malloc_trim(0)`` for the periodic housekeeping (:mod:`vgpumon.export.housekeeping`). Why:
docs/exporter.md, "Memory".
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

# mallopt() parameters, from glibc's malloc.h.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's default start; fixed, it no longer moves up
ARENA_MAX = 2

# parameter -> (value, the environment variable that sets it instead)
SETTINGS = {
    M_MMAP_THRESHOLD: (MMAP_THRESHOLD_BYTES, "MALLOC_MMAP_THRESHOLD_"),
    M_ARENA_MAX: (ARENA_MAX, "MALLOC_ARENA_MAX"),
}


def is_glibc() -> bool:
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        return False
    return version is not None and version.startswith("glibc")


def tune(environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """Apply :data:`SETTINGS` not given in ``environ``; returns what was set, by variable name.

    Call it before the threads start: an arena limit applies to arenas created afterwards.
    """
    if not is_glibc():
        return {}
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return {}
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    applied: dict[str, int] = {}
    for param, (value, variable) in SETTINGS.items():
        if variable in environ:
            continue
        if mallopt(param, value) == 1:  # mallopt returns 1 on success
            applied[variable] = value
    return applied


def trim() -> bool:
    """``malloc_trim(0)``: give whole free heap pages back to the system; a no-op off glibc.

    Returns whether glibc released any memory (False also where there is no glibc, or no
    ``malloc_trim`` in it).
    """
    if not is_glibc():
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes = (ctypes.c_size_t,)
    malloc_trim.restype = ctypes.c_int
    return bool(malloc_trim(0))
