"""Usage counters against load known in advance (docs/metering.md, "Proof").

The scenario ``metering-known-load`` runs vGPUs and processes at duties fixed by its YAML; the
expected counters are computed here from those duties alone (duty x time, bytes x time, watts x
time), not from anything vgpumon read, and compared within the bounds docs/metering.md states:
busy seconds within 2 %, energy split adding up to the GPU counter's increase within 1 %.
"""

from __future__ import annotations

import asyncio

import pytest

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.metering import MeteringConfig, MeteringStage
from vgpumon.collect.registry import every_cycle
from vgpumon.collect.sampler import Sampler
from vgpumon.model import Gpu, GpuMetering, Snapshot
from vgpumon.nvml.loader import open_session
from vgpumon.sim.clock import ManualClock

GIB = 1 << 30
SECONDS = 140  # cycles of 1 s after the first
# From the scenario's YAML: (vGPU id) -> SM duty as a function of scenario time.
VGPU_DUTY = {
    1: lambda t: 0.5 if t < 100 else 0.0,
    2: lambda t: 0.2 if t < 60 else 0.4 if t < 100 else 0.0,
    3: lambda t: 0.0,
}
VGPU_FRAMEBUFFER = {1: 3 * GIB, 2: 1 * GIB, 3: 2 * GIB}
PROCESS_DUTY = {7101: 0.3, 7102: 0.2}
PROCESS_MEMORY = {7101: 10 * GIB, 7102: 6 * GIB}
POWER_WATTS = (300.0, 400.0)


def integral(duty: object, start: float, end: float, step: float = 0.001) -> float:
    """Duty x time by the midpoint rule on a fine grid (independent of the sampler's cycles)."""
    n = round((end - start) / step)
    f = duty  # type: ignore[assignment]
    return sum(f(start + (i + 0.5) * step) for i in range(n)) * step  # type: ignore[operator]


def run(cycles: int, *, energy_cadence: float = 0.0, gap_at: int | None = None) -> Snapshot:
    async def go() -> Snapshot:
        clock = ManualClock()
        session = open_session(sim="metering-known-load", clock=clock)
        cadences = {**every_cycle(), "energy": energy_cadence}
        sampler = Sampler(
            session,
            SamplerConfig(cadences=cadences),
            clock=clock.now,
            enrichers=[MeteringStage(MeteringConfig(interval_seconds=1.0))],
        )
        try:
            snap = await sampler.cycle()
            for i in range(cycles):
                clock.advance(30.0 if i == gap_at else 1.0)
                snap = await sampler.cycle()
            return snap
        finally:
            sampler.close()

    return asyncio.run(go())


@pytest.fixture(scope="module")
def snapshot() -> Snapshot:
    return run(SECONDS)


def metering(g: Gpu) -> GpuMetering:
    assert g.metering is not None
    return g.metering


def test_vgpu_busy_seconds_match_duty_times_time(snapshot: Snapshot) -> None:
    m = metering(snapshot.gpus[0])
    got = {v.vgpu_id: v.usage.busy_seconds for v in m.vgpus}
    for vgpu_id, duty in VGPU_DUTY.items():
        expected = integral(duty, 0.0, SECONDS)
        assert got[vgpu_id] == pytest.approx(expected, rel=0.02, abs=0.02), vgpu_id
    # The issue's own example: a vGPU at 50 % for 100 s accrues 50 busy seconds.
    assert got[1] == pytest.approx(50.0, rel=0.02)


def test_framebuffer_byte_seconds(snapshot: Snapshot) -> None:
    m = metering(snapshot.gpus[0])
    for v in m.vgpus:
        expected = VGPU_FRAMEBUFFER[v.vgpu_id] * SECONDS
        assert v.usage.memory_byte_seconds == pytest.approx(expected, rel=0.01)


def test_process_busy_and_memory(snapshot: Snapshot) -> None:
    m = metering(snapshot.gpus[1])
    by_pid = {p.pid: p for p in m.processes}
    for pid, duty in PROCESS_DUTY.items():
        assert by_pid[pid].usage.busy_seconds == pytest.approx(duty * SECONDS, rel=0.02)
        expected = PROCESS_MEMORY[pid] * SECONDS
        assert by_pid[pid].usage.memory_byte_seconds == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("cadence", [0.0, 10.0])
def test_energy_split_adds_up_to_the_gpu_counter(cadence: float) -> None:
    snap = run(SECONDS, energy_cadence=cadence)
    g = snap.gpus[0]
    m = metering(g)
    assert m.energy_joules_metered is not None
    # The counter's increase is the board's constant power over the metered time (up to the
    # last read of a cadenced counter).
    covered = SECONDS - (SECONDS % cadence if cadence else 0)
    assert m.energy_joules_metered == pytest.approx(POWER_WATTS[0] * covered, rel=0.01)
    tenants = sum(v.usage.energy_joules or 0.0 for v in m.vgpus)
    total = tenants + m.unattributed_energy_joules["vgpu"]
    assert total == pytest.approx(m.energy_joules_metered, rel=0.01)
    # Busy vGPUs pay for their busy time; the idle holder only a share of the idle power.
    energy = {v.vgpu_id: v.usage.energy_joules or 0.0 for v in m.vgpus}
    assert energy[1] > energy[2] > energy[3] > 0


def test_bare_gpu_energy_is_unattributed_without_pods(snapshot: Snapshot) -> None:
    m = metering(snapshot.gpus[1])
    assert m.pods == ()
    assert m.unattributed_energy_joules["pod"] == pytest.approx(m.energy_joules_metered)


def test_idle_holder_seconds(snapshot: Snapshot) -> None:
    idle = {v.vgpu_id: v.idle_seconds for v in metering(snapshot.gpus[0]).vgpus}
    assert idle[3] == pytest.approx(SECONDS)  # never used
    assert idle[1] == pytest.approx(SECONDS - 100, abs=1.0)  # idle since t = 100 s
    assert idle[2] == pytest.approx(SECONDS - 100, abs=1.0)  # idle since t = 100 s too


def test_a_gap_is_not_integrated_and_is_counted() -> None:
    snap = run(40, gap_at=10)  # 39 cycles of 1 s and one gap of 30 s
    m = metering(snap.gpus[0])
    assert m.unmetered_seconds == pytest.approx(30.0)
    busy = {v.vgpu_id: v.usage.busy_seconds for v in m.vgpus}
    # vGPU 1 runs at 50 % all along: only the 39 metered seconds count.
    assert busy[1] == pytest.approx(0.5 * 39, rel=0.02)
    # The gap's energy is known (the counter) but not whose: it stays unattributed.
    assert m.unattributed_energy_joules["vgpu"] == pytest.approx(POWER_WATTS[0] * 30, rel=0.01)
