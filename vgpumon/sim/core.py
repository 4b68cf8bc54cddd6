"""The simulated NVML library: lifecycle, handles, and the one door every call goes through.

:class:`SimCore` holds the state (scenario, clock, GPUs, handles, faults, init refcount) and
assembles the functions of every registered provider. Each function is wrapped by
:meth:`SimCore.dispatch`, which applies in order what real NVML applies before doing any work:
library state (Uninitialized), per-call latency, injected hangs / lost GPUs / error codes, the
scenario's ``unsupported`` list and the host-vGPU gate. Provider code therefore only models the
function itself. :class:`SimNvml` is the module-like face handed to the collector.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import os
import threading
import time
import types
from collections.abc import Callable
from typing import Any, NamedTuple

import pynvml

from vgpumon.sim import registry
from vgpumon.sim.clock import Clock
from vgpumon.sim.faults import FaultEngine
from vgpumon.sim.handles import HandleTable, Key
from vgpumon.sim.registry import HANDLE_PARAMS, FunctionSpec
from vgpumon.sim.scenario_keys import VIRTUALIZATION_MODES
from vgpumon.sim.scenario_specs import Scenario
from vgpumon.sim.state import ComputeInstanceState, GpuInstanceState, GpuState

HOST_VGPU = VIRTUALIZATION_MODES["host_vgpu"]
_INIT_FUNCTIONS = frozenset({"nvmlInit", "nvmlInitWithFlags"})


def driver_text(value: str) -> str:
    """A name as pynvml hands it over: the driver's bytes, decoded strictly as UTF-8.

    A byte that is not UTF-8 is held in the name as a surrogate escape (Python's surrogateescape
    form, ``"\\udcff"`` for 0xFF; set on a parsed scenario, since scenario files refuse lone
    surrogates); pynvml's ``decode()`` then raises UnicodeDecodeError for it, exactly as it does
    on a host whose driver returns such a name.
    """
    return value.encode("utf-8", "surrogateescape").decode()


def nvml_error(code: int) -> pynvml.NVMLError:
    """pynvml's own exception for ``code`` (``NVMLError(3)`` is an ``NVMLError_NotSupported``)."""
    return pynvml.NVMLError(code)


# Overrides the scenario's ``latency`` for every simulator in the process: "none", "realistic"
# (the measured medians), or "FUNCTION=SECONDS,..." ("*" for every other function). Benches set it
# to give a simulated host realistic per-call costs without editing the scenario files.
LATENCY_ENV = "VGPUMON_SIM_LATENCY"
# Below this a per-call cost is spent busy (a real NVML call is CPU time in the ioctl, and a
# sleep this short would oversleep by tens of microseconds); above it, asleep (waiting on the GPU).
_SPIN_BELOW = 100e-6


def _latency_override(latency: dict[str, float]) -> dict[str, float]:
    from vgpumon.sim.scenario_keys import REALISTIC_LATENCY

    text = os.environ.get(LATENCY_ENV, "").strip()
    if not text:
        return dict(latency)
    if text == "none":
        return {}
    if text == "realistic":
        return dict(REALISTIC_LATENCY)
    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, seconds = item.partition("=")
        try:
            out[name.strip()] = float(seconds)
        except ValueError:
            raise ValueError(
                f"{LATENCY_ENV}: expected none, realistic or FUNCTION=SECONDS,..., got {item!r}"
            ) from None
        if not sep:
            raise ValueError(f"{LATENCY_ENV}: {item!r} has no '='")
    return out


def _spend(seconds: float) -> None:
    if seconds >= _SPIN_BELOW:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class DeviceRef(NamedTuple):
    """What a device handle points at: a GPU, or one of its MIG devices (compute instances)."""

    gpu: GpuState
    ci: ComputeInstanceState | None

    @property
    def is_mig(self) -> bool:
        return self.ci is not None


