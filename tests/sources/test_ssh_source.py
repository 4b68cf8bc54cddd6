"""Agentless hosts (an SshFleet of SshHostFeeds) against real SSH servers on loopback: one good
host, and hosts that hang, refuse the key, answer garbage or present an unknown host key; the bad
ones are reported and never stop the good one."""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from smi_helpers import differences, scenario_reports
from sshd_helpers import fake_hosts

from vgpumon.feed import Fleet, HostState, SnapshotFeed
from vgpumon.sources.ssh import SshFleet
from vgpumon.sources.ssh_targets import SshSettings, parse_target

TIMEOUT = 3.0


def settings(keys, hosts, **kw) -> SshSettings:  # type: ignore[no-untyped-def]
    kw.setdefault("timeout_seconds", TIMEOUT)
    return SshSettings(
        targets=tuple(parse_target(h.target) for h in hosts),
        identity_files=(keys.client_key_file,),
        known_hosts=keys.known_hosts_file,
        **kw,
    )


@asynccontextmanager
async def running(fleet: SshFleet) -> AsyncIterator[SshFleet]:
    """The fleet's own loops (a poll per host and interval) until the block ends."""
    stop = asyncio.Event()
    task = asyncio.create_task(fleet.run(stop))
    try:
        yield fleet
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def until_up(fleet: SshFleet) -> None:
    """Return once the fleet's first host has answered."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + 4 * TIMEOUT
    while fleet.latest.hosts[0].state is not HostState.UP:
        assert loop.time() < give_up, fleet.latest.hosts[0]
        await asyncio.sleep(0.02)


async def test_good_host_matches_the_nvml_path_and_bad_hosts_are_reported(tmp_path: Path) -> None:
    via_nvml, device, vgpu = await asyncio.to_thread(scenario_reports, "kvm-vgpu-timesliced")
    specs = [
        ("ok", device, vgpu),
        ("hang", "", ""),
        ("refuse", device, vgpu),
        ("garbage", "", ""),
    ]
    async with fake_hosts(tmp_path, specs) as (keys, hosts):
        source = SshFleet(settings(keys, hosts))
        typed: SnapshotFeed[Fleet] = source  # the shape, for mypy run on this file
        assert typed.latest is not None
        try:
            updates = await asyncio.gather(*(source.poll(h.name) for h in hosts))
        finally:
            source.transport.close()
    good, hung, refused, garbage = updates
    assert good.state is HostState.UP and good.snapshot is not None
    assert differences(via_nvml, good.snapshot) == {}
    assert [c.name for c in good.snapshot.collectors] == ["ssh", "device", "vgpu"]
    assert hosts[0].commands == ["nvidia-smi -q -x", "nvidia-smi vgpu -q -x"]
    assert hung.state is HostState.UNREACHABLE and hung.error == f"no answer within {TIMEOUT:g} s"
    assert refused.state is HostState.UNREACHABLE
    assert refused.error == "SSH key refused (permission denied)"
    assert refused.snapshot is None
    assert garbage.state is HostState.UNREACHABLE
    assert garbage.error == "nvidia-smi -q -x output is a <html> document, not <nvidia_smi_log>"


async def test_an_unknown_host_key_fails_the_host(tmp_path: Path) -> None:
    _, device, vgpu = await asyncio.to_thread(scenario_reports, "baremetal-8xh100")
    async with fake_hosts(tmp_path, [("ok", device, vgpu)]) as (keys, hosts):
        Path(keys.known_hosts_file).write_text("")  # the host's key is not known
        source = SshFleet(settings(keys, hosts))
        try:
            update = await source.poll(hosts[0].name)
        finally:
            source.transport.close()
    assert update.state is HostState.UNREACHABLE
    assert update.error is not None and update.error.startswith("host key not verifiable")
    assert hosts[0].commands == []


async def test_no_vgpu_report_is_asked_from_a_host_without_vgpu(tmp_path: Path) -> None:
    _, device, vgpu = await asyncio.to_thread(scenario_reports, "baremetal-8xh100")
    async with fake_hosts(tmp_path, [("ok", device, vgpu)]) as (keys, hosts):
        source = SshFleet(settings(keys, hosts))
        try:
            update = await source.poll(hosts[0].name)
        finally:
            source.transport.close()
    assert update.state is HostState.UP and update.snapshot is not None
    assert hosts[0].commands == ["nvidia-smi -q -x"]
    assert len(update.snapshot.gpus) == 8


async def test_background_loops_publish_every_host_and_a_hung_one_does_not_block(
    tmp_path: Path,
) -> None:
    _, device, vgpu = await asyncio.to_thread(scenario_reports, "a100-mig-mixed")
    specs = [("hang", "", ""), ("ok", device, vgpu)]
    async with fake_hosts(tmp_path, specs) as (keys, hosts):
        # One session at a time: the hung host holds it for at most TIMEOUT, then the good one runs.
        source = SshFleet(settings(keys, hosts, max_sessions=1, interval_seconds=60))
        seen: dict[str, HostState] = {}
        both = asyncio.Event()

        def first_of_each(fleet: Fleet) -> None:
            for update in fleet.hosts:
                if update.state is not HostState.CONNECTING:
                    seen.setdefault(update.host, update.state)
            if len(seen) == 2:
                both.set()

        source.on_snapshot(first_of_each)
        async with running(source):
            await asyncio.wait_for(both.wait(), timeout=4 * TIMEOUT)
    assert seen == {hosts[0].name: HostState.UNREACHABLE, hosts[1].name: HostState.UP}
    assert all(u.state is HostState.CLOSED for u in source.latest.hosts)


async def test_a_session_is_reused_and_a_timed_out_one_replaced(tmp_path: Path) -> None:
    """One login per host while it answers (ESXi logs every login); a new one after a timeout."""
    _, device, vgpu = await asyncio.to_thread(scenario_reports, "baremetal-8xh100")
    async with fake_hosts(tmp_path, [("ok", device, vgpu), ("hang", "", "")]) as (keys, hosts):
        source = SshFleet(settings(keys, hosts, timeout_seconds=1.0))
        try:
            for _ in range(3):
                assert (await source.poll(hosts[0].name)).state is HostState.UP
            assert source.transport.logins == 1
            for _ in range(2):
                assert (await source.poll(hosts[1].name)).state is HostState.UNREACHABLE
            assert source.transport.logins == 3
            assert (await source.poll(hosts[0].name)).state is HostState.UP
            assert source.transport.logins == 3
        finally:
            source.transport.close()
    assert hosts[0].commands == ["nvidia-smi -q -x"] * 4


async def test_a_host_without_nvidia_smi_says_so(tmp_path: Path) -> None:
    async with fake_hosts(tmp_path, [("no-smi", "", "")]) as (keys, hosts):
        source = SshFleet(settings(keys, hosts))
        try:
            update = await source.poll(hosts[0].name)
        finally:
            source.transport.close()
    assert update.state is HostState.UNREACHABLE
    assert update.error == "nvidia-smi not found on the host (exit 127): check --ssh.nvidia-smi"


async def test_a_wrong_nvidia_smi_path_names_the_flag(tmp_path: Path) -> None:
    async with fake_hosts(tmp_path, [("no-smi", "", "")]) as (keys, hosts):
        source = SshFleet(settings(keys, hosts, nvidia_smi="/opt/nvidia smi"))
        try:
            update = await source.poll(hosts[0].name)
        finally:
            source.transport.close()
    assert hosts[0].commands == ["'/opt/nvidia smi' -q -x"]
    assert (
        update.error == "/opt/nvidia smi not found on the host (exit 127): check --ssh.nvidia-smi"
    )


async def test_a_target_without_a_user_logs_in_as_the_local_user(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like ``ssh HOST``: no ``USER@`` and no ``--ssh.user`` is the local user (or the User of
    ~/.ssh/config, which this HOME does not have)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    _, device, vgpu = await asyncio.to_thread(scenario_reports, "baremetal-8xh100")
    async with fake_hosts(tmp_path, [("ok", device, vgpu), ("ok", device, vgpu)]) as (keys, hosts):
        bare = settings(keys, hosts)
        bare = dataclasses.replace(
            bare, targets=tuple(parse_target(h.target_without_user) for h in hosts)
        )
        source = SshFleet(bare)
        with_user = SshFleet(
            dataclasses.replace(bare, targets=bare.targets[1:], default_user="ops")
        )
        try:
            update = await source.poll(hosts[0].name)
            other = await with_user.poll(hosts[1].name)
        finally:
            source.transport.close()
            with_user.transport.close()
    assert update.state is HostState.UP, update.error
    assert hosts[0].users == [getpass.getuser()]
    assert other.state is HostState.UP, other.error
    assert hosts[1].users == ["ops"]


async def test_asyncssh_says_nothing_below_warning_unless_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """asyncssh logs every session and channel at INFO (lines per host and poll); vgpumon's own
    warnings say what failed, so asyncssh's logger is at WARNING unless the log level is debug."""
    _, device, vgpu = await asyncio.to_thread(scenario_reports, "baremetal-8xh100")
    library = logging.getLogger("asyncssh")
    saved = library.level
    try:
        for level, chatty in ((logging.INFO, False), (logging.DEBUG, True)):
            library.setLevel(logging.NOTSET)
            caplog.set_level(level)
            home = tmp_path / logging.getLevelName(level)
            home.mkdir()
            async with fake_hosts(home, [("ok", device, vgpu)]) as (keys, hosts):
                caplog.clear()  # the server's own start-up lines are not the client's
                source = SshFleet(settings(keys, hosts, interval_seconds=60))
                async with running(source):
                    await until_up(source)
            lines = [r for r in caplog.records if r.name.startswith("asyncssh") and r.levelno < 30]
            assert bool(lines) is chatty, (level, [r.getMessage() for r in lines])
    finally:
        library.setLevel(saved)


@pytest.mark.parametrize(
    ("text", "host", "port", "user", "name"),
    [
        ("esxi-1", "esxi-1", 22, None, "esxi-1"),
        (
            "root@esxi-1.example.com:2222",
            "esxi-1.example.com",
            2222,
            "root",
            "esxi-1.example.com:2222",
        ),
        ("admin@[fe80::1]:22", "fe80::1", 22, "admin", "[fe80::1]"),
    ],
)
def test_targets(text: str, host: str, port: int, user: str | None, name: str) -> None:
    t = parse_target(text)
    assert (t.host, t.port, t.user, t.name) == (host, port, user, name)
