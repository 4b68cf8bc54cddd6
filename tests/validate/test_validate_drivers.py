"""The load drivers: real LoadRunner workers (a stand-in speaking the worker protocol, no GPU) and
the simulator's live load hook."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.loadgen.runner import LoadRunner
from vgpumon.sim import ManualClock, create
from vgpumon.sim.live import LiveProcess, LiveValue, clear, live_pids, set_load, sm_count
from vgpumon.validate.drivers import RunnerDriver, SimDriver, same_device
from vgpumon.validate.readings import Target
from vgpumon.validate.steps import StepLoad

MIB = 1024**2

STAND_IN = textwrap.dedent(
    r"""
    import json, os, sys, threading, time
    args = sys.argv[1:]
    spec = json.loads(args[args.index("--spec") + 1])
    rank = int(args[args.index("--rank") + 1])
    mode = os.environ.get("STAND_IN_MODE", "ok")
    lock = threading.Lock()
    state = {"duty": spec["duty"], "blocks": max(1, round(spec["sm_fraction"] * 132))}

    def emit(**event):
        event.update(pid=os.getpid(), rank=rank)
        with lock:
            sys.stdout.write(json.dumps(event) + "\n")
            sys.stdout.flush()

    if mode == "error":
        emit(event="error", message="out of GPU memory on device GPU-x while allocating memory")
        sys.exit(2)
    emit(event="ready", name="Stand-in", uuid=os.environ.get("STAND_IN_UUID", "abcd"),
         sm_count=132, compute_capability="9.0", blocks=state["blocks"], threads_per_block=32,
         memory_bytes=spec["memory_bytes"], sm_clock_hz=1980000000,
         visible=os.environ.get("CUDA_VISIBLE_DEVICES"))
    stop = threading.Event()

    def read():
        for line in sys.stdin:
            msg = json.loads(line)
            if msg["cmd"] == "set":
                changes = msg["changes"]
                state["duty"] = changes.get("duty", state["duty"])
                if "sm_fraction" in changes:
                    state["blocks"] = max(1, round(changes["sm_fraction"] * 132))
                emit(event="applied", seq=msg["seq"], blocks=state["blocks"], **changes)
            elif msg["cmd"] == "stop":
                stop.set()
        stop.set()

    threading.Thread(target=read, daemon=True).start()
    t0 = time.time()
    while not stop.is_set():
        if mode == "die" and time.time() - t0 > 0.2:
            sys.exit(1)
        emit(event="status", duty=state["duty"] * 0.999, blocks=state["blocks"])
        stop.wait(0.05)
    emit(event="stopped", reason="stop", memory_freed=True)
    """
)


@pytest.fixture
def stand_in(tmp_path: Path):
    script = tmp_path / "stand_in_worker.py"
    script.write_text(STAND_IN)

    def factory(mode: str = "ok", uuid: str = "abcd"):
        import os

        env = {**os.environ, "STAND_IN_MODE": mode, "STAND_IN_UUID": uuid}

        def make(spec: Any, **kwargs: Any) -> LoadRunner:
            kwargs["env"] = env
            return LoadRunner(
                spec, worker_command=[sys.executable, str(script)], status_interval_s=0.05, **kwargs
            )

        return make

    return factory


async def test_runner_driver_changes_duty_live_and_restarts_for_memory(stand_in):
    driver = RunnerDriver("GPU-abcd1234", runner_factory=stand_in())
    try:
        first = await driver.apply(StepLoad(duty=0.5, memory_bytes=256 * MIB))
        assert [(w.blocks, w.memory_bytes, w.uuid) for w in first] == [(132, 256 * MIB, "abcd")]
        assert first[0].ready_event["visible"] == "GPU-abcd1234"
        quarter = await driver.apply(StepLoad(duty=1.0, sm_fraction=0.25, memory_bytes=256 * MIB))
        assert [w.pid for w in quarter] == [first[0].pid]  # changed live
        assert quarter[0].blocks == 33  # as the worker's "applied" event said
        assert driver.problem() is None
        bigger = await driver.apply(StepLoad(duty=0.5, memory_bytes=1024 * MIB))
        assert bigger[0].pid != first[0].pid and bigger[0].memory_bytes == 1024 * MIB
        two = await driver.apply(StepLoad(duty=0.5, memory_bytes=512 * MIB, processes=2))
        assert len({w.pid for w in two}) == 2
        assert [w.memory_bytes for w in two] == [256 * MIB, 256 * MIB]
        import asyncio

        await asyncio.sleep(0.2)
        duties = driver.measured_duty()
        assert set(duties) == {w.pid for w in two}
        assert all(d == pytest.approx(0.4995) for d in duties.values())
        assert await driver.apply(None) == []
    finally:
        await driver.close()
    await driver.close()  # idempotent


async def test_runner_driver_reports_a_worker_that_cannot_start(stand_in):
    driver = RunnerDriver("0", runner_factory=stand_in("error"))
    with pytest.raises(VgpumonError, match="out of GPU memory"):
        await driver.apply(StepLoad(duty=0.5))
    await driver.close()


async def test_runner_driver_notices_a_worker_that_died(stand_in):
    import asyncio

    driver = RunnerDriver("0", runner_factory=stand_in("die"))
    try:
        workers = await driver.apply(StepLoad(duty=0.5))
        for _ in range(100):
            if driver.problem() is not None:
                break
            await asyncio.sleep(0.05)
        assert (
            driver.problem() == f"load worker {workers[0].pid} exited with status 1 during the step"
        )
    finally:
        await driver.close()


def test_same_device_ignores_nvml_prefixes_and_case():
    assert same_device("2b62907b-8e40", "GPU-2B62907B-8E40")
    assert same_device("MIG-aa", "mig-AA")
    assert not same_device("2b62907b", "GPU-2b62907c")


# ------------------------------------------------------------------------------ sim.live


def test_live_value_keeps_its_history():
    value = LiveValue(lambda t: 7.0)
    assert value(5.0) == 7.0
    value.set(10.0, 0.25)
    value.set(20.0, 0.5)
    assert (value(9.99), value(10.0), value(15.0), value(25.0)) == (7.0, 0.25, 0.25, 0.5)
    value.set(20.0, 0.75)  # the same instant again replaces the change
    assert value(25.0) == 0.75
    value.set(15.0, 1.0)  # going back drops the later changes
    assert (value(12.0), value(30.0)) == (0.25, 1.0)


def _device_time(module: Any) -> float:
    return module._core.t()


def test_set_load_adds_and_stops_processes_and_their_memory():
    clock = ManualClock()
    sim = create("passthrough-guest", clock=clock)
    gpu = sim._core.gpus[0]
    t0 = _device_time(sim)
    used0 = gpu.memory_used(t0)
    clock.advance(1.0)
    set_load(sim, 0, duty=0.5, sm_fraction=0.25, processes=[LiveProcess(11, 100 * MIB)])
    t1 = _device_time(sim)
    clock.advance(1.0)
    t2 = _device_time(sim)
    assert gpu.activity(t2).graphics == 0.5 and gpu.activity(t2).sm == pytest.approx(0.125)
    assert gpu.activity(t0).graphics == 0.0  # the past is unchanged
    assert gpu.memory_used(t2) == used0 + 100 * MIB  # explicit memory.used pattern plus ours
    assert live_pids(sim, 0) == [11]
    set_load(sim, 0, duty=1.0, processes=[LiveProcess(12, 50 * MIB)])
    clock.advance(1.0)
    t3 = _device_time(sim)
    assert [p.pid for p in gpu.running_processes(t3)] == [403, 12]
    assert gpu.memory_used(t3) == used0 + 50 * MIB
    assert gpu.memory_used(t1 + 0.5) == used0 + 100 * MIB
    clear(sim, 0)
    clock.advance(1.0)
    assert live_pids(sim, 0) == [] and gpu.memory_used(_device_time(sim)) == used0
    assert gpu.activity(_device_time(sim)).graphics == 0.0


def test_set_load_refuses_what_cannot_be_loaded():
    sim = create("h100-mig-gpm", clock=ManualClock())
    with pytest.raises(ConfigError, match="has MIG enabled"):
        set_load(sim, 0, duty=0.5)
    with pytest.raises(ConfigError, match="no MIG device MIG-nope"):
        set_load(sim, 0, duty=0.5, mig_uuid="MIG-nope")
    with pytest.raises(ConfigError, match="no GPU 5"):
        set_load(sim, 5, duty=0.5)
    with pytest.raises(ConfigError, match="duty must be between 0 and 1"):
        set_load(sim, 1, duty=1.5)
    with pytest.raises(ConfigError, match="distinct PIDs"):
        set_load(sim, 1, duty=0.5, processes=[LiveProcess(1, 0), LiveProcess(1, 5)])
    mig = sim._core.gpus[0].gis[3].cis[0]
    assert sm_count(sim, 0, mig.uuid) == 16 and sm_count(sim, 1) == 132


async def test_sim_driver_mirrors_a_load_run():
    clock = ManualClock()
    sim = create("passthrough-guest", clock=clock)
    target = Target(0, "GPU-00000000-0000-4000-8000-000000000000", name="NVIDIA H200")
    driver = SimDriver(sim, target, context_bytes=0)
    one = await driver.apply(StepLoad(duty=0.5, sm_fraction=0.5, memory_bytes=300 * MIB))
    assert [(w.blocks, w.sm_count, w.memory_bytes) for w in one] == [(66, 132, 300 * MIB)]
    assert one[0].uuid == "00000000-0000-4000-8000-000000000000"
    again = await driver.apply(StepLoad(duty=1.0, memory_bytes=300 * MIB))
    assert again[0].pid == one[0].pid and again[0].blocks == 132
    two = await driver.apply(StepLoad(duty=0.5, memory_bytes=300 * MIB, processes=2))
    assert len(two) == 2 and {w.pid for w in two}.isdisjoint({one[0].pid})
    clock.advance(1.0)
    gpu = sim._core.gpus[0]
    assert gpu.activity(sim._core.t()).graphics == pytest.approx(0.75)  # 1 - (1 - 0.5)^2
    await driver.close()
    clock.advance(1.0)
    assert live_pids(sim, 0) == []
