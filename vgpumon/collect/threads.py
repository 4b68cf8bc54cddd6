"""The sampler's daemon threads, named for the operating system too.

Python names a thread only inside the interpreter; ``top -H``, ``ps -L``, ``pidstat -t`` and the
benchmark's per-thread CPU split (``bench/exporter_cost.py``) read the kernel's name, which stays
the interpreter's (``python3``) for every thread. A thread started here writes its own name
(without the ``vgpumon-`` prefix, cut to the kernel's 15 bytes: ``gpu3``, ``xid``,
``schedlog-GPU-1a``) to ``/proc/self/task/<tid>/comm`` before it runs its target, so an operator
who sees the exporter busy can tell the per-GPU worker from the Xid watcher or an enricher.
Best effort: on systems without that file the name is simply not set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

PREFIX = "vgpumon-"
KERNEL_NAME_BYTES = 15  # TASK_COMM_LEN less the terminating NUL


def kernel_name(name: str) -> str:
    """The name as the kernel keeps it: no ``vgpumon-`` prefix, at most 15 bytes of ASCII."""
    short = name.removeprefix(PREFIX) or name
    return short.encode("ascii", "replace")[:KERNEL_NAME_BYTES].decode("ascii")


def name_current_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel (best effort, never raises)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as comm:
            comm.write(kernel_name(name))
    except OSError:
        pass


def daemon_thread(
    target: Callable[..., Any], name: str, args: tuple[Any, ...] = ()
) -> threading.Thread:
    """A daemon thread (not started) that names itself for the kernel, then runs ``target``."""

    def run(*call_args: Any) -> None:
        name_current_thread(name)
        target(*call_args)

    return threading.Thread(target=run, name=name, args=args, daemon=True)
