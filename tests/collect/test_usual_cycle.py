"""A one-GPU host's usual cycle wakes the GPU's worker and the event loop, and no other thread
(issue 31, finding 4): the loop times the cycles and watches the deadline with a timer; the GPU's
worker reads the GPU and builds the snapshot. A hung collector is still cut off at the deadline.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import vgpumon.collect.sampler as sampler_module
from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session

HUNG_LATER = """
name: temperature-hangs-later
description: the one GPU's temperature call hangs from 2 s on; the rest answers
seed: 4
gpus:
  - model: h100-sxm-80gb
    load: {duty: 0.5}
faults:
  - {kind: hang, function: nvmlDeviceGetTemperature, gpus: [0], from: 2s}
"""


async def until(check: Callable[[], bool], seconds: float = 20.0) -> None:
    give_up = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < give_up, "condition not met in time"
        await asyncio.sleep(0.02)


class Running:
    """A sampler's run() on this loop, the snapshots it published and where each was built."""

    def __init__(self, sampler: Sampler, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sampler = sampler
        self.snaps: list[Snapshot] = []
        self.built_on: list[str] = []
        # where each snapshot is put together (the cycle's end, on whichever thread ends it)
        real = Sampler._assemble if hasattr(Sampler, "_assemble") else Sampler._cycle

        def assemble(this: Sampler, *args: Any) -> Snapshot:
            self.built_on.append(threading.current_thread().name)
            return real(this, *args)

        monkeypatch.setattr(Sampler, real.__name__, assemble)
        sampler.on_snapshot(self.snaps.append)
        self.stop = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(sampler.run(self.stop))

    async def end(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 10)


def timeslices() -> dict[str, int]:
    """How many times each of this process's threads has been put on a CPU, by kernel name."""
    out: dict[str, int] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                name = comm.read().strip()
            with open(f"/proc/self/task/{task}/schedstat") as stat:
                count = int(stat.read().split()[2])
        except (OSError, IndexError, ValueError):
            continue
        out[name] = out.get(name, 0) + count
    return out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads Linux's /proc")
async def test_the_usual_cycle_wakes_the_gpus_worker_and_not_the_cycle_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sampler_module, "SYSTEM_EVERY_SECONDS", 1000.0)  # no GPU count due
    sampler = Sampler(open_session(sim="passthrough-guest"), SamplerConfig(interval_seconds=0.05))
    running = Running(sampler, monkeypatch)
    try:
        await until(lambda: len(running.snaps) >= 3)
        before = timeslices()
        mark = len(running.snaps)
        await until(lambda: len(running.snaps) >= mark + 12)
        after = timeslices()
    finally:
        await running.end()
        sampler.close()
    woken = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    assert woken.get("cycle", 0) == 0, woken  # the cycle thread slept through 12 cycles
    assert woken["gpu0"] >= 12, woken
    # The first cycle counts the GPUs (the system worker: an ordinary cycle); then every cycle
    # is built on the GPU's worker.
    assert running.built_on[0] == "vgpumon-cycle"
    assert set(running.built_on[1:]) == {"vgpumon-gpu0"}, running.built_on
    stamps = [s.timestamp for s in running.snaps]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert [s.health.cycles_total for s in running.snaps] == list(range(1, len(running.snaps) + 1))


async def test_a_collector_hanging_in_a_usual_cycle_is_cut_off_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "temperature-hangs-later.yaml"
    path.write_text(HUNG_LATER)
    session = open_session(sim=str(path))
    sampler = Sampler(session, SamplerConfig(interval_seconds=0.1, deadline_seconds=0.4))
    running = Running(sampler, monkeypatch)

    def temperature_failed(snap: Snapshot) -> bool:
        return not next(c for c in snap.collectors if c.name == "temperature").success

    try:
        await until(lambda: "vgpumon-gpu0" in running.built_on)  # usual cycles run
        await until(lambda: any(temperature_failed(s) for s in running.snaps))
        cut = next(s for s in running.snaps if temperature_failed(s))
        gpu = cut.gpus[0]
        # Cut off by the event loop's timer: the GPU stays up with what it read before.
        assert gpu.up and gpu.power_watts is not None and not cut.health.wedged
        assert gpu.temperatures.gpu_celsius is None
        assert cut.health.last_cycle_duration_seconds is not None
        assert cut.health.last_cycle_duration_seconds >= 0.4
        assert running.built_on[running.snaps.index(cut)] == "MainThread"
        session.module.release_hangs()
        # The call returns, the collector is read again, and the usual cycles come back.
        mark = len(running.snaps)
        await until(
            lambda: (
                any(not temperature_failed(s) for s in running.snaps[mark:])
                and running.built_on[-1] == "vgpumon-gpu0"
            )
        )
    finally:
        session.module.release_hangs()
        await running.end()
        sampler.close()
