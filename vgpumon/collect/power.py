"""Power draw, the enforced limit and the energy counter.

Energy is its own collector because ``nvmlDeviceGetTotalEnergyConsumption`` is by far the slowest
routine call (docs/nvml-notes.md §14), so it can be turned off
without losing power readings.
"""

from __future__ import annotations

from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, cadence

# The energy counter costs milliseconds of driver time per read (3-17 ms on an H100): read every
# 10 s by default, the last value standing between reads.
ENERGY = cadence("energy", 10.0)


def _milli(value: Any) -> float | None:
    """mW -> W, mJ -> J."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) / 1000.0


def read_power(ctx: GpuContext, out: GpuBuilder) -> None:
    """Dynamic, every cycle. Not a field value: ``nvmlDeviceGetPowerUsage`` is a 1 s average on
    Ampere+ but instantaneous on GA100 and older, and no one field id means that on every board."""
    h = ctx.handle
    usage = ctx.call("nvmlDeviceGetPowerUsage", h)
    # The enforced limit includes out-of-band limits; the management limit is what older drivers
    # and partial modules have.
    enforced = ctx.attempt("nvmlDeviceGetEnforcedPowerLimit", h)
    limit = enforced.value
    if enforced.status == "absent":
        limit = ctx.call("nvmlDeviceGetPowerManagementLimit", h)
    out.set(power_watts=_milli(usage), power_limit_watts=_milli(limit))


def read_energy(ctx: GpuContext, out: GpuBuilder) -> None:
    """Cadenced (``SamplerConfig.cadences["energy"]``): between reads the last value stands.

    The counter only grows, so a value up to one cadence old still gives correct ``rate()``s over
    windows longer than the cadence; its sample time is the snapshot's, not the read's.
    """
    if not ctx.due(ENERGY):
        if ctx.previous is not None:
            out.set(energy_joules=ctx.previous.energy_joules)
        return
    out.set(energy_joules=_milli(ctx.call("nvmlDeviceGetTotalEnergyConsumption", ctx.handle)))


READERS = [FunctionReader("power", read_power), FunctionReader("energy", read_energy)]
