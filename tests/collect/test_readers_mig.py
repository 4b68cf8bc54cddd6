"""MIG without root: what the unprivileged path still gives, and what it costs in errors.

The built-in ``a100-mig-mixed`` scenario, re-parsed with ``privileged: false``: the GI/CI tree
APIs and the parent's aggregate memory and process lists answer NO_PERMISSION, so the reader must
fall back to MIG device handles — and pay for each refused call once, not once per profile index.
"""

from __future__ import annotations

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim import ManualClock, create, load_scenario, parse_scenario


async def test_unprivileged_mig_uses_mig_device_handles() -> None:
    builtin = load_scenario("a100-mig-mixed")
    scenario = parse_scenario(
        builtin.text + "\nprivileged: false\n", "unprivileged.yaml", "test:unprivileged"
    )
    assert not scenario.privileged
    clock = ManualClock()
    session = NvmlSession(create(scenario, clock=clock), "sim:unprivileged")
    session.init()
    sampler = Sampler(session, SamplerConfig(deadline_seconds=2.0), clock=clock.now)
    try:
        snaps = []
        for _ in range(3):
            snaps.append(await sampler.cycle())
            clock.advance(1.0)
    finally:
        sampler.close()

    spec = scenario.gpus[0]
    gpu = snaps[-1].gpus[0]
    assert gpu.memory.total_bytes is None  # the parent's aggregate needs root
    assert [gi.id for gi in gpu.mig_instances] == sorted(gi.id for gi in spec.gpu_instances)
    for got, want in zip(
        gpu.mig_instances, sorted(spec.gpu_instances, key=lambda g: g.id), strict=True
    ):
        assert got.profile_name == want.profile.name  # from the MIG device name
        assert got.profile_id is None and got.placement_start is None  # tree APIs need root
        assert got.memory_total_bytes == want.profile.memory_bytes  # from a MIG handle
        assert [c.mig_uuid for c in got.compute_instances] == [
            c.uuid for c in sorted(want.compute_instances, key=lambda c: c.id)
        ]
    got_procs = {(p.pid, p.gpu_instance_id, p.compute_instance_id) for p in gpu.processes or ()}
    assert got_procs == {(p.pid, p.gpu_instance, p.compute_instance or 0) for p in spec.processes}

    errors = {(e.function, e.error): e.count for e in snaps[-1].nvml_errors}
    mig_gpus = sum(1 for g in scenario.gpus if g.mig_enabled)
    for function in (
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "nvmlDeviceGetComputeRunningProcesses",
    ):
        assert errors[(function, "no_permission")] == mig_gpus, function
    assert snaps[0].nvml_errors == snaps[-1].nvml_errors  # paid once, not every cycle
