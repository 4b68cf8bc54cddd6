"""NVML's shared library from a path: ``VGPUMON_NVML_LIBRARY``.

pynvml loads ``libnvidia-ml.so.1`` by that name from the dynamic linker's search path, which is
where the NVIDIA container toolkit puts it. Without the toolkit (a KubeVirt vGPU host, where the
Helm chart mounts the driver's root read-only) the library is elsewhere, and pointing
``LD_LIBRARY_PATH`` at the driver root's library directory would put the driver image's libc and
everything beside it ahead of the interpreter's own. Instead the one library is loaded by its
path before ``nvmlInit``: the dynamic linker then answers pynvml's ``libnvidia-ml.so.1`` with the
library already loaded under that soname, and nothing else changes.
"""

from __future__ import annotations

import ctypes
import os

from vgpumon.errors import one_line

ENV_LIBRARY = "VGPUMON_NVML_LIBRARY"

_loaded: set[str] = set()


class LibraryNotLoaded(OSError):
    """The library the variable names could not be loaded (absent yet, or not a library)."""


def preload(environ: dict[str, str] | None = None) -> str | None:
    """Load the library ``VGPUMON_NVML_LIBRARY`` names, once; the path, or None when unset.

    Raises :class:`LibraryNotLoaded` while it cannot be loaded (a driver container that has not
    mounted its root yet): the caller retries nvmlInit with its backoff, as for any driver fault.
    """
    path = (os.environ if environ is None else environ).get(ENV_LIBRARY, "")
    if not path or path in _loaded:
        return path or None
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise LibraryNotLoaded(
            f"cannot load {path} (from ${ENV_LIBRARY}): {one_line(exc)}"
        ) from exc
    _loaded.add(path)
    return path
