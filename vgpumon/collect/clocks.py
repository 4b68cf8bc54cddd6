"""Current and maximum clocks, and why the clocks are held down (clock event reasons).

Value classes: current clocks and active reasons are dynamic (every cycle); maximum clocks and the
supported-reasons mask are static (read once per attach and after a re-init).

The event-reason getters are the R535+ names; older drivers (and modules) only have the deprecated
"throttle reason" symbols, which return the same bits, so those are the fallback.
"""

from __future__ import annotations

from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext
from vgpumon.model import ClockEvents, Clocks
from vgpumon.nvml.enums import CLOCK_EVENT_REASONS

# nvmlClockType_t
CLOCK_TYPES = {"graphics": 0, "sm": 1, "memory": 2, "video": 3}


def _hertz(mhz: Any) -> float | None:
    if mhz is None or isinstance(mhz, bool) or not isinstance(mhz, (int, float)):
        return None
    return float(mhz) * 1e6


def _clocks(ctx: GpuContext, function: str) -> Clocks:
    values = {
        name: _hertz(ctx.call(function, ctx.handle, clock_type, key=clock_type))
        for name, clock_type in CLOCK_TYPES.items()
    }
    return Clocks(
        graphics_hertz=values["graphics"],
        sm_hertz=values["sm"],
        memory_hertz=values["memory"],
        video_hertz=values["video"],
    )


def _max_clocks(ctx: GpuContext) -> Clocks | None:
    clocks = _clocks(ctx, "nvmlDeviceGetMaxClockInfo")
    return clocks if clocks != Clocks() else None  # nothing answered: ask again next cycle


def read_clocks(ctx: GpuContext, out: GpuBuilder) -> None:
    out.set(
        clocks=_clocks(ctx, "nvmlDeviceGetClockInfo"),  # dynamic: every cycle
        # static: the board's maxima (re-reading them was most of this reader's time)
        max_clocks=ctx.once("clocks.max", lambda: _max_clocks(ctx)) or Clocks(),
    )


def reason_names(mask: int) -> tuple[str, ...]:
    """The names of the mask's known bits (:data:`vgpumon.nvml.enums.CLOCK_EVENT_REASONS`), in
    bit order; other bits are dropped."""
    return tuple(name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit)


def _reasons(ctx: GpuContext, new: str, old: str) -> int | None:
    got = ctx.attempt(new, ctx.handle)
    value = ctx.call(old, ctx.handle) if got.status == "absent" else got.value
    return value if isinstance(value, int) else None


def read_clock_events(ctx: GpuContext, out: GpuBuilder) -> None:
    supported = ctx.once(  # static: what the board can report
        "clocks.supported_reasons",
        lambda: _reasons(
            ctx,
            "nvmlDeviceGetSupportedClocksEventReasons",
            "nvmlDeviceGetSupportedClocksThrottleReasons",
        ),
    )
    active = _reasons(
        ctx, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"
    )
    if supported is None or active is None:
        # Every supported reason is exported as active or not: without the active mask that
        # would be a 0 for each, a value NVML did not give (docs/design.md, rule 4).
        return
    out.set(
        clock_events=ClockEvents(supported=reason_names(supported), active=reason_names(active))
    )


READERS = [
    FunctionReader("clocks", read_clocks),
    FunctionReader("clock_events", read_clock_events),
]
