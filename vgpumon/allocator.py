"""glibc malloc settings for the long-running exporter (``vgpumon serve``).

Why: a render of a large host makes two bodies of megabytes, and the JSON API one more. glibc serves
such blocks with ``mmap`` and unmaps them when freed, but after the first one is freed it raises its
mmap threshold to that size (and the trim threshold to twice it): from then on the bodies come from
the heap, whose free space stays resident (docs/measurements.md). Fixing the threshold at glibc's
own starting value (128 KiB) turns the adjustment off, so large blocks go back to the system when
freed.

glibc also gives every thread that allocates its own arena (up to 8 per core); the sampler runs a
worker thread per GPU, and each arena keeps its free memory. Two arenas are enough: the GIL lets
one thread run Python at a time, so threads rarely allocate at the same moment.

An operator's own ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX`` wins: a setting given in the
environment is left as glibc read it. Other C libraries (musl) are left alone.

:func:`trim` is the other half, for the periodic housekeeping of a long-running process
(:mod:`vgpumon.export.housekeeping`): glibc gives freed heap memory back to the system only from
the top of the heap, so pages freed below a block still in use stay resident; ``malloc_trim(0)``
releases every whole free page, wherever it lies (``madvise(MADV_DONTNEED)``).
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
