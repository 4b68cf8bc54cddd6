"""Framebuffer and BAR1 memory.

``nvmlDeviceGetMemoryInfo`` v2 is asked first because v1's "used" silently includes the memory the
driver reserves (docs/nvml-notes.md §4.2); only v2 reports ``reserved`` separately. On a MIG-enabled
GPU the parent's numbers need privileges; per-instance memory comes from the MIG reader.
"""

from __future__ import annotations

from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, cadence
from vgpumon.model import Memory

# BAR1 memory (0.35 ms a read on an H100): every 10 s by default.
BAR1 = cadence("bar1", 10.0)

FUNCTION = "nvmlDeviceGetMemoryInfo"
VERSION_KEY = "memory.version"  # scope -> "v1" once v2 turned out to be missing


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _memory(info: Any, reserved: bool) -> Memory:
    return Memory(
        total_bytes=_int(getattr(info, "total", None)),
        used_bytes=_int(getattr(info, "used", None)),
        free_bytes=_int(getattr(info, "free", None)),
        reserved_bytes=_int(getattr(info, "reserved", None)) if reserved else None,
    )


def read_memory_info(ctx: GpuContext, handle: Any, scope: str = "gpu") -> Memory | None:
    """v2 where the module and driver have it, else v1; None when neither answers.

    v1 is only asked when v2 is missing (the module has no ``nvmlMemory_v2``, or the driver answers
    FUNCTION_NOT_FOUND): when v2 says NO_PERMISSION or NOT_SUPPORTED, v1 would say the same, and
    asking would count the same absence twice. ``scope`` keeps support caching apart for handles
    that differ in what they may ask: a MIG parent without privileges gets NO_PERMISSION where its
    MIG device handles succeed.
    """
    versions: dict[str, str] = ctx.state.setdefault(VERSION_KEY, {})
    version = ctx.module_attr("nvmlMemory_v2")
    if version is None:
        versions[scope] = "v1"
    if versions.get(scope) != "v1":
        got = ctx.attempt(FUNCTION, handle, version=version, key=(scope, "v2"))
        if got.value is not None:
            return _memory(got.value, reserved=True)
        if got.status != "absent":
            return None  # a counted failure this cycle; try v2 again next time
        if got.error != "function_not_found":
            return None  # absent for a reason v1 shares
        versions[scope] = "v1"  # a driver older than v2 (R510)
    info = ctx.call(FUNCTION, handle, key=(scope, "v1"))
    return _memory(info, reserved=False) if info is not None else None


def read_memory(ctx: GpuContext, out: GpuBuilder) -> None:
    memory = read_memory_info(ctx, ctx.handle)
    if memory is not None:
        out.set(memory=memory)
    if not ctx.due(BAR1):  # cadenced (``SamplerConfig.cadences["bar1"]``): the last value stands
        if ctx.previous is not None:
            out.set(bar1_memory=ctx.previous.bar1_memory)
        return
    bar1 = ctx.call("nvmlDeviceGetBAR1MemoryInfo", ctx.handle)
    if bar1 is not None:
        out.set(
            bar1_memory=Memory(
                total_bytes=_int(getattr(bar1, "bar1Total", None)),
                used_bytes=_int(getattr(bar1, "bar1Used", None)),
                free_bytes=_int(getattr(bar1, "bar1Free", None)),
            )
        )


READERS = [FunctionReader("memory", read_memory)]
