"""What load to run: the :class:`LoadSpec` and the arithmetic that turns it into launches.

Everything here is pure Python (no CUDA import), so the CLI can reject a bad request before any
process is started and the rules can be tested on machines without a GPU.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from vgpumon.errors import ConfigError
from vgpumon.units import format_bytes

KERNELS = ("spin", "tensor", "stream")
"""``spin``: a clock64 busy loop (SM busy, no memory traffic, no tensor work); ``tensor``: the same
loop issuing ``mma.sync`` f16→f32 tensor-core instructions; ``stream``: the same loop reading and
writing the footprint buffer (DRAM traffic)."""

MIN_STREAM_BYTES = 256 * 1024**2
"""The stream kernel walks the footprint buffer; below this it would stay in L2 (50-60 MB on Hopper)
and not reach DRAM."""

MAX_WARPS_PER_BLOCK = 32  # 1024 threads, the CUDA limit for one block
MIN_PERIOD_S = 0.001
MAX_PERIOD_S = 60.0

_UUID_RE = re.compile(
    r"^(GPU-[0-9a-fA-F-]{8,}|MIG-[0-9a-fA-F-]{8,}|MIG-GPU-[0-9a-fA-F-]{8,}/\d+/\d+)$"
)


@dataclass(frozen=True)
class LoadSpec:
    """A load to run, for ``vgpumon load`` and ``vgpumon validate``.

    ``duty``: fraction of each period a kernel runs (0 = hold the footprint, launch nothing).
    ``sm_fraction``: fraction of the device's SMs given one block each (see :func:`blocks_for`).
    ``memory_bytes``: footprint of plain device allocations, **in total across all processes**
    (each process holds an equal share, see :func:`memory_shares`), beyond the CUDA context that
    every process pays anyway. ``duration_s``: ``None`` runs until stopped. ``device``: CUDA index
    (as this process's CUDA numbers it), ``GPU-<uuid>`` or ``MIG-<uuid>``. ``processes``: worker
    processes, each running the whole duty/SM pattern on its own CUDA context (they time-slice the
    GPU, so their busy time does not add up beyond 1).
    """

    duty: float = 1.0
    sm_fraction: float = 1.0
    memory_bytes: int = 0
    kernel: str = "spin"
    duration_s: float | None = None
    device: str = "0"
    processes: int = 1
    period_s: float = 0.1
    warps_per_block: int = 1

    def validate(self) -> LoadSpec:
        """Raise :class:`ConfigError` with a one-line reason if the spec cannot run; return self."""
        _check_fraction("duty", self.duty, allow_zero=True)
        _check_fraction("SM fraction", self.sm_fraction, allow_zero=False)
        if self.kernel not in KERNELS:
            raise ConfigError(f"unknown kernel {self.kernel!r}: choose one of {', '.join(KERNELS)}")
        if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int):
            raise ConfigError(f"memory must be a whole number of bytes, got {self.memory_bytes!r}")
        if self.memory_bytes < 0:
            raise ConfigError(f"memory must not be negative, got {self.memory_bytes}")
        if isinstance(self.processes, bool) or not isinstance(self.processes, int):
            raise ConfigError(f"processes must be a whole number, got {self.processes!r}")
        if not 1 <= self.processes <= 64:
            raise ConfigError(f"processes must be between 1 and 64, got {self.processes}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and self.duration_s > 0
        ):
            raise ConfigError(
                f"duration must be a positive number of seconds, got {self.duration_s}"
            )
        if not (math.isfinite(self.period_s) and MIN_PERIOD_S <= self.period_s <= MAX_PERIOD_S):
            raise ConfigError(
                f"period must be between {MIN_PERIOD_S * 1000:g} ms and {MAX_PERIOD_S:g} s, "
                f"got {self.period_s:g} s"
            )
        if isinstance(self.warps_per_block, bool) or not isinstance(self.warps_per_block, int):
            raise ConfigError(
                f"warps per block must be a whole number, got {self.warps_per_block!r}"
            )
        if not 1 <= self.warps_per_block <= MAX_WARPS_PER_BLOCK:
            raise ConfigError(
                f"warps per block must be between 1 and {MAX_WARPS_PER_BLOCK}, "
                f"got {self.warps_per_block}"
            )
        if self.kernel == "stream":
            share = min(memory_shares(self.memory_bytes, self.processes))
            if share < MIN_STREAM_BYTES:
                raise ConfigError(
                    "the stream kernel walks the memory footprint and needs at least "
                    f"{format_bytes(MIN_STREAM_BYTES)} per process (to reach DRAM past the L2 "
                    f"cache); got {format_bytes(share)}: raise --memory"
                )
        parse_device(self.device)
        return self

    @property
    def threads_per_block(self) -> int:
        return self.warps_per_block * 32

    def with_changes(self, **changes: Any) -> LoadSpec:
        """A validated copy with some fields replaced (how a validate ladder steps its loads)."""
        return replace(self, **changes).validate()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LoadSpec:
        known = {f: data[f] for f in cls.__dataclass_fields__ if f in data}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown load spec field(s): {', '.join(unknown)}")
        return cls(**known).validate()


# ------------------------------------------------------------------------------- launch geometry


def blocks_for(sm_fraction: float, sm_count: int) -> int:
    """Blocks for a target SM fraction: one block per SM, ``round(fraction × SMs)``, at least 1.

    One small block per SM is what makes GPM SM utilization read duty × fraction: the block
    scheduler spreads a single wave of blocks over distinct SMs. Halves round up (66.5 → 67) so the
    result does not depend on banker's rounding.
    """
    if sm_count < 1:
        raise ConfigError(f"device reports {sm_count} SMs")
    _check_fraction("SM fraction", sm_fraction, allow_zero=False)
    return max(1, min(sm_count, math.floor(sm_fraction * sm_count + 0.5)))


def memory_shares(total_bytes: int, processes: int) -> list[int]:
    """Split the total footprint evenly over the processes; rank 0 takes the remainder."""
    if processes < 1:
        raise ConfigError(f"processes must be at least 1, got {processes}")
    base, rest = divmod(max(0, total_bytes), processes)
    return [base + rest] + [base] * (processes - 1)


# ------------------------------------------------------------------------------------- devices


def parse_device(device: str) -> str:
    """Check a device selector: CUDA index, ``GPU-…``, ``MIG-…`` or ``MIG-GPU-…/gi/ci``."""
    text = str(device).strip()
    if text.isdigit():
        return str(int(text))
    if _UUID_RE.match(text):
        return text
    raise ConfigError(
        f"bad device {device!r}: give a CUDA index (0, 1, …), a GPU UUID (GPU-…) "
        "or a MIG UUID (MIG-…)"
    )


def visible_devices_for(device: str, inherited: str | None) -> str:
    """The ``CUDA_VISIBLE_DEVICES`` a worker gets so that its device 0 is the requested device.

    Selecting by environment is what works for every kind of device (a MIG device cannot be picked
    by ordinal in a process that sees the whole GPU). A UUID is passed through. An index is resolved
    against the caller's own ``CUDA_VISIBLE_DEVICES`` when one is set, so "device 1" means the same
    GPU to the worker as to the caller; the worker inherits ``CUDA_DEVICE_ORDER`` too.
    """
    selector = parse_device(device)
    if not selector.isdigit():
        return selector
    if inherited is None or inherited.strip() == "":
        return selector
    entries = [e.strip() for e in inherited.split(",") if e.strip()]
    index = int(selector)
    if index >= len(entries):
        raise ConfigError(
            f"device {index} is not visible: CUDA_VISIBLE_DEVICES={inherited!r} lists "
            f"{len(entries)} device(s)"
        )
    return entries[index]


def _check_fraction(name: str, value: float, *, allow_zero: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{name} must be a number between 0 and 1, got {value!r}")
    low_ok = value >= 0.0 if allow_zero else value > 0.0
    if not (low_ok and value <= 1.0):
        bound = "between 0 and 1" if allow_zero else "above 0 and at most 1"
        raise ConfigError(f"{name} must be {bound}, got {value:g}")
