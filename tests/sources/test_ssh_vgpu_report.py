"""An agentless vGPU host whose optional ``nvidia-smi vgpu -q -x`` fails (prints nothing with exit
status 0, exits non-zero, or never answers) is served from its device report, with the reason in
the vgpu collector's status, and not reported down; each change of a host's state is logged once,
not on every poll (a host was ``vgpumon_up 0`` with a warning every poll)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from sshd_helpers import fake_hosts

from vgpumon.feed import HostState
from vgpumon.smi import ReportFailure
from vgpumon.sources.ssh import SshFleet, SshHostFeed, SshPollError
from vgpumon.sources.ssh_targets import SshSettings, SshTarget, parse_target

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smi"
DEVICE = (FIXTURES / "esxi-vgpu-host-device.xml").read_text()
VGPU = (FIXTURES / "esxi-vgpu-host-vgpu.xml").read_text()
TIMEOUT = 3.0


async def test_each_way_the_vgpu_report_fails_costs_only_the_vgpus(tmp_path: Path) -> None:
    specs = [(b, DEVICE, VGPU) for b in ("vgpu-empty", "vgpu-exit", "vgpu-hang", "ok")]
    async with fake_hosts(tmp_path, specs) as (keys, hosts):
        settings = SshSettings(
            targets=tuple(parse_target(h.target) for h in hosts),
            identity_files=(keys.client_key_file,),
            known_hosts=keys.known_hosts_file,
            timeout_seconds=TIMEOUT,
        )
        fleet = SshFleet(settings)
        try:
            updates = await asyncio.gather(*(fleet.poll(h.name) for h in hosts))
        finally:
            fleet.transport.close()
    for update, (behaviour, _, _), failure in zip(
        updates, specs, ("empty", "exit_status", "timeout", None), strict=True
    ):
        assert update.state is HostState.UP, (behaviour, update.error)
        snap = update.snapshot
        assert snap is not None and len(snap.gpus) == 2, behaviour
        assert [p.name for p in snap.gpus[0].processes or ()] == [
            "render-farm-01",
            "finance, q3 vdi",
        ]
        vgpu = next(c for c in snap.collectors if c.name == "vgpu")
        assert vgpu.failure == failure, (behaviour, vgpu)
        assert vgpu.success is (failure is None)
        assert len(snap.gpus[0].vgpu_instances) == (0 if failure else 2)
    timed_out = next(c for c in updates[2].snapshot.collectors if c.name == "vgpu")  # type: ignore[union-attr]
    assert timed_out.detail == f"nvidia-smi vgpu -q -x gave no answer within {TIMEOUT:g} s"


async def test_a_host_s_state_is_logged_once_per_change(caplog: pytest.LogCaptureFixture) -> None:
    answers: list[object] = [
        b"",  # the vGPU report empty, three polls in a row: one warning
        b"",
        b"",
        VGPU.encode(),  # back: one line
        SshPollError("cannot connect: Connection refused"),  # down, twice: one warning
        SshPollError("cannot connect: Connection refused"),
        VGPU.encode(),  # up again: one line
        ReportFailure("exit_status", "nvidia-smi vgpu -q -x exited 6"),
    ]

    async def fetch(target: SshTarget) -> tuple[bytes, bytes | ReportFailure | None]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, (bytes, ReportFailure))
        return DEVICE.encode(), answer

    target = SshTarget("esxi-1")
    feed = SshHostFeed(target, SshSettings(targets=(target,)), fetch, asyncio.Semaphore(1))
    with caplog.at_level(logging.INFO, logger="vgpumon.sources.ssh"):
        for _ in range(8):
            await feed.poll()
    lines = [r.getMessage() for r in caplog.records if r.name == "vgpumon.sources.ssh"]
    assert lines == [
        "agentless host esxi-1: no vGPU report (nvidia-smi vgpu -q -x output is empty); "
        "serving its device report",
        "agentless host esxi-1: its vGPU report is back",
        "agentless host esxi-1: cannot connect: Connection refused",
        "agentless host esxi-1 answers again",
        "agentless host esxi-1: no vGPU report (nvidia-smi vgpu -q -x exited 6); "
        "serving its device report",
    ]
