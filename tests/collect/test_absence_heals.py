"""Absence that heals: a transient answer never removes data for good (issue 12, "Lost data").

Each test injects a short fault window with the simulator's fault engine and checks that what the
window took away comes back: "not supported" is re-probed after the session's re-probe period, a
lost GPU keeps its identity, a failed vGPU list keeps the instances, and a device count that
failed once does not pin ``up`` at 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.collect.registry import every_cycle
from vgpumon.model import Gpu, Snapshot
from vgpumon.nvml.session import REPROBE_SECONDS, NvmlSession
from vgpumon.sim import ManualClock, create, load_scenario

ONE_H100 = """
name: heal
description: one H100 with a fault window
seed: 5
gpus:
  - model: h100-sxm-80gb
    load: {duty: 0.5}
faults:
"""


class Host:
    """A sampler over a scenario file, the session's re-probe clock being the scenario clock."""

    def __init__(self, path: Path) -> None:
        self.clock = ManualClock()
        self.start = self.clock.now()
        module = create(load_scenario(str(path)), self.clock)
        self.session = NvmlSession(module, "sim", clock=self.clock.now)
        self.session.init()
        self.sampler = Sampler(
            self.session,
            SamplerConfig(deadline_seconds=5.0, cadences=every_cycle()),
            clock=self.clock.now,
        )

    async def at(self, t: float) -> Snapshot:
        self.clock.advance(self.start + t - self.clock.now())
        return await self.sampler.cycle()

    def close(self) -> None:
        self.sampler.close()


@pytest.fixture
def host(tmp_path: Path) -> Any:
    made: list[Host] = []

    def make(text: str) -> Host:
        path = tmp_path / f"s{len(made)}.yaml"
        path.write_text(text)
        h = Host(path)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def _values(obj: Any) -> dict[str, Any]:
    """A model object's fields by name (the model's classes have slots, no ``__dict__``)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def _known(gpu: Gpu) -> set[str]:
    """Names of the Gpu fields that hold a value (None and empty collections are no value)."""
    out = set()
    for name, value in _values(gpu).items():
        if value is None or value == () or value == {}:
            continue
        if hasattr(value, "__dataclass_fields__"):
            out |= {f"{name}.{k}" for k, v in _values(value).items() if v is not None and v != ()}
        else:
            out.add(name)
    return out


async def test_a_transient_not_supported_on_power_is_read_again_the_next_cycle(host: Any) -> None:
    """Issue 19, finding 6: a reading that comes back is exported from the next cycle."""
    h = host(
        ONE_H100 + "  - {kind: error, function: nvmlDeviceGetPowerUsage, code: not_supported,"
        " from: 2s, until: 7s}\n"
    )
    assert (await h.at(0)).gpus[0].power_watts is not None
    assert (await h.at(3)).gpus[0].power_watts is None  # the window: absent
    assert (await h.at(8)).gpus[0].power_watts is not None  # the first cycle after it


async def test_a_call_never_supported_is_cached_until_the_reprobe(host: Any) -> None:
    h = host(
        ONE_H100 + "  - {kind: error, function: nvmlDeviceGetPowerUsage, code: not_supported,"
        " until: 7s}\n"
    )
    assert (await h.at(0)).gpus[0].power_watts is None  # never answered: cached
    assert (await h.at(10)).gpus[0].power_watts is None  # still cached, not asked again
    assert (await h.at(10 + REPROBE_SECONDS)).gpus[0].power_watts is not None


async def test_a_ten_second_window_on_every_call_loses_nothing_after_it(host: Any) -> None:
    """NOT_SUPPORTED from every call for 10 s: memory, power, temperature, utilization and the
    rest are back in the first cycle after the window, not a re-probe period later."""
    h = host(
        ONE_H100 + "  - {kind: error, function: '*', code: not_supported, from: 2s, until: 12s,"
        " except: [nvmlDeviceGetHandleByIndex, nvmlDeviceGetUUID]}\n"
    )
    await h.at(0)
    before = _known((await h.at(1)).gpus[0])
    await h.at(5)
    during = (await h.at(11)).gpus[0]
    assert during.up and during.power_watts is None
    after = _known((await h.at(13)).gpus[0])
    assert before - after == set()


async def test_device_count_not_supported_for_a_moment_does_not_pin_up_at_0(host: Any) -> None:
    # While every GPU answers the count is asked every SYSTEM_EVERY_SECONDS (10 s): the window
    # covers the second time it is asked; then it is asked every cycle until it answers.
    h = host(
        ONE_H100 + "  - {kind: error, function: nvmlDeviceGetCount, code: not_supported,"
        " from: 10s, until: 12s}\n"
    )
    assert (await h.at(0)).health.up
    assert (await h.at(5)).health.up  # not asked: the window has not begun anyway
    assert not (await h.at(10.5)).health.up
    assert not (await h.at(11.5)).health.up
    assert (await h.at(12.5)).health.up


async def test_a_lost_gpu_keeps_its_identity_labels(host: Any) -> None:
    h = host(ONE_H100 + "  - {kind: gpu_lost, gpus: [0], from: 2s, until: 60s}\n")
    up = (await h.at(0)).gpus[0]
    down = (await h.at(3)).gpus[0]
    assert not down.up
    identity = ("name", "pci_bus_id", "serial", "brand", "architecture", "compute_capability")
    assert all(getattr(up, f) is not None for f in identity)
    assert {f: getattr(down, f) for f in identity} == {f: getattr(up, f) for f in identity}


VGPU_HOST = """
name: vgpu-list-fails
description: a vGPU host whose active-vGPU list fails for a few seconds
seed: 9
gpus:
  - model: l40s
    virtualization_mode: host_vgpu
    vgpu:
      types:
        - {id: 1152, name: "NVIDIA L40S-8Q", framebuffer: 8GiB, max_instances: 6}
      instances:
        - {id: 1, type: "NVIDIA L40S-8Q", vm_id: vm-one}
        - {id: 2, type: "NVIDIA L40S-8Q", vm_id: vm-two}
