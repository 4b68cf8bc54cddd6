"""Opaque handles that behave like the driver's: real ctypes pointers, stale after re-init.

pynvml hands out ``POINTER(struct_...)`` objects; code that ``bool()``s them, ``ctypes.cast``s them
or stores them in caller-allocated arrays (MIG enumeration) must work unchanged, so the simulator
allocates a small buffer per object and hands out pointers to it. The buffer's address is the key;
buffers are never freed while the simulator lives, so a stale handle can never alias a new one.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

Key = tuple[Any, ...]  # ("gpu", index), ("mig", index, gi, ci), ("gi", index, gi), ("ci", ...), ...


class HandleTable:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_addr: dict[int, tuple[int, Key]] = {}
        self._by_key: dict[tuple[int, Key], Any] = {}
        self._retired: set[int] = set()

    def issue(self, generation: int, key: Key, pointer_type: Any) -> Any:
        """A fresh pointer object to the (per generation) buffer of ``key``."""
        with self._lock:
            buf = self._by_key.get((generation, key))
            if buf is None:
                buf = ctypes.create_string_buffer(16)
                self._by_key[(generation, key)] = buf
                self._by_addr[ctypes.addressof(buf)] = (generation, key)
        return ctypes.cast(buf, pointer_type)

    def lookup(self, handle: Any) -> tuple[int, Key] | None:
        """(generation, key) of a handle this table issued and did not retire, else None."""
        if handle is None:
            return None
        if isinstance(handle, ctypes._Pointer):
            addr = ctypes.cast(handle, ctypes.c_void_p).value
        elif isinstance(handle, ctypes.c_void_p):
            addr = handle.value
        else:
            return None
        if addr is None or addr in self._retired:
            return None
        return self._by_addr.get(addr)

    def retire(self, handle: Any) -> None:
        """Invalidate one handle for good (a freed event set or GPM sample)."""
        if isinstance(handle, ctypes._Pointer):
            addr = ctypes.cast(handle, ctypes.c_void_p).value
            if addr is not None:
                with self._lock:
                    self._retired.add(addr)
