"""Event sets for Xid errors (docs/nvml-notes.md §4.9).

Each set remembers, per registered GPU, which of the scenario's Xid events it has delivered; an
event is delivered once per set, in time order, if it happened at or after the registration.
``nvmlEventSetWait`` raises NVMLError_Timeout when nothing is pending by the end of the timeout
(waited in wall time, polling, so a WallClock scenario can deliver an Xid that falls due meanwhile).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pynvml

from vgpumon.sim.core import nvml_error
from vgpumon.sim.registry import Provider, nvml_function, register_provider

NO_INSTANCE = 0xFFFFFFFF
POLL = 0.02  # wait step while a registered GPU still has Xid events to come
# Wait step when none has: new registrations and shutdown are still noticed within it, and an
# idle simulated host does not wake the exporter measured against it many times a second.
IDLE_POLL = 0.25


@dataclass
class Registration:
    mask: int
    since: float
    delivered: int = 0  # how many of the GPU's (time-sorted) Xid events this set has consumed


@dataclass
class EventSet:
    registrations: dict[int, Registration] = field(default_factory=dict)


@register_provider
class EventApi(Provider):
    def __init__(self, core: Any) -> None:
        super().__init__(core)
        self.sets: dict[int, EventSet] = {}
        self.lock = threading.Lock()

    def _set(self, handle: Any) -> EventSet:
        key = self.core.resolve(handle, "eventset")
        event_set = self.sets.get(key[1])
        if event_set is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return event_set

    @nvml_function()
    def nvmlDeviceGetSupportedEventTypes(self, handle: Any) -> int:
        return self.core.physical(handle).spec.supported_event_types

    @nvml_function()
    def nvmlEventSetCreate(self) -> Any:
        serial = self.core.next_serial()
        with self.lock:
            self.sets[serial] = EventSet()
        return self.core.issue(("eventset", serial), pynvml.c_nvmlEventSet_t)

    @nvml_function()
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        gpu = self.core.physical(handle)  # per-MIG-device registration is unsupported (3)
        event_set = self._set(eventSet)
        supported = gpu.spec.supported_event_types
        t = self.core.t()
        with self.lock:
            reg = event_set.registrations.get(gpu.index)
            if reg is None:
                skipped = sum(1 for x in gpu.spec.xid_events if x.at < t)
                reg = event_set.registrations[gpu.index] = Registration(0, t, skipped)
            reg.mask |= eventTypes & supported
        if eventTypes & ~supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # the supported part stays registered
        return None

    def _pending(self, event_set: EventSet) -> bool:
        """Whether some registered GPU has Xid events not yet delivered to this set."""
        with self.lock:
            return any(
                reg.mask & pynvml.nvmlEventTypeXidCriticalError
                and reg.delivered < len(self.core.gpus[index].spec.xid_events)
                for index, reg in event_set.registrations.items()
            )

    def _next(self, event_set: EventSet) -> Any | None:
        t = self.core.t()
        best: tuple[float, int] | None = None
        with self.lock:
            for index, reg in event_set.registrations.items():
                if not reg.mask & pynvml.nvmlEventTypeXidCriticalError:
                    continue
                events = self.core.gpus[index].spec.xid_events
                if reg.delivered < len(events) and events[reg.delivered].at <= t:
                    at = events[reg.delivered].at
                    if best is None or at < best[0]:
                        best = (at, index)
            if best is None:
                return None
            index = best[1]
            reg = event_set.registrations[index]
            event = self.core.gpus[index].spec.xid_events[reg.delivered]
            reg.delivered += 1
        data = pynvml.c_nvmlEventData_t()
        data.device = self.core.device_handle(self.core.gpus[index])
        data.eventType = pynvml.nvmlEventTypeXidCriticalError
        data.eventData = event.xid
        data.gpuInstanceId = event.gpu_instance if event.gpu_instance is not None else NO_INSTANCE
        data.computeInstanceId = (
            event.compute_instance if event.compute_instance is not None else NO_INSTANCE
        )
        return data

    @nvml_function()
    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any:
        deadline = time.monotonic() + max(0, timeoutms) / 1000.0
        while True:
            # A wait in flight ends when NVML is shut down: the set dies with the library state.
            event_set = self._set(eventSet)
            data = self._next(event_set)
            if data is not None:
                return data
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
            time.sleep(min(POLL if self._pending(event_set) else IDLE_POLL, remaining))

    @nvml_function()
    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> Any:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    @nvml_function()
    def nvmlEventSetFree(self, eventSet: Any) -> None:
        key = self.core.resolve(eventSet, "eventset")
        with self.lock:
            self.sets.pop(key[1], None)
        self.core.handles.retire(eventSet)
        return None