class SimCore:
    def __init__(self, scenario: Scenario, clock: Clock) -> None:
        registry.load_modules()
        self.scenario = scenario
        self.clock = clock
        self.epoch = clock.now()
        self.gpus = [GpuState(spec, scenario.seed) for spec in scenario.gpus]
        self.handles = HandleTable()
        self.faults = FaultEngine(list(scenario.faults))
        self.lock = threading.RLock()
        self.refcount = 0
        self.generation = 0
        self.library_loaded = False
        self._serials = itertools.count(1)
        for name, factory in registry.GPU_STATE_FACTORIES.items():
            for gpu in self.gpus:
                gpu.ext[name] = factory(gpu, self)
        self._latency = _latency_override(scenario.latency)
        self._default_latency = self._latency.get("*", 0.0)
        self.providers = [cls(self) for cls in registry.PROVIDERS]
        self.providers_by_type = {type(p): p for p in self.providers}
        self.functions: dict[str, Callable[..., Any]] = {
            name: self._entry(spec, impl)
            for name, (spec, impl) in registry.collect_functions(self.providers).items()
        }

    # ---------------------------------------------------------------- time

    def t(self) -> float:
        """Scenario time: seconds since this simulator was created."""
        return self.clock.now() - self.epoch

    def timestamp_us(self, t: float) -> int:
        """NVML's timestamps: CPU time in µs since the Unix epoch."""
        return round((self.epoch + t) * 1e6)

    def scenario_time(self, timestamp_us: int) -> float:
        return timestamp_us / 1e6 - self.epoch

    def next_serial(self) -> int:
        return next(self._serials)

    # ---------------------------------------------------------------- lifecycle

    def init(self) -> None:
        self.library_loaded = True
        code = self.faults.take_init_failure(self.t())
        if code is not None:
            raise nvml_error(code)
        with self.lock:
            if self.refcount == 0:
                self.generation += 1  # handles from before a full shutdown go stale
            self.refcount += 1

    def shutdown(self) -> None:
        with self.lock:
            if self.refcount == 0:
                raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
            self.refcount -= 1

    @property
    def initialized(self) -> bool:
        return self.refcount > 0

    # ---------------------------------------------------------------- dispatch

    def _entry(self, spec: FunctionSpec, impl: Callable[..., Any]) -> Callable[..., Any]:
        params = list(inspect.signature(impl).parameters)
        target = spec.target
        if target == "auto":
            target = params[0] if params and params[0] in HANDLE_PARAMS else None
        position = params.index(target) if isinstance(target, str) else -1

        @functools.wraps(impl)
        def entry(*args: Any, **kwargs: Any) -> Any:
            gpu: int | None = None
            if isinstance(target, str):
                handle = args[position] if position < len(args) else kwargs.get(target)
                gpu = self.peek_gpu(handle)
            elif target is not None:
                arguments = dict(zip(params, args, strict=False))
                arguments.update(kwargs)
                try:
                    gpu = target(self, arguments)
                except (LookupError, TypeError, ValueError, AttributeError):
                    # a resolver only aims faults; a bad argument is the function body's to reject
                    gpu = None
            return self.dispatch(spec, impl, gpu, target is not None, args, kwargs)

        entry.__qualname__ = spec.name
        entry.__module__ = "vgpumon.sim"
        return entry

    def dispatch(
        self,
        spec: FunctionSpec,
        impl: Callable[..., Any],
        gpu: int | None,
        has_target: bool,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        name = spec.name
        # pynvml: nothing works before init; after a shutdown only nvmlErrorString still does.
        if (
            name not in _INIT_FUNCTIONS
            and not self.initialized
            and not (name == "nvmlErrorString" and self.library_loaded)
        ):
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        delay = self._latency.get(name, self._default_latency)
        if delay:
            _spend(delay)
        self.faults.before_call(name, gpu, self.t())
        if gpu is not None and name in self.gpus[gpu].spec.unsupported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if spec.host_vgpu_only:
            if gpu is not None:
                host = self.gpus[gpu].spec.virtualization_mode == HOST_VGPU
            else:
                # GPU-less calls (driver capabilities) need a vGPU host somewhere; a bad handle
                # is left to the function body, which answers INVALID_ARGUMENT.
                host = has_target or any(g.spec.virtualization_mode == HOST_VGPU for g in self.gpus)
            if not host:
                raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return impl(*args, **kwargs)

    # ---------------------------------------------------------------- handles

    def peek_gpu(self, handle: Any) -> int | None:
        """The GPU index a handle refers to, without validating it (for aiming faults)."""
        entry = self.handles.lookup(handle)
        if entry is None:
            return None
        key = entry[1]
        if key[0] in ("gpu", "mig", "gi", "ci"):
            return int(key[1])
        return None

    def issue(self, key: Key, pointer_type: Any) -> Any:
        return self.handles.issue(self.generation, key, pointer_type)

    def device_handle(self, gpu: GpuState, ci: ComputeInstanceState | None = None) -> Any:
        key: Key = ("gpu", gpu.index) if ci is None else ("mig", gpu.index, ci.gi.id, ci.id)
        return self.issue(key, pynvml.c_nvmlDevice_t)

    def gpu_instance_handle(self, gi: GpuInstanceState) -> Any:
        return self.issue(("gi", gi.gpu.index, gi.id), pynvml.c_nvmlGpuInstance_t)

    def compute_instance_handle(self, ci: ComputeInstanceState) -> Any:
        return self.issue(("ci", ci.gi.gpu.index, ci.gi.id, ci.id), pynvml.c_nvmlComputeInstance_t)

    def resolve(self, handle: Any, *kinds: str) -> Key:
        """The key of a live handle of one of ``kinds``; INVALID_ARGUMENT (2) otherwise."""
        entry = self.handles.lookup(handle)
        if entry is None or entry[0] != self.generation or entry[1][0] not in kinds:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return entry[1]

    def device(self, handle: Any) -> DeviceRef:
        key = self.resolve(handle, "gpu", "mig")
        gpu = self.gpus[key[1]]
        if key[0] == "gpu":
            return DeviceRef(gpu, None)
        gi = gpu.gi_by_id.get(key[2])
        ci = next((c for c in gi.cis if c.id == key[3]), None) if gi is not None else None
        if ci is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return DeviceRef(gpu, ci)

    def physical(self, handle: Any, mig_error: int = pynvml.NVML_ERROR_NOT_SUPPORTED) -> GpuState:
        """The GPU of a full-GPU handle; ``mig_error`` for a MIG device handle."""
        ref = self.device(handle)
        if ref.ci is not None:
            raise nvml_error(mig_error)
        return ref.gpu

    def gpu_instance(self, handle: Any) -> GpuInstanceState:
        key = self.resolve(handle, "gi")
        gi = self.gpus[key[1]].gi_by_id.get(key[2])
        if gi is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gi

    def compute_instance(self, handle: Any) -> ComputeInstanceState:
        key = self.resolve(handle, "ci")
        gi = self.gpus[key[1]].gi_by_id.get(key[2])
        ci = next((c for c in gi.cis if c.id == key[3]), None) if gi is not None else None
        if ci is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ci

    def require_privilege(self) -> None:
        if not self.scenario.privileged:
            raise nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)


