"""Device identity and modes: who this GPU is and how it is virtualized or partitioned.

Value classes (issue: read each value at the rate it changes): identity is *static* (read once per
attach and after an NVML re-init, :meth:`GpuContext.once`); the modes are *slow* (re-read every
``SLOW_SECONDS``, :meth:`GpuContext.slow`).

Runs first for every GPU, so that other readers can skip calls that cannot apply (the classic
utilization family on a MIG-enabled GPU, vGPU host calls outside host_vgpu mode).
"""

from __future__ import annotations

from typing import Any

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext
from vgpumon.nvml.enums import (
    ARCHITECTURES,
    BRANDS,
    COMPUTE_MODES,
    HOST_VGPU_MODES,
    VIRTUALIZATION_MODES,
)


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _identity(ctx: GpuContext) -> dict[str, Any] | None:
    """Name, bus id, serial, brand, architecture, compute capability: static (read once).

    None (nothing cached, all asked again next cycle) unless the name and bus id answered.
    """
    h = ctx.handle
    name = ctx.call("nvmlDeviceGetName", h)
    pci = ctx.call("nvmlDeviceGetPciInfo", h)
    cc = ctx.call("nvmlDeviceGetCudaComputeCapability", h)
    brand = ctx.call("nvmlDeviceGetBrand", h)
    arch = ctx.call("nvmlDeviceGetArchitecture", h)
    got = {
        "name": name,
        "pci_bus_id": pci.busId if pci is not None else None,
        "serial": ctx.call("nvmlDeviceGetSerial", h),
        "minor_number": ctx.call("nvmlDeviceGetMinorNumber", h),
        "brand": BRANDS.get(brand, f"brand_{brand}") if brand is not None else None,
        "architecture": ARCHITECTURES.get(arch, "unknown") if arch is not None else None,
        "compute_capability": f"{cc[0]}.{cc[1]}" if cc is not None else None,
    }
    ctx.state["device.identity.last"] = got
    return got if name is not None and pci is not None else None


def _modes(ctx: GpuContext) -> dict[str, Any]:
    """Virtualization, MIG and persistence mode: slow (they change only by an admin's action, and
    ``nvmlDeviceGetMigMode`` is one of the costlier calls: docs/nvml-notes.md §14)."""
    h = ctx.handle
    virt = ctx.call("nvmlDeviceGetVirtualizationMode", h)
    mig = ctx.call("nvmlDeviceGetMigMode", h)
    return {
        "virtualization_mode": VIRTUALIZATION_MODES.get(virt) if virt is not None else None,
        "mig_mode_current": _flag(mig[0]) if mig is not None else None,
        "mig_mode_pending": _flag(mig[1]) if mig is not None else None,
        "persistence_mode": _flag(ctx.call("nvmlDeviceGetPersistenceMode", h)),
    }


def read_device(ctx: GpuContext, out: GpuBuilder) -> None:
    h = ctx.handle
    identity = ctx.once("device.identity", lambda: _identity(ctx))
    out.set(**(identity if identity is not None else ctx.state["device.identity.last"]))
    out.set(**ctx.slow("device.modes", lambda: _modes(ctx)))
    if not out.get("mig_mode_current"):
        mode = ctx.slow("device.compute_mode", lambda: ctx.call("nvmlDeviceGetComputeMode", h))
        out.set(compute_mode=COMPUTE_MODES.get(mode) if mode is not None else None)
    if out.get("virtualization_mode") == "host_vgpu":
        host_mode = ctx.slow(
            "device.host_vgpu_mode", lambda: ctx.call("nvmlDeviceGetHostVgpuMode", h)
        )
        out.set(host_vgpu_mode=HOST_VGPU_MODES.get(host_mode) if host_mode is not None else None)


READERS = [FunctionReader("device", read_device)]
