"""The driver surfaces of R550-R610 on scenarios whose answers are worked out by hand.

Each scenario's YAML says what the driver reports (recovery-reset, confidential-computing,
accounting-known-load, mig-timesliced-vgpu); the expected values below come from it alone. A
driver that lacks a call leaves the value absent and says why in the collector status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.metering import MeteringConfig, MeteringStage
from vgpumon.collect.registry import every_cycle
from vgpumon.collect.sampler import Sampler
from vgpumon.model import Gpu, Snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim import Scenario, create, parse_scenario
from vgpumon.sim.clock import ManualClock
from vgpumon.testing import PACKAGE_DIR, SimHostFactory

GIB = 1 << 30
MIB = 1 << 20


def builtin_text(name: str) -> str:
    with open(f"{PACKAGE_DIR}sim/scenarios/{name}.yaml", encoding="utf-8") as f:
        return f.read()


def on_driver(name: str, version: str) -> Scenario:
    """A built-in scenario on an older driver."""
    text = builtin_text(name)
    old = next(line for line in text.splitlines() if line.strip().startswith("version:"))
    return parse_scenario(text.replace(old, f'  version: "{version}"'), name)


def run(scenario: str | Scenario, times: Sequence[float], metering: bool = False) -> list[Snapshot]:
    """Snapshots at the given scenario times (one cycle each)."""

    async def go() -> list[Snapshot]:
        clock = ManualClock()
        module = create(scenario, clock=clock)
        session = NvmlSession(module, f"sim:{module.scenario.name}")
        session.init()
        stages = [MeteringStage(MeteringConfig(interval_seconds=1.0))] if metering else []
        # every value read at every cycle: a snapshot is the scenario at its time, and the
        # metering bounds are those of a cycle-by-cycle reading (serve's cadences: test_cadences)
        config = SamplerConfig(cadences=every_cycle())
        sampler = Sampler(session, config, clock=clock.now, enrichers=stages)
        out = []
        try:
            now = 0.0
            for t in times:
                clock.advance(t - now)
                now = t
                out.append(await sampler.cycle())
            return out
        finally:
            sampler.close()

    return asyncio.run(go())


def test_recovery_action_follows_the_timeline_and_clears() -> None:
    before, during, after = run("recovery-reset", [1.0, 3.0, 25.0])
    assert [g.recovery.action for g in before.gpus] == ["none", "none", "none"]
    assert during.gpus[0].recovery.action == "gpu_reset"
    assert after.gpus[0].recovery.action == "none"
    assert during.gpus[1].recovery.tpc_repair_pending is True
    assert during.gpus[1].recovery.channel_repair_pending is False
    assert during.gpus[2].recovery.unrepairable_memory is False  # from 20 s on
    assert after.gpus[2].recovery.unrepairable_memory is True


def test_an_older_driver_leaves_recovery_absent_and_says_why() -> None:
    (snap,) = run(on_driver("recovery-reset", "550.54.14"), [3.0])
    assert all(g.recovery.action is None for g in snap.gpus)  # never "none" made up
    assert all(g.recovery.tpc_repair_pending is None for g in snap.gpus)
    status = next(c for c in snap.collectors if c.name == "recovery")
    assert status.success and status.unsupported == {"function_not_found": 3}


def test_confidential_computing_state_and_ready_after_attestation() -> None:
    early, late = run("confidential-computing", [5.0, 25.0])
    cc = early.gpus[0].conf_compute
    assert (cc.feature_enabled, cc.environment, cc.multi_gpu_mode) == (
        True,
        "prod",
        "protected_pcie",
    )
    assert cc.cpu_capability == "amd_sev_snp" and cc.devtools_mode is False
    assert cc.ready is False and late.gpus[0].conf_compute.ready is True
    assert cc.protected_memory_total_bytes == 70 * GIB
    assert cc.protected_memory_used_bytes == 12 * GIB
    assert cc.unprotected_memory_bytes == (81559 * MIB - 70 * GIB) // 1024 * 1024


def test_cc_off_has_no_protected_memory() -> None:
    (snap,) = run("baremetal-8xh100", [1.0])
    cc = snap.gpus[0].conf_compute
    assert cc.feature_enabled is False and cc.protected_memory_total_bytes is None


def test_migration_payload_and_reservations() -> None:
    (snap,) = run("mig-timesliced-vgpu", [5.0])
    g = snap.gpus[0]
    sizes = {v.vgpu_id: v.migration_state_bytes for v in g.vgpu_instances}
    assert sizes == {201: 6 * GIB + 64 * MIB, 202: 3 * GIB, 203: 16 * GIB + 64 * MIB}
    types = {t.type_id: t for t in g.vgpu_types}
    assert types[2301].framebuffer_reservation_bytes == 256 * MIB
    assert types[2301].gsp_heap_bytes == 96 * MIB
    assert types[2301].bar1_bytes == 256 * MIB
    assert types[2301].footprint_bytes == 10 * GIB + 352 * MIB
    assert types[2302].footprint_bytes == 20 * GIB + 640 * MIB


def test_capacity_per_gpu_instance() -> None:
    (snap,) = run("mig-timesliced-vgpu", [5.0])
    gis = {gi.id: gi for gi in snap.gpus[0].mig_instances}
    for gi in (1, 2):  # GI 1: two 3-10C in 4 slots; GI 2: one 3-20C in 2 of 4
        assert gis[gi].vgpu_heterogeneous_mode is True
        fits = {c.type_id: c.creatable_instances for c in gis[gi].vgpu_capacity}
        assert fits == {2301: 2, 2302: 1}


def test_migration_size_absent_before_r565() -> None:
    (snap,) = run(on_driver("mig-timesliced-vgpu", "550.54.14"), [5.0])
    assert all(v.migration_state_bytes is None for v in snap.gpus[0].vgpu_instances)
    status = next(c for c in snap.collectors if c.name == "vgpu_migration")
    assert status.unsupported == {"function_not_found": 1}


# Accounting: each process runs from t = 0 at a constant SM utilization (the YAML).
DUTY = {8101: 0.3, 8102: 0.5, 8201: 0.3, 8202: 0.5, 8301: 0.3, 8302: 0.5}
METHOD = {0: "accounting", 1: "accounting_average", 2: "process_samples"}


def test_accounting_records_are_the_drivers_integral() -> None:
    (snap,) = run("accounting-known-load", [40.0])
    g0, g1, g2 = snap.gpus
    assert g0.accounting_enabled and g1.accounting_enabled and g2.accounting_enabled is False
    r = {rec.pid: rec for rec in g0.accounting or ()}
    # 40 s at one sample per 0.2 s from t = 0 inclusive: 201 samples of 30 %
    assert r[8101].sample_count == 201 and r[8101].sum_gpu_util_percent == 201 * 30
    assert abs((r[8101].busy_seconds or 0) - 0.3 * 40) < 1e-3
    assert {rec.pid: rec.sample_count for rec in g1.accounting or ()} == {8201: None, 8202: None}
    assert g2.accounting is None


def test_process_busy_seconds_by_method_within_their_bounds() -> None:
    snaps = run("accounting-known-load", [float(t) for t in range(0, 61)], metering=True)
    last = snaps[-1]
    for g in last.gpus:
        assert g.metering is not None
        assert g.metering.methods["process"] == METHOD[g.index]
        for p in g.metering.processes:
            assert p.busy_method == METHOD[g.index]
            expected = DUTY[p.pid] * 60.0  # counters start at the first cycle, t = 0
            # docs/metering.md: accounting (v2) within one sample period of duty per process;
            # the lifetime average rounds to a whole percent; samples within one cycle.
            bound = {0: 0.2, 1: 0.005 * 60 + 0.2, 2: DUTY[p.pid] * 1.0}[g.index]
            assert abs(p.usage.busy_seconds - expected) <= bound, (g.index, p.pid)


# vdi-encoder-contention: best effort, encoder demands 0.9, 0.9, 0.2 (sum 2.0) -> shares of the
# encoder 0.45, 0.45, 0.10; graphics demands 0.1, 0.1, 0.05 fit, so each gets its own.
ENCODER_SHARE = {1: 0.45, 2: 0.45, 3: 0.10}
GRAPHICS_SHARE = {1: 0.10, 2: 0.10, 3: 0.05}


def test_encoder_scheduler_logs_per_engine(sim_host: SimHostFactory) -> None:
    host = sim_host("vdi-encoder-contention")
    asyncio.run(host.cycle())  # the graphics log answers through _v2: the encoders from now on
    host.advance(1.0)
    first = asyncio.run(host.cycle())
    host.advance(20.0)
    last = asyncio.run(host.cycle())
    g0, g1 = first.gpus[0], last.gpus[0]
    engines = {s.engine: s for s in g1.vgpu_encoder_schedulers}
    assert set(engines) == {"nvenc0", "nvenc1"}
    assert [s.engine for s in g1.vgpu_schedulers] == ["graphics"]

    def rates(now: Gpu, before: Gpu, engine: str) -> dict[int, float]:
        pick = (
            (lambda g: g.vgpu_schedulers)
            if engine == "graphics"
            else (lambda g: g.vgpu_encoder_schedulers)
        )
        a = next(s for s in pick(before) if s.engine == engine)
        b = next(s for s in pick(now) if s.engine == engine)
        start = {u.vgpu_id: u.run_seconds_total for u in a.usage}
        return {u.vgpu_id: (u.run_seconds_total - start[u.vgpu_id]) / 20.0 for u in b.usage}

    for vgpu, share in ENCODER_SHARE.items():
        assert abs(rates(g1, g0, "nvenc0")[vgpu] - share) < 0.01
    for vgpu, share in GRAPHICS_SHARE.items():
        assert abs(rates(g1, g0, "graphics")[vgpu] - share) < 0.01
    assert all(r == 0.0 for r in rates(g1, g0, "nvenc1").values())


def test_no_encoder_schedulers_before_the_v2_log(sim_host: SimHostFactory) -> None:
    host = sim_host("kvm-vgpu-timesliced")  # R580: no _v2 log, no engine ids
    asyncio.run(host.cycle())
    host.advance(1.0)
    snap = asyncio.run(host.cycle())
    assert all(g.vgpu_encoder_schedulers == () for g in snap.gpus)
    assert any(g.vgpu_schedulers for g in snap.gpus)  # graphics still read


def test_encoder_share_against_due_under_the_one_starvation_rule(
    sim_host: SimHostFactory,
) -> None:
    """On the encoder vGPU 3 receives 10 % of a third due and is held off for what it asked
    beyond: starved there (docs/verdicts.md), while on the graphics engine every vGPU gets what
    it asks for and none is starved."""
    host = sim_host("vdi-encoder-contention")
    snap = asyncio.run(host.cycle())
    for _ in range(14):
        host.advance(5.0)
        snap = asyncio.run(host.cycle())
    g = snap.gpus[0]
    nvenc0 = next(s for s in g.vgpu_encoder_schedulers if s.engine == "nvenc0")
    verdicts = {v.vgpu_id: v for v in nvenc0.shares}
    assert verdicts[3].state == "starved"
    assert abs((verdicts[3].received or 0) - 0.10) < 0.01
    assert abs((verdicts[3].due or 0) - 1 / 3) < 1e-9
    assert verdicts[1].state == verdicts[2].state == "ok"
    graphics = {v.vgpu_id: v.state for v in g.vgpu_schedulers[0].shares}
    assert graphics == {1: "ok", 2: "ok", 3: "ok"}
