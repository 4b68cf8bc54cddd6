"""FleetFeed: many hosts as one feed; a dead or hung host never holds up the others."""

from __future__ import annotations

import asyncio

import pytest
from export_helpers import free_port

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.errors import ConfigError
from vgpumon.feed import Fleet, HostState, SnapshotFeed
from vgpumon.nvml.loader import open_session
from vgpumon.sources.fleet import FleetFeed, nvml_down
from vgpumon.sources.remote import Connection, RemoteFeed, RemoteTarget, remote_fleet


def remote(url: str, *, name: str | None = None, timeout: float = 5.0) -> RemoteFeed:
    return RemoteFeed(
        RemoteTarget(url, name), Connection(timeout_seconds=timeout), interval_seconds=0.05
    )


async def test_live_hosts_are_up_while_a_hung_one_is_still_waiting(
    exporter_factory, silent_url, wait_until
):
    one = await exporter_factory("passthrough-guest").start()
    two = await exporter_factory("baremetal-8xh100").start()
    refused = f"http://127.0.0.1:{free_port()}"
    sampler = Sampler(open_session(sim="a100-mig-mixed"), SamplerConfig(interval_seconds=0.1))
    remotes = [
        ("one", remote(one.url, name="one")),
        # The hung host's requests time out only after a minute: the others must not wait.
        ("hung", remote(silent_url, name="hung", timeout=60.0)),
        ("two", remote(two.url, name="two")),
        ("dead", remote(refused, name="dead")),
    ]
    fleet = FleetFeed(
        [*remotes, ("local", sampler)],
        judge=nvml_down,
        closers=[*(f.close for _, f in remotes), lambda: asyncio.to_thread(sampler.close)],
    )
    typed: SnapshotFeed[Fleet] = fleet  # the shape, for mypy run on this file
    assert typed.latest is not None and typed.latest.names == (
        "one",
        "hung",
        "two",
        "dead",
        "local",
    )
    assert fleet.name == "5 hosts"
    seen: list[Fleet] = []
    fleet.on_snapshot(seen.append)
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    try:
        for host in ("one", "two", "local"):
            await wait_until(fleet, host, lambda u: u.state is HostState.UP)
        dead = await wait_until(fleet, "dead", lambda u: u.state is HostState.UNREACHABLE)
        assert dead.error == "connection refused"
        assert fleet.latest.hosts[1].state is HostState.CONNECTING
        up_again = fleet.latest.hosts[0].sequence
        await wait_until(fleet, "one", lambda u: u.sequence > up_again)  # still flowing
        assert fleet.latest.hosts[1].state is HostState.CONNECTING
        two_gpus = fleet.latest.hosts[2].snapshot
        assert two_gpus is not None and len(two_gpus.gpus) == 8
    finally:
        stop.set()
        # The hung host's request in flight (a minute's time limit) is cancelled, not waited for.
        await asyncio.wait_for(running, 10)
    assert all(u.state is HostState.CLOSED for u in fleet.latest.hosts)
    for i, host in enumerate(fleet.latest.names):  # each host's states in order, none twice
        sequences = [f.hosts[i].sequence for f in seen]
        assert sequences == sorted(sequences), host
    assert {u.host for f in seen for u in f.hosts if u.state is HostState.UP} >= {
        "one",
        "two",
        "local",
    }


async def test_refresh_reaches_every_host(exporter_factory, wait_until):
    one = await exporter_factory().start()
    two = await exporter_factory().start()
    fleet = remote_fleet([RemoteTarget(e.url) for e in (one, two)], interval_seconds=3600)
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    try:
        first = {}
        for host, exporter in zip(fleet.latest.names, (one, two), strict=True):
            first[host] = await wait_until(fleet, host, lambda u: u.state is HostState.UP)
            await exporter.sampled_after(first[host].snapshot.timestamp)
        fleet.refresh()
        for host in fleet.latest.names:
            await wait_until(fleet, host, lambda u, h=host: u.sequence > first[h].sequence)
    finally:
        stop.set()
        await asyncio.wait_for(running, 30)
    assert all(u.state is HostState.CLOSED for u in fleet.latest.hosts)


def test_a_host_given_twice_is_one_config_error():
    with pytest.raises(ConfigError, match="host 'gpu1:9400' is given twice") as err:
        remote_fleet([RemoteTarget("http://gpu1:9400"), RemoteTarget("http://gpu1:9400/metrics")])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="host 'a' is given twice"):
        remote_fleet([RemoteTarget("http://gpu1:9400", "a"), RemoteTarget("http://gpu2:9400", "a")])


async def test_an_empty_fleet_runs_and_stops():
    fleet = FleetFeed([])
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    await asyncio.sleep(0)
    assert fleet.latest.hosts == () and fleet.name == "0 hosts"
    stop.set()
    await asyncio.wait_for(running, 30)