class SimNvml(types.ModuleType):
    """A stand-in for the ``pynvml`` module.

    Simulated functions are attributes; every other non-function name of pynvml (constants,
    structure classes, exception classes) falls through to pynvml itself, while pynvml functions the
    simulator does not implement raise AttributeError, so callers see them as absent.
    """

    def __init__(self, core: SimCore) -> None:
        super().__init__(
            f"vgpumon.sim:{core.scenario.name}", f"Simulated NVML: {core.scenario.description}"
        )
        self._core = core
        self.scenario = core.scenario
        self.clock = core.clock
        self.__dict__.update(core.functions)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name.startswith("_sim"):
            raise AttributeError(name)
        try:
            value = getattr(pynvml, name)
        except AttributeError:
            raise AttributeError(f"pynvml has no attribute {name!r}") from None
        if inspect.isfunction(value) or inspect.isbuiltin(value):
            raise AttributeError(f"the simulated NVML does not implement {name}")
        return value

    def __dir__(self) -> list[str]:
        fallback = {
            n
            for n, v in vars(pynvml).items()
            if not (inspect.isfunction(v) or inspect.isbuiltin(v))
        }
        return sorted(set(self.__dict__) | fallback)

    def __repr__(self) -> str:
        return f"<simulated NVML {self.scenario.name!r} from {self.scenario.source}>"

    def release_hangs(self) -> None:
        """Free every call blocked in a hang and disarm the hang faults (for test clean-up)."""
        self._core.faults.release()

    @property
    def implemented_functions(self) -> list[str]:
        return sorted(self._core.functions)
