"""How simulated functions are declared, grouped and found.

Functions live on "API provider" classes (one per NVML area). A method decorated with
:func:`nvml_function` becomes the module attribute of the same name; its parameters must be
pynvml's own (the contract test checks). A later module (the vGPU simulation) adds functions and
per-GPU state without editing the core: it defines providers with :func:`register_provider`,
registers per-GPU state with :func:`register_gpu_state`, registers its scenario keys in
:mod:`vgpumon.sim.schema`, its ``vgpumon record`` hook with
:func:`vgpumon.sim.record.register_record_hook`, and lists its module in :data:`EXTENSION_MODULES`.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

import pynvml

if TYPE_CHECKING:
    from vgpumon.sim.core import SimCore
    from vgpumon.sim.scenario_specs import Scenario
    from vgpumon.sim.schema import Ctx
    from vgpumon.sim.state import GpuState

F = TypeVar("F", bound=Callable[..., Any])

# Parameter names that carry the object a call is "about"; used to aim faults at GPUs.
HANDLE_PARAMS = ("handle", "device", "migDevice", "gpuInstance", "computeInstance", "device1")

# Device-level vGPU host calls: NOT_SUPPORTED (3) on any GPU that is not in HOST_VGPU
# virtualization mode (docs/nvml-notes.md §2.3). The dispatcher enforces this for whichever provider
# implements them, so the rule holds before and after the vGPU simulation exists.
HOST_VGPU_FUNCTIONS = frozenset(
    {
        "nvmlDeviceGetActiveVgpus",
        "nvmlDeviceGetSupportedVgpus",
        "nvmlDeviceGetCreatableVgpus",
        "nvmlDeviceGetVgpuUtilization",
        "nvmlDeviceGetVgpuProcessUtilization",
        "nvmlDeviceGetVgpuInstancesUtilizationInfo",
        "nvmlDeviceGetVgpuProcessesUtilizationInfo",
        "nvmlDeviceGetVgpuSchedulerState",
        "nvmlDeviceGetVgpuSchedulerLog",
        "nvmlDeviceGetVgpuSchedulerCapabilities",
        "nvmlDeviceGetVgpuHeterogeneousMode",
        "nvmlDeviceGetVgpuCapabilities",
        "nvmlDeviceGetVgpuMetadata",
        "nvmlDeviceGetPgpuMetadataString",
        "nvmlDeviceGetHostVgpuMode",
        "nvmlGetVgpuDriverCapabilities",
        "nvmlVgpuTypeGetMaxInstances",
    }
)

Target: TypeAlias = "str | Callable[[SimCore, dict[str, Any]], int | None] | None"


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    target: Target  # parameter holding the handle, a resolver, or None for GPU-less calls
    host_vgpu_only: bool
    replaces: bool


def nvml_function(
    *, target: Target = "auto", host_vgpu_only: bool = False, replaces: bool = False
) -> Callable[[F], F]:
    """Mark a provider method as the simulated pynvml function of the same name.

    ``target``: "auto" uses the first parameter when it is a handle (see :data:`HANDLE_PARAMS`);
    a parameter name, or a callable ``(core, arguments) -> GPU index`` for calls that name a GPU
    some other way (an index, a UUID, a vGPU instance id). ``replaces`` lets an extension override
    a core function on purpose.
    """

    def mark(method: F) -> F:
        method._nvml_spec = {  # type: ignore[attr-defined]
            "target": target,
            "host_vgpu_only": host_vgpu_only,
            "replaces": replaces,
        }
        return method

    return mark


class Provider:
    """A group of simulated functions sharing one :class:`SimCore`."""

    def __init__(self, core: SimCore) -> None:
        self.core = core


PROVIDERS: list[type[Provider]] = []


def register_provider(cls: type[Provider]) -> type[Provider]:
    if cls not in PROVIDERS:
        PROVIDERS.append(cls)
    return cls


# name -> factory(gpu state, core) -> per-GPU extension state, stored as gpu.ext[name]
GPU_STATE_FACTORIES: dict[str, Callable[[GpuState, SimCore], Any]] = {}


def register_gpu_state(name: str, factory: Callable[[GpuState, SimCore], Any]) -> None:
    GPU_STATE_FACTORIES[name] = factory


# Cross-key checks an extension runs once the whole scenario is parsed.
SCENARIO_CHECKS: list[Callable[[Scenario, Ctx], None]] = []


def register_scenario_check(check: Callable[[Scenario, Ctx], None]) -> None:
    if check not in SCENARIO_CHECKS:
        SCENARIO_CHECKS.append(check)


CORE_MODULES = (
    "vgpumon.sim.faults",
    "vgpumon.sim.api.system",
    "vgpumon.sim.api.device",
    "vgpumon.sim.api.processes",
    "vgpumon.sim.api.samples",
    "vgpumon.sim.api.fields",
    "vgpumon.sim.api.mig",
    "vgpumon.sim.api.gpm",
    "vgpumon.sim.api.events",
    "vgpumon.sim.api.virtualization",
)

# Modules outside the core that register providers, state and scenario keys (the vGPU simulation
# adds its module names here).
EXTENSION_MODULES: list[str] = [
    "vgpumon.sim.licensing",
    "vgpumon.sim.vgpu",
    "vgpumon.sim.scheduler",
    "vgpumon.sim.vgpu_api",
    "vgpumon.sim.vgpu_capacity_api",
    "vgpumon.sim.vgpu_record",
    "vgpumon.sim.driver_health",
]


def load_modules() -> None:
    """Import every provider module so all functions and scenario keys are registered."""
    for name in (*CORE_MODULES, *EXTENSION_MODULES):
        importlib.import_module(name)


def is_pynvml_function(name: str) -> bool:
    return inspect.isfunction(getattr(pynvml, name, None))


def collect_functions(
    providers: list[Provider],
) -> dict[str, tuple[FunctionSpec, Callable[..., Any]]]:
    """name -> (spec, bound method), with later providers allowed to replace only on purpose."""
    out: dict[str, tuple[FunctionSpec, Callable[..., Any]]] = {}
    for provider in providers:
        for attr in dir(type(provider)):
            member = getattr(type(provider), attr)
            marks = getattr(member, "_nvml_spec", None)
            if marks is None:
                continue
            spec = FunctionSpec(
                name=attr,
                target=marks["target"],
                host_vgpu_only=marks["host_vgpu_only"] or attr in HOST_VGPU_FUNCTIONS,
                replaces=marks["replaces"],
            )
            if attr in out and not spec.replaces:
                raise RuntimeError(
                    f"simulated {attr} is defined twice; mark the override replaces=True"
                )
            out[attr] = (spec, getattr(provider, attr))
    return out
