"""Known CUDA load for checking readings: ``vgpumon load`` and the API ``vgpumon validate`` uses.

:class:`LoadSpec` says what to run; :class:`LoadRunner` runs it in worker processes (their PIDs are
what NVML attributes the load to) and can step it through a ladder without restarting. Importing
this package needs no CUDA; only the workers import cuda-core (the ``[load]`` extra).
"""

from __future__ import annotations

from vgpumon.loadgen.runner import LoadRunner, WorkerInfo, cuda_core_installed
from vgpumon.loadgen.spec import KERNELS, LoadSpec, blocks_for, memory_shares

__all__ = [
    "KERNELS",
    "LoadRunner",
    "LoadSpec",
    "WorkerInfo",
    "blocks_for",
    "cuda_core_installed",
    "memory_shares",
]
