"""What the sampler keeps per GPU across cycles (:class:`GpuSlot`), what one GPU job and the
system phase hand back, and what a down or hung GPU keeps of its identity."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vgpumon.collect.base import GpuBuilder
from vgpumon.collect.workers import Worker
from vgpumon.model import DriverInfo, Gpu

log = logging.getLogger(__name__)

RETRY_INITIAL_SECONDS = 1.0
RETRY_MAX_SECONDS = 60.0


@dataclass
class GpuSlot:
    """A GPU the sampler knows about, across cycles (keyed by UUID: handles are unhashable)."""

    index: int
    uuid: str
    handle: Any
    worker: Worker
    state: dict[str, Any] = field(default_factory=dict)
    down_reason: str | None = None
    retry_at: float = 0.0
    retry_delay: float = RETRY_INITIAL_SECONDS
    last: Gpu | None = None
    progress: JobProgress | None = None  # the job running now
    # A worker left behind inside one collector's hung call, and that collector: while it is
    # stuck the GPU is read by a fresh worker without it (see Sampler._abandon_collector).
    detached: Worker | None = None
    stuck_reader: str | None = None
    wall: float | None = None  # seconds the last job that was not abandoned took


@dataclass
class JobProgress:
    """How far one GPU job got: what the cycle can still use if one collector hangs."""

    out: GpuBuilder
    timings: dict[str, float]
    failed: set[str]
    reader: str | None = None  # the collector running now
    abandoned: bool = False  # the cycle went on without this job
    # The worker's count of NVML calls that came back, and its value when the job began.
    returned: Callable[[], int] = lambda: 0
    returned_at_start: int = 0

    def answered(self) -> bool:
        """Some NVML call of this job came back: the GPU answers (a hang is one collector's)."""
        return self.returned() > self.returned_at_start


@dataclass
class GpuResult:
    gpu: Gpu
    timings: dict[str, float]
    failed: set[str]
    library_down: bool = False


@dataclass
class SystemResult:
    driver: DriverInfo
    up: bool
    error: str | None = None
    gpus_counted: int | None = None  # nvmlDeviceGetCount's answer


# What a down or hung GPU keeps from when it last answered: its identity. These are the labels of
# vgpumon_gpu_info; dropping any of them while the GPU is down would make Prometheus see a new
# series (and lose the old one) exactly when an operator needs to know which board it is.
IDENTITY_FIELDS = ("name", "pci_bus_id", "serial", "brand", "architecture", "compute_capability")


def identity_only(slot: GpuSlot, reason: str | None) -> Gpu:
    last = slot.last
    identity = {f: getattr(last, f) for f in IDENTITY_FIELDS} if last is not None else {}
    return Gpu(index=slot.index, uuid=slot.uuid, up=False, down_reason=reason, **identity)


def release_state(slot: GpuSlot) -> None:
    """Free what readers keep per GPU (GPM sample buffers): the GPU is gone or being re-acquired."""
    for value in list(slot.state.values()):
        close = getattr(value, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                log.exception("releasing reader state of %s failed", slot.uuid)
    slot.state.clear()
