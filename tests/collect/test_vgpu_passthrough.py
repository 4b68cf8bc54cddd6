"""Pass-through (a real H200, docs/nvml-notes.md §14): no vGPU section, and every vGPU host call is
absent, paid once.

The same checks run on the simulator's ``passthrough-guest`` scenario and, where a GPU is present,
on real pynvml (``@pytest.mark.gpu``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from vgpu_helpers import vgpu_errors

from vgpumon.collect.sampler import Sampler
from vgpumon.collect.scheduler import SERVICE, SchedulerLogPoller
from vgpumon.model import Snapshot
from vgpumon.nvml.session import SYSTEM, NvmlSession
from vgpumon.sim import parse_scenario
from vgpumon.testing import VGPU_READERS, SimHostFactory

# Every device-level vGPU host call vgpumon makes, with arguments for a GPU handle ``h``.
HOST_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("nvmlDeviceGetHostVgpuMode", ()),
    ("nvmlDeviceGetVgpuHeterogeneousMode", ()),
    ("nvmlDeviceGetActiveVgpus", ()),
    ("nvmlDeviceGetSupportedVgpus", ()),
    ("nvmlDeviceGetCreatableVgpus", ()),
    ("nvmlDeviceGetVgpuUtilization", (0,)),
    ("nvmlDeviceGetVgpuInstancesUtilizationInfo", (0,)),
    ("nvmlDeviceGetVgpuProcessUtilization", (0,)),
    ("nvmlDeviceGetVgpuProcessesUtilizationInfo", (0,)),
    ("nvmlDeviceGetVgpuSchedulerState", ()),
    ("nvmlDeviceGetVgpuSchedulerLog", ()),
    ("nvmlDeviceGetVgpuSchedulerCapabilities", ()),
]
V2_CALLS = [
    ("nvmlDeviceGetVgpuSchedulerState_v2", "c_nvmlVgpuSchedulerStateInfo_v2_t"),
    ("nvmlDeviceGetVgpuSchedulerLog_v2", "c_nvmlVgpuSchedulerLogInfo_v2_t"),
]


def check_passthrough_snapshot(snap: Snapshot) -> None:
    assert snap.gpus
    for g in snap.gpus:
        assert g.virtualization_mode == "passthrough"
        assert g.host_vgpu_mode is None and g.vgpu_heterogeneous_mode is None
        assert (g.vgpu_instances, g.vgpu_types, g.vgpu_processes, g.vgpu_schedulers) == (
            (),
            (),
            (),
            (),
        )
        # The licensing structure answers (isGridLicenseSupported = 0): no guest licensing here.
        assert g.guest_license_supported is False and g.guest_licenses == ()
    assert all(c.success for c in snap.collectors)
    # Nothing vGPU was even asked: the virtualization mode says it cannot apply.
    assert vgpu_errors(snap) == {}


def check_every_host_call_absent_once(
    session: NvmlSession, uuid: str, handle: Any, gpus_so_far: int = 1
) -> None:
    """Each per-GPU host call is asked once per GPU, then known absent; ``gpus_so_far`` is how
    many GPUs this session has checked, this one included (the error counts are per session)."""
    module = session.module
    for _ in range(3):
        for name, args in HOST_CALLS:
            assert session.call(uuid, name, handle, *args) is None
        for name, cls in V2_CALLS:
            assert session.call(SYSTEM, name, handle, getattr(module, cls)()) is None
    counts = {(e.function, e.error): e.count for e in session.error_counts()}
    for name, _ in HOST_CALLS:
        assert counts.get((name, "not_supported")) == gpus_so_far, name
        assert session.is_absent(uuid, name)
    for name, _ in V2_CALLS:
        # R580 lacks the symbol (FUNCTION_NOT_FOUND); a newer driver answers NOT_SUPPORTED.
        got = {e: n for (f, e), n in counts.items() if f == name}
        assert got in ({"function_not_found": 1}, {"not_supported": 1}), (name, got)


async def test_sim_passthrough_has_no_vgpu_section(sim_host: SimHostFactory) -> None:
    host = sim_host("passthrough-guest")
    try:
        await host.cycle()
        host.advance(1.0)
        snap = await host.cycle()
        check_passthrough_snapshot(snap)
        g = snap.gpus[0]
        h = host.module.nvmlDeviceGetHandleByIndex(0)
        check_every_host_call_absent_once(host.session, g.uuid, h)
    finally:
        host.close()


async def test_sim_two_passthrough_gpus_each_ask_once(sim_host: SimHostFactory) -> None:
    """Per-GPU host calls are asked once per GPU (the real test runs on hosts of several)."""
    path = Path(__file__).parents[2] / "vgpumon/sim/scenarios/passthrough-guest.yaml"
    spec = yaml.safe_load(path.read_text())
    second = copy.deepcopy(spec["gpus"][0])
    second.update(uuid="GPU-00000000-0000-4000-8000-000000000001", pci_bus_id="00000000:00:07.0")
    second.update(serial="0000000000001")
    spec["gpus"].append(second)
    scenario = parse_scenario(yaml.safe_dump(spec))
    host = sim_host(scenario)
    try:
        await host.cycle()
        host.advance(1.0)
        snap = await host.cycle()
        assert len(snap.gpus) == 2
        check_passthrough_snapshot(snap)
        for checked, g in enumerate(snap.gpus, start=1):
            h = host.module.nvmlDeviceGetHandleByUUID(g.uuid.encode())
            check_every_host_call_absent_once(host.session, g.uuid, h, checked)
    finally:
        host.close()


@pytest.mark.gpu
async def test_real_passthrough_gpu_has_no_vgpu_section() -> None:
    import pynvml

    session = NvmlSession(pynvml, "pynvml")
    session.init()
    poller = SchedulerLogPoller(session)
    sampler = Sampler(session, readers=VGPU_READERS, services={SERVICE: poller})
    try:
        await sampler.cycle()
        snap = await sampler.cycle()
        if any(g.virtualization_mode != "passthrough" for g in snap.gpus):
            pytest.skip("this GPU is not passed through (the checks are for a pass-through GPU)")
        check_passthrough_snapshot(snap)
        for checked, g in enumerate(snap.gpus, start=1):
            h = pynvml.nvmlDeviceGetHandleByUUID(g.uuid)
            check_every_host_call_absent_once(session, g.uuid, h, checked)
    finally:
        sampler.close()
