"""GPU and memory (HBM) temperature.

Memory temperature has no getter of its own; it is field value ``NVML_FI_DEV_MEMORY_TEMP`` (82),
whose result must be checked per entry (docs/nvml-notes.md §4.14).
"""

from __future__ import annotations

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext
from vgpumon.collect.field_values import read_fields
from vgpumon.model import Temperatures

NVML_TEMPERATURE_GPU = 0
FI_DEV_MEMORY_TEMP = 82


def read_temperature(ctx: GpuContext, out: GpuBuilder) -> None:
    gpu = ctx.call("nvmlDeviceGetTemperature", ctx.handle, NVML_TEMPERATURE_GPU)
    field_id = int(ctx.module_attr("NVML_FI_DEV_MEMORY_TEMP", FI_DEV_MEMORY_TEMP))
    memory = read_fields(ctx, [field_id]).get(field_id)
    out.set(
        temperatures=Temperatures(
            gpu_celsius=float(gpu) if gpu is not None else None,
            memory_celsius=float(memory) if memory is not None else None,
        )
    )


READERS = [FunctionReader("temperature", read_temperature)]
