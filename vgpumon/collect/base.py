"""What a reader is and what it gets to work with.

A reader owns one NVML area (memory, power, MIG, vGPU, ...). For each GPU it is called in that GPU's
worker thread with a :class:`GpuContext` and fills a :class:`GpuBuilder`; the sampler turns the
builder into an immutable :class:`vgpumon.model.Gpu`. Readers never raise for NVML errors: the
session returns None for absent values (``attempt`` says why there is none) and raises
:class:`~vgpumon.nvml.session.GpuDown` only when the GPU must be re-acquired, which the sampler
handles.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from vgpumon.collect.memory_in_use import with_memory_in_use
from vgpumon.model import Gpu
from vgpumon.nvml.session import CallOutcome, NvmlSession

# Key in GpuContext.state: set during a cycle by a reader whose values need a second sample (GPM),
# so that one-shot users (``vgpumon snapshot``) know to run a second cycle. Cleared every cycle.
NEEDS_INTERVAL = "_needs_interval"


@dataclass
class SamplerConfig:
    interval_seconds: float = 1.0
    # A cycle that has not finished after this long is cut off (its hung GPUs are reported).
    deadline_seconds: float = 5.0
    collectors: frozenset[str] | None = None  # None: every default-on collector
    pcie_throughput: bool = False  # opt-in: nvmlDeviceGetPcieThroughput blocks for its window
    processes: bool = True
    # Expensive values read at their own cadence, in seconds, by name (docs/exporter.md, the
    # ``--interval.*`` settings, says which and why): a reading not named here is read at its
    # collector's own cadence (:data:`DEFAULT_CADENCES`), so every command samples as ``serve``
    # does; one given 0 is read every cycle. Between reads the last value stands (see ``due``).
    cadences: dict[str, float] = field(default_factory=dict)
    # NVML field ids an operator asked for (``fields`` in the serve config): an id, or (id, scope
    # id). They join the cycle's one batched nvmlDeviceGetFieldValues call per GPU. Replaced
    # whole (never mutated) on a config reload, so a cycle in flight sees one tuple or the other.
    extra_fields: tuple[int | tuple[int, int], ...] = ()
    # How the GPUs' jobs are run (:data:`DISPATCH_MODES`; docs/exporter.md, "GPU dispatch"):
    # "parallel" all at once, "serial" one after another (each still on its own worker thread),
    # "auto" serial while the GPUs' jobs together take a small part of the interval.
    dispatch: str = "auto"


DISPATCH_MODES = ("auto", "parallel", "serial")


# How often values that change only by an administrator's action (MIG, ECC, persistence and
# virtualization modes, supported vGPU types) are read again; static values are read once.
SLOW_SECONDS = 30.0
# Each reading taken at its own cadence, and its default period in seconds, as the collector
# that reads it declares it (:func:`cadence`, when its module is imported): the names
# ``SamplerConfig.cadences`` may give, the defaults of the settings table's ``intervals.*`` rows
# (a test keeps the two equal), the readings whose period the sampler publishes.
DEFAULT_CADENCES: dict[str, float] = {}


def cadence(name: str, seconds: float) -> str:
    """Declare a reading read every ``seconds`` by default (a collector module's, at import);
    returns ``name`` for the collector's ``ctx.due(name)``."""
    DEFAULT_CADENCES[name] = seconds
    return name


_CADENCE_KEY = "_cadence_last"
_ONCE_KEY = "_once"


@dataclass
class GpuContext:
    """Everything a reader may use for one GPU in one cycle."""

    session: NvmlSession
    handle: Any
    index: int
    uuid: str
    config: SamplerConfig
    # Per-GPU, per-reader state that survives between cycles (sample cursors, GPM samples).
    state: dict[str, Any]
    previous: Gpu | None  # this GPU in the previous snapshot, for rates
    now: float  # cycle start, Unix seconds
    # Sampler-wide services shared by all GPUs (the Xid event watcher, fast pollers), by name.
    shared: dict[str, Any] = field(default_factory=dict)
    # A one-shot consumer's second cycle after a reader asked for one (``want_interval``: GPM's
    # and the process utilization's first read has no average yet): every cadenced value is due
    # now, so that cycle has its averages whatever the cadences (``Sampler.cycle``).
    second_look: bool = False

    def call(self, function: str, *args: Any, **kwargs: Any) -> Any:
        """Shorthand for a guarded call about this GPU."""
        return self.session.call(self.uuid, function, *args, **kwargs)

    def attempt(self, function: str, *args: Any, **kwargs: Any) -> CallOutcome:
        """Shorthand for a guarded call about this GPU that says why there is no value."""
        return self.session.attempt(self.uuid, function, *args, **kwargs)

    def module_attr(self, name: str, default: Any = None) -> Any:
        return getattr(self.session.module, name, default)

    def cadence(self, name: str) -> float:
        """How often ``name`` is read, in seconds: the config's, else its collector's default;
        0: every cycle."""
        return self.config.cadences.get(name, DEFAULT_CADENCES.get(name, 0.0))

    def due(self, name: str, seconds: float | None = None) -> bool:
        """Whether a cadenced value is to be read this cycle (and, if so, mark it read now).

        ``seconds`` defaults to :meth:`cadence`. A value is due on the GPU's first cycle,
        after it was re-acquired (its state is cleared) and when ``seconds`` have passed since the
        last read (less half an interval, so a 10 s cadence at 1 s cycles reads every 10 cycles,
        not 11), and on the cycle after a reader asked for a second sample (:attr:`second_look`).
        A reader whose value is not due copies the previous cycle's value: the exposition keeps
        showing the value as last read.
        """
        if self.second_look:
            self.state.setdefault(_CADENCE_KEY, {})[name] = self.now
            return True
        if seconds is None:
            seconds = self.cadence(name)
        if seconds <= 0:
            return True
        last: dict[str, float] = self.state.setdefault(_CADENCE_KEY, {})
        at = last.get(name)
        fresh = self.previous is None or not self.previous.up  # nothing to keep showing
        if (
            not fresh
            and at is not None
            and self.now - at < seconds - self.config.interval_seconds / 2
        ):
            return False
        last[name] = self.now
        return True

    def once(self, name: str, read: Callable[[], Any]) -> Any:
        """A static value: read while unknown (None), then kept until the GPU's state is reset.

        State is reset when the GPU is re-acquired and after an NVML re-init, which is exactly
        when identity and limits may have changed.
        """
        cache: dict[str, Any] = self.state.setdefault(_ONCE_KEY, {})
        value = cache.get(name)
        if value is None:
            value = read()
            if value is not None:
                cache[name] = value
        return value

    def slow(self, name: str, read: Callable[[], Any]) -> Any:
        """A value that changes only by an administrator's action: read every SLOW_SECONDS."""
        cache: dict[str, Any] = self.state.setdefault(_ONCE_KEY, {})
        key = "slow:" + name
        if key not in cache or cache[key] is None or self.due(key, SLOW_SECONDS):
            cache[key] = read()
        return cache[key]

    def want_interval(self) -> None:
        """Say that this GPU has values that only a later cycle can give (two-sample methods)."""
        self.state[NEEDS_INTERVAL] = True


class ReadFailed(Exception):
    """Raised by a reader whose main reading failed although it answered in part (the vGPU list
    timed out while the GPU's other vGPU calls answered): the collector did not succeed this
    cycle. What the reader set before raising stands. Logged at debug level only: the failure
    is in the error counters and in the collector's success already."""


class GpuBuilder:
    """Mutable collection of the fields of one :class:`Gpu` while its readers run."""

    def __init__(self, index: int, uuid: str) -> None:
        self.fields: dict[str, Any] = {"index": index, "uuid": uuid}

    def set(self, **values: Any) -> None:
        unknown = set(values) - _GPU_FIELDS
        if unknown:
            raise TypeError(f"Gpu has no field(s) {sorted(unknown)}")
        self.fields.update(values)

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def build(self) -> Gpu:
        """The GPU as its readers left it, with the memory in use decided once (it needs both the
        GPU instances and the vGPUs, which different readers find)."""
        fields = dict(self.fields)
        memory = fields.get("memory")
        fields["memory_in_use_bytes"], fields["mig_instances"] = with_memory_in_use(
            memory.used_bytes if memory is not None else None,
            fields.get("mig_instances", ()),
            fields.get("vgpu_instances", ()),
        )
        return Gpu(**fields)


_GPU_FIELDS = {f.name for f in dataclasses.fields(Gpu)}


def note_unsupported(out: GpuBuilder, collector: str, reason: str | None) -> None:
    """Say that ``collector`` read nothing on this GPU because the driver (or the NVML module)
    lacks its calls; ``reason`` is NVML's ("function_not_found", "not_supported", ...).

    The sampler counts these per collector and reason in the collector status, so an operator
    tells "this driver cannot say" from "the value is 0" (which the series never pretends).
    """
    if reason:
        out.fields.setdefault("unsupported", {})[collector] = reason


def absent_reason(*outcomes: CallOutcome) -> str | None:
    """The reason shared by outcomes that are all "absent" (the collector has nothing to read
    here), or None as soon as one answered or failed otherwise."""
    if not outcomes or any(o.status != "absent" for o in outcomes):
        return None
    return outcomes[0].error or "not_supported"


class Reader(Protocol):
    """One NVML area. ``name`` is the collector name used by flags and self-metrics.

    A reader may also define ``attach(sampler)``, called once when a sampler adopts it, to start
    sampler-wide services (the Xid event watcher) through ``Sampler.on_acquire`` and
    ``Sampler.services``. Values in ``GpuContext.state`` that have a ``close()`` method are closed
    when the GPU is lost or the sampler closes (GPM sample buffers). A reader may define
    ``active`` (see :class:`FunctionReader`; :func:`is_active` asks it).
    """

    name: str
    default_enabled: bool

    def read(self, ctx: GpuContext, out: GpuBuilder) -> None: ...


@dataclass
class FunctionReader:
    """A reader made from a plain function, which is all most readers need.

    ``active``: for a reader that has nothing to do under some configurations (the configured
    fields reader without fields); while it says False the reader is not run and has no
    collector status, so an unused feature adds no series. Asked every cycle, so a config reload
    can switch it on.
    """

    name: str
    fn: Callable[[GpuContext, GpuBuilder], None]
    default_enabled: bool = True
    doc: str = field(default="")
    active: Callable[[SamplerConfig], bool] | None = None

    def read(self, ctx: GpuContext, out: GpuBuilder) -> None:
        self.fn(ctx, out)


def is_active(reader: Reader, config: SamplerConfig) -> bool:
    """Whether ``reader`` has work under ``config`` (readers without ``active`` always do)."""
    active = getattr(reader, "active", None)
    return active is None or bool(active(config))


# NVML's "no such instance" id (INVALID_GPU_INSTANCE_ID, the GI/CI ids of a process outside MIG,
# INVALID_GPU_INSTANCE_PROFILE_ID): a C unsigned -1.
NO_ID = 0xFFFFFFFF


def nvml_int(value: Any) -> int | None:
    """An integer NVML gave, or None (bool and non-int answers are not numbers here)."""
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def nvml_id(value: Any) -> int | None:
    """An instance / profile id, None when NVML said "none" (:data:`NO_ID`) or gave nothing."""
    value = nvml_int(value)
    return None if value is None or value == NO_ID else value


def ratio(percent: Any) -> float | None:
    """NVML percent -> ratio in [0, 1]; None stays None."""
    if percent is None:
        return None
    return max(0.0, min(1.0, float(percent) / 100.0))
