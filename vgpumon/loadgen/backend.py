"""The CUDA side of a load worker: one device, its kernels, its footprint and per-launch timing.

cuda-core (``cuda.core`` from 1.0, ``cuda.core.experimental`` before) compiles the kernels with
NVRTC and launches them; the stable driver API of cuda-bindings does the rest (plain
``cuMemAlloc``, never managed memory, which can hang a GPU when oversubscribed; blocking-sync events
so a worker waiting on its GPU does not burn a CPU core). Every failure becomes a one-line
:class:`VgpumonError` that says what to do: install the extra, install a driver, pick a visible
device, ask for less memory.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from vgpumon.errors import VgpumonError, one_line
from vgpumon.install_hints import install_hint
from vgpumon.loadgen import kernels
from vgpumon.loadgen.duty import clock_from_timer, cycles_for, plausible_clock
from vgpumon.loadgen.spec import format_bytes

RING_SLOTS = 64
"""Timing slots and events, reused round-robin; the driver keeps far fewer launches in flight."""

_EVENT_FLAGS = 0x1 | 0x2  # CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING

_NO_DRIVER_MARKS = (
    "libcuda",
    "driver library",
    "display driver",
    "CUDA_ERROR_NO_DRIVER",
    "CUDA_ERROR_INSUFFICIENT_DRIVER",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
    "CUDA_ERROR_STUB_LIBRARY",
    "CUDA_ERROR_SYSTEM_NOT_READY",
)
_NO_DEVICE_MARKS = (
    "CUDA_ERROR_NO_DEVICE",
    "CUDA_ERROR_INVALID_DEVICE",
    "no CUDA-capable device",
    "device_id",
)


class CudaCallError(RuntimeError):
    """A driver call returned an error code; ``str`` carries the CUresult name."""


def import_cuda_core() -> ModuleType:
    """The cuda-core module of whichever release is installed, or a one-line install hint."""
    problems: list[str] = []
    for name in ("cuda.core", "cuda.core.experimental"):
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            problems.append(str(exc))
            continue
        if all(hasattr(module, attr) for attr in ("Device", "Program", "ProgramOptions", "launch")):
            return module
    detail = (
        f" ({one_line(problems[-1])})" if problems and "No module named" not in problems[-1] else ""
    )
    raise VgpumonError(f"cuda-core is not installed or not usable{detail}: {install_hint('load')}")


def import_driver() -> ModuleType:
    try:
        return importlib.import_module("cuda.bindings.driver")
    except ImportError as exc:
        raise VgpumonError(
            f"cuda-bindings is not installed or not usable ({one_line(str(exc))}): "
            f"{install_hint('load')}"
        ) from None


def describe_failure(exc: BaseException, stage: str, device: str) -> VgpumonError:
    """Turn whatever CUDA raised into the one-line error the user sees."""
    if isinstance(exc, VgpumonError):
        return exc
    detail = one_line(f"{type(exc).__name__}: {exc}")
    lowered = detail.lower()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = visible and visible != device
    where = f"device {device}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if shown else "")
    if "nvrtc" in lowered:
        return VgpumonError(f"NVRTC, the CUDA runtime compiler, failed while {stage}: {detail}")
    if any(mark.lower() in lowered for mark in _NO_DRIVER_MARKS):
        return VgpumonError(f"no usable NVIDIA CUDA driver on this machine: {detail}")
    if any(mark.lower() in lowered for mark in _NO_DEVICE_MARKS):
        return VgpumonError(f"no CUDA GPU found for {where}: {detail}")
    if "out_of_memory" in lowered:
        return VgpumonError(f"out of GPU memory on {where} while {stage}: {detail}")
    return VgpumonError(f"CUDA failed on {where} while {stage}: {detail}")


@dataclass(frozen=True)
class DeviceFacts:
    """What the worker reports about the device it actually got."""

    name: str
    uuid: str
    sm_count: int
    compute_capability: tuple[int, int]
    memory_total_bytes: int

    @property
    def arch(self) -> str:
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


class CudaBackend:
    """Device 0 of this process (the worker's ``CUDA_VISIBLE_DEVICES`` picks which GPU that is)."""

    def __init__(self, memory_bytes: int, device_label: str) -> None:
        self._label = device_label
        self._cc_mod = import_cuda_core()
        self._drv = import_driver()
        self._footprint: Any = None
        self._timing: Any = None
        self._events: list[Any] = []
        self._slot = 0
        self._host_slot = (ctypes.c_uint64 * kernels.TIMING_SLOT_WORDS)()
        self.timer_ok = True
        stage = "starting the CUDA driver"
        try:
            self._call("cuInit", 0)
            (count,) = self._call("cuDeviceGetCount")
            if int(count) < 1:
                raise VgpumonError(
                    f"no CUDA GPU found for device {device_label}: the driver sees none"
                )
            stage = "opening the device"
            self._dev = self._cc_mod.Device(0)
            self._dev.set_current()
            cc = self._dev.compute_capability
            free, total = self._call("cuMemGetInfo")
            self.facts = DeviceFacts(
                name=str(self._dev.name),
                uuid=str(self._dev.uuid),
                sm_count=int(self._dev.properties.multiprocessor_count),
                compute_capability=(int(cc[0]), int(cc[1])),
                memory_total_bytes=int(total),
            )
            self._stream = self._dev.create_stream()
            stage = "compiling the kernels with NVRTC"
            self._kernels = self._compile()
            stage = "allocating memory"
            self.memory_bytes = memory_bytes
            self._allocate(memory_bytes, int(free))
            self._events = [self._call("cuEventCreate", _EVENT_FLAGS)[0] for _ in range(RING_SLOTS)]
        except BaseException as exc:
            self.close()
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            raise describe_failure(exc, stage, device_label) from None

    # ------------------------------------------------------------------------------ setup

    def _call(self, name: str, *args: Any) -> tuple[Any, ...]:
        result = getattr(self._drv, name)(*args)
        if not isinstance(result, tuple):
            result = (result,)
        err, rest = result[0], result[1:]
        code = int(getattr(err, "value", err))
        if code != 0:
            try:
                err_name = self._drv.cuGetErrorName(err)[1]
                text = err_name.decode() if isinstance(err_name, bytes) else str(err_name)
            except (TypeError, ValueError, IndexError, AttributeError, RuntimeError):
                text = f"CUresult {code}"
            raise CudaCallError(f"{name}: {text}")
        return rest

    def _compile(self) -> dict[str, Any]:
        cc = self.facts.compute_capability
        names = kernels.kernels_for(cc)
        options = self._cc_mod.ProgramOptions(arch=self.facts.arch)
        program = self._cc_mod.Program(kernels.source_for(cc), "c++", options)
        code = program.compile("cubin")
        return {kind: code.get_kernel(kernels.KERNEL_NAMES[kind]) for kind in names}

    def _allocate(self, memory_bytes: int, free: int) -> None:
        slot_bytes = kernels.TIMING_SLOT_WORDS * 8
        (self._timing,) = self._call("cuMemAlloc", RING_SLOTS * slot_bytes)
        self._call("cuMemsetD8", self._timing, 0, RING_SLOTS * slot_bytes)
        if memory_bytes > 0:
            try:
                (self._footprint,) = self._call("cuMemAlloc", memory_bytes)
            except CudaCallError as exc:
                raise VgpumonError(
                    f"cannot allocate {format_bytes(memory_bytes)} on device {self._label} "
                    f"({format_bytes(free)} free of "
                    f"{format_bytes(self.facts.memory_total_bytes)}): {exc}"
                ) from None
            # Touch every page so the footprint is resident, not just reserved address space.
            self._call("cuMemsetD8", self._footprint, 0, memory_bytes)
        self._dev.sync()

    # ---------------------------------------------------------------------------- launches

    def supports(self, kind: str) -> bool:
        return kind in self._kernels

    def launch(self, kind: str, blocks: int, threads: int, cycles: int) -> int:
        """Queue one kernel on the worker's stream; return its slot for :meth:`wait`."""
        slot = self._slot
        self._slot = (self._slot + 1) % RING_SLOTS
        timing_ptr = int(self._timing) + slot * kernels.TIMING_SLOT_WORDS * 8
        args: list[Any] = [ctypes.c_uint64(cycles), timing_ptr]
        if kind == "stream":
            args += [int(self._footprint), ctypes.c_uint64(self.memory_bytes // 16)]
        config = self._cc_mod.LaunchConfig(grid=blocks, block=threads)
        self._cc_mod.launch(self._stream, config, self._kernels[kind], *args)
        self._call("cuEventRecord", self._events[slot], self._stream.handle)
        return slot

    def wait(self, slot: int) -> tuple[int, int]:
        """Block until the launch in ``slot`` finished; return (cycles, ns) its block 0 measured."""
        self._call("cuEventSynchronize", self._events[slot])
        offset = slot * kernels.TIMING_SLOT_WORDS * 8
        self._call(
            "cuMemcpyDtoH",
            ctypes.addressof(self._host_slot),
            self._drv.CUdeviceptr(int(self._timing) + offset),
            kernels.TIMING_SLOT_WORDS * 8,
        )
        return int(self._host_slot[0]), int(self._host_slot[1])

    def calibrate(self) -> float:
        """SM cycles per second now, measured with single-block spins.

        A first short spin gives a rough clock; a 0.2 s spin then lets an idle GPU leave its idle
        clock; a last 50 ms spin is the measurement. ``%globaltimer`` is checked against the host's
        clock and, where it is not usable, host timing of a synchronous launch is used instead
        (``timer_ok`` is then False and the loop counts busy time from cycles, unmeasured).
        """
        hz = self._measure(2_000_000)
        hz = self._measure(cycles_for(0.2, hz))
        return self._measure(cycles_for(0.05, hz))

    def _measure(self, cycles: int) -> float:
        start = time.perf_counter()
        slot = self.launch("spin", 1, 32, cycles)
        measured_cycles, ns = self.wait(slot)
        wall = time.perf_counter() - start
        hz = clock_from_timer(measured_cycles, ns, wall)
        self.timer_ok = hz is not None
        if hz is not None:
            return hz
        hz = cycles / max(wall, 1e-6)
        if not plausible_clock(hz):
            raise VgpumonError(
                f"cannot measure the SM clock on device {self._label}: "
                f"{cycles} cycles took {wall:.6f} s"
            )
        return hz

    def synchronize(self) -> None:
        self._stream.sync()

    def close(self) -> None:
        """Wait for queued work, free every allocation and event; safe to call twice."""
        stream = getattr(self, "_stream", None)
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.sync()
        for event in self._events:
            self._free("cuEventDestroy", event)
        self._events = []
        for attr in ("_footprint", "_timing"):
            ptr = getattr(self, attr, None)
            if ptr is not None:
                self._free("cuMemFree", ptr)
                setattr(self, attr, None)
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
            self._stream = None

    def _free(self, name: str, handle: Any) -> None:
        with contextlib.suppress(Exception):
            self._call(name, handle)