faults:
  - {kind: error, function: nvmlDeviceGetActiveVgpus, code: unknown, from: 2s, until: 4s}
"""


async def test_a_failed_vgpu_list_is_not_zero_instances(host: Any) -> None:
    h = host(VGPU_HOST)
    before = (await h.at(0)).gpus[0]
    assert len(before.vgpu_instances) == 2
    during = await h.at(3)
    assert [v.vgpu_id for v in during.gpus[0].vgpu_instances] == [1, 2]
    assert any(e.function == "nvmlDeviceGetActiveVgpus" for e in during.nvml_errors)
    assert len((await h.at(5)).gpus[0].vgpu_instances) == 2


async def test_the_gpus_are_counted_every_cycle_only_while_something_is_amiss(host: Any) -> None:
    """While every GPU answers, the system phase (the GPU count) runs every SYSTEM_EVERY_SECONDS,
    not every cycle; a lost GPU brings it back to every cycle, until the GPU is re-acquired."""
    from vgpumon.collect.sampler import SYSTEM_EVERY_SECONDS

    h = host(ONE_H100 + "  - {kind: gpu_lost, gpus: [0], from: 15s, until: 18s}\n")
    counted: list[float] = []
    real = h.session.module.nvmlDeviceGetCount

    def count() -> int:
        counted.append(h.clock.now() - h.start)
        return int(real())

    h.session.module.nvmlDeviceGetCount = count
    for t in range(0, 15):
        assert (await h.at(float(t))).gpus[0].up
    assert counted == [0.0, SYSTEM_EVERY_SECONDS]  # the first cycle, then every 10 s
    counted.clear()
    for t in (15.5, 16.5, 17.5):
        assert not (await h.at(t)).gpus[0].up
    # lost at 15.5, found by its readers; from the next cycle on, counted every cycle
    assert counted == [16.5, 17.5]
    counted.clear()
    await asyncio.sleep(1.1)  # the re-acquire's back-off runs on the real clock
    for t in range(0, 15):
        snap = await h.at(18.5 + t)
        assert snap.gpus[0].up
    assert counted == [18.5, 28.5]  # re-acquired, then every 10 s again
