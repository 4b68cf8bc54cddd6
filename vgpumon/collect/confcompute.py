"""Confidential computing: whether CC is on, in which environment, and whether the GPUs are ready.

The GPU Operator deploys CC on VM nodes (the GPU passed through to a confidential VM). The state is
the system's (``nvmlSystemGetConfComputeState``: environment, CC feature, developer-tools mode;
``nvmlSystemGetConfComputeSettings``: the multi-GPU protection mode; ``...Capabilities``: CPU and
GPU capability), read per GPU so that each GPU's series carry it, and only every
:data:`~vgpumon.collect.base.SLOW_SECONDS` (it changes with a reboot into another mode). The
"GPUs ready" state (``nvmlSystemGetConfComputeGpusReadyState``: the attestation step accepted the
GPUs, so they take client work) changes at run time and is read every cycle, as are the GPU's
protected-memory figures (``nvmlDeviceGetConfComputeMemSizeInfo`` and
``...ProtectedMemoryUsage``).

``nvmlSystemGetConfComputeSettings`` in pynvml passes its structure by value and returns the raw C
code instead of raising (docs/nvml-notes.md §11, quirk 19), so with real pynvml it is called
through the C symbol with a pointer; other modules (the simulator) are called by name.
"""

from __future__ import annotations

import ctypes
from typing import Any

from vgpumon.collect.base import (
    FunctionReader,
    GpuBuilder,
    GpuContext,
    absent_reason,
    note_unsupported,
    nvml_int,
)
from vgpumon.collect.vgpu_raw import has_raw
from vgpumon.model import CC_ENVIRONMENTS, CC_MULTI_GPU_MODES, ConfCompute
from vgpumon.nvml.session import CallOutcome

NAME = "confcompute"
CPU_CAPABILITIES = ("none", "amd_sev", "intel_tdx", "amd_sev_snp", "amd_snp_vtom")
SETTINGS_V1 = 0x1000014  # nvmlSystemConfComputeSettings_v1, for modules without the constant
KIB = 1024


def _name(names: tuple[str, ...], value: Any) -> str | None:
    code = nvml_int(value)
    return names[code] if code is not None and 0 <= code < len(names) else None


def _flag(value: Any) -> bool | None:
    code = nvml_int(value)
    return None if code is None else bool(code)


def _settings(ctx: GpuContext) -> CallOutcome:
    cls = ctx.module_attr("c_nvmlSystemConfComputeSettings_v1_t")
    if cls is None:
        return CallOutcome(status="absent", error="function_not_found")
    settings = cls()
    settings.version = ctx.module_attr("nvmlSystemConfComputeSettings_v1", SETTINGS_V1)
    if has_raw(ctx.session):
        got = ctx.session.attempt_raw(
            ctx.uuid, "nvmlSystemGetConfComputeSettings", ctypes.byref(settings)
        )
    else:
        got = ctx.attempt("nvmlSystemGetConfComputeSettings", settings)
    return CallOutcome(settings) if got.ok else got


def _system(ctx: GpuContext) -> tuple[dict[str, Any], str | None]:
    """The slow system part: its fields, and why there is none (all calls absent)."""
    state = ctx.attempt("nvmlSystemGetConfComputeState")
    settings = _settings(ctx)
    caps = ctx.attempt("nvmlSystemGetConfComputeCapabilities")
    fields: dict[str, Any] = {}
    if state.ok and state.value is not None:
        st = state.value
        fields["feature_enabled"] = _flag(getattr(st, "ccFeature", None))
        fields["environment"] = _name(CC_ENVIRONMENTS, getattr(st, "environment", None))
        fields["devtools_mode"] = _flag(getattr(st, "devToolsMode", None))
    if settings.ok and settings.value is not None:
        fields["multi_gpu_mode"] = _name(
            CC_MULTI_GPU_MODES, getattr(settings.value, "multiGpuMode", None)
        )
        if "feature_enabled" not in fields:
            fields["feature_enabled"] = _flag(getattr(settings.value, "ccFeature", None))
    if caps.ok and caps.value is not None:
        fields["cpu_capability"] = _name(CPU_CAPABILITIES, getattr(caps.value, "cpuCaps", None))
        fields["gpus_capable"] = _flag(getattr(caps.value, "gpusCaps", None))
    return fields, absent_reason(state, settings, caps)


def read_confcompute(ctx: GpuContext, out: GpuBuilder) -> None:
    fields, reason = ctx.slow(NAME, lambda: _system(ctx))
    if reason is not None:
        note_unsupported(out, NAME, reason)
        return
    ready = ctx.attempt("nvmlSystemGetConfComputeGpusReadyState")
    if ready.ok:
        fields = {**fields, "ready": _flag(ready.value)}
    if fields.get("feature_enabled"):
        # Protected memory exists only with CC on; elsewhere the calls answer "not supported".
        sizes = ctx.call("nvmlDeviceGetConfComputeMemSizeInfo", ctx.handle)
        if sizes is not None:
            protected = nvml_int(getattr(sizes, "protectedMemSizeKib", None))
            unprotected = nvml_int(getattr(sizes, "unprotectedMemSizeKib", None))
            if unprotected is not None:
                fields["unprotected_memory_bytes"] = unprotected * KIB
            if protected is not None:
                fields["protected_memory_total_bytes"] = protected * KIB
        usage = ctx.call("nvmlDeviceGetConfComputeProtectedMemoryUsage", ctx.handle)
        if usage is not None:
            used = nvml_int(getattr(usage, "used", None))
            total = nvml_int(getattr(usage, "total", None))
            if used is not None:
                fields["protected_memory_used_bytes"] = used
            if total is not None:
                fields["protected_memory_total_bytes"] = total
    out.set(conf_compute=ConfCompute(**fields))


READERS = [FunctionReader(NAME, read_confcompute)]
