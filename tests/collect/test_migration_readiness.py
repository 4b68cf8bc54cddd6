"""Migration readiness per vGPU: NVML's compatibility check against this host's GPU
(nvmlGetVgpuCompatibility), the guest driver's branch against the host's, and the combined answer,
from the simulated NVML through the reader to the exposition."""

from __future__ import annotations

import asyncio
from pathlib import Path

from export_helpers import samples_by_name

from vgpumon.collect import take_snapshot
from vgpumon.metrics.exposition import render
from vgpumon.model import Snapshot, guest_driver_matches_host, vgpu_migration_ready
from vgpumon.nvml.loader import open_session

OLD_GUEST = """
name: old-guest
description: one vGPU whose guest runs a driver of an older branch than the host's
seed: 9
gpus:
  - model: l40s
    virtualization_mode: host_vgpu
    vgpu:
      types:
        - {id: 1152, name: "NVIDIA L40S-8Q", framebuffer: 8GiB, max_instances: 6}
      instances:
        - {id: 1, type: 1152, guest_driver: "550.54.14"}
        - {id: 2, type: 1152}
"""


def _snapshot(name: str) -> Snapshot:
    return asyncio.run(take_snapshot(open_session(sim=name), interval=0))


def _readiness(s: Snapshot) -> dict[int, tuple[object, ...]]:
    host = s.driver.driver_version
    return {
        v.vgpu_id: (
            v.live_migration_compatible,
            v.migration_limits,
            guest_driver_matches_host(host, v),
            vgpu_migration_ready(host, g, v),
        )
        for g in s.gpus
        for v in g.vgpu_instances
    }


def test_compatibility_and_readiness_per_vgpu() -> None:
    got = _readiness(_snapshot("kvm-vgpu-timesliced"))
    assert got[1] == (True, (), True, True)
    assert got[3] == (False, ("other",), True, False)  # the vGPU itself cannot migrate
    # No guest driver yet: no live move (cold only), branch unknown, so not ready.
    assert got[4] == (False, ("guest_driver",), None, False)
    assert got[21] == (False, ("gpu",), True, False)  # GPU 2 supports no migration


def test_a_guest_driver_of_another_branch(tmp_path: Path) -> None:
    path = tmp_path / "old-guest.yaml"
    path.write_text(OLD_GUEST, encoding="utf-8")
    got = _readiness(_snapshot(str(path)))
    assert got[1] == (False, ("guest_driver",), False, False)
    assert got[2] == (True, (), True, True)
    samples = samples_by_name(render(_snapshot(str(path))).decode())
    ready = {lab["vgpu_id"]: v for lab, v in samples["vgpumon_vgpu_migration_ready"]}
    assert ready == {"1": 0.0, "2": 1.0}
    match = {lab["vgpu_id"]: v for lab, v in samples["vgpumon_vgpu_guest_driver_matches_host"]}
    assert match == {"1": 0.0, "2": 1.0}
    limits = {
        (lab["vgpu_id"], lab["reason"]): v for lab, v in samples["vgpumon_vgpu_migration_limit"]
    }
    assert limits[("1", "guest_driver")] == 1.0 and limits[("1", "gpu")] == 0.0
    assert {k: v for k, v in limits.items() if k[0] == "2"} == {
        ("2", r): 0.0 for r in ("host_driver", "guest_driver", "gpu", "other")
    }
