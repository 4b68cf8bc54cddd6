"""FleetSource: many hosts as one stream; a dead or hung host never holds up the others."""

from __future__ import annotations

import asyncio

import pytest
from export_helpers import free_port

from vgpumon.collect import SamplerConfig
from vgpumon.errors import ConfigError
from vgpumon.nvml.loader import open_session
from vgpumon.sources import HostState, HostUpdate, SnapshotSource
from vgpumon.sources.fleet import FleetSource
from vgpumon.sources.local import LocalSource
from vgpumon.sources.remote import Connection, RemoteSource, RemoteTarget


def remote(url: str, *, name: str | None = None, timeout: float = 5.0) -> RemoteSource:
    return RemoteSource(
        RemoteTarget(url, name), Connection(timeout_seconds=timeout), interval_seconds=0.05
    )


async def test_live_hosts_are_up_while_a_hung_one_is_still_waiting(
    exporter_factory, silent_url, wait_until
):
    one = await exporter_factory("passthrough-guest").start()
    two = await exporter_factory("baremetal-8xh100").start()
    refused = f"http://127.0.0.1:{free_port()}"
    local = LocalSource(open_session(sim="a100-mig-mixed"), SamplerConfig(interval_seconds=0.1))
    fleet = FleetSource(
        [
            remote(one.url, name="one"),
            # The hung host's requests time out only after a minute: the others must not wait.
            remote(silent_url, name="hung", timeout=60.0),
            remote(two.url, name="two"),
            remote(refused, name="dead"),
            local,
        ]
    )
    assert isinstance(fleet, SnapshotSource)
    assert fleet.hosts() == ("one", "hung", "two", "dead", "local")
    assert fleet.name == "5 hosts"
    seen: list[HostUpdate] = []

    async def collect() -> None:
        async for update in fleet.updates():
            seen.append(update)

    collecting = asyncio.create_task(collect())
    await fleet.start()
    try:
        for host in ("one", "two", "local"):
            await wait_until(fleet, host, lambda u: u.state is HostState.UP)
        dead = await wait_until(fleet, "dead", lambda u: u.state is HostState.UNREACHABLE)
        assert dead.error == "connection refused"
        assert fleet.latest()["hung"].state is HostState.CONNECTING
        up_again = fleet.latest()["one"].sequence
        await wait_until(fleet, "one", lambda u: u.sequence > up_again)  # still flowing
        assert fleet.latest()["hung"].state is HostState.CONNECTING
        two_gpus = fleet.latest()["two"].snapshot
        assert two_gpus is not None and len(two_gpus.gpus) == 8
    finally:
        await fleet.close()
    await asyncio.wait_for(collecting, 30)  # the stream ends when the fleet closes
    assert {u.host for u in seen} >= {"one", "two", "dead", "local"}
    for host in fleet.hosts():  # each host's updates arrive in its own order, none twice
        sequences = [u.sequence for u in seen if u.host == host]
        assert sequences == sorted(set(sequences)), host
        assert fleet.latest()[host].state is HostState.CLOSED


async def test_refresh_reaches_every_host(exporter_factory, wait_until):
    one = await exporter_factory().start()
    two = await exporter_factory().start()
    sources = [RemoteSource(RemoteTarget(e.url), interval_seconds=3600) for e in (one, two)]
    fleet = FleetSource(sources)
    await fleet.start()
    try:
        first = {}
        for host, exporter in zip(fleet.hosts(), (one, two), strict=True):
            first[host] = await wait_until(fleet, host, lambda u: u.state is HostState.UP)
            await exporter.sampled_after(first[host].snapshot.timestamp)
        await fleet.refresh()
        for host in fleet.hosts():
            await wait_until(fleet, host, lambda u, h=host: u.sequence > first[h].sequence)
    finally:
        await fleet.close()


def test_a_host_given_twice_is_one_config_error():
    with pytest.raises(ConfigError, match="host 'gpu1:9400' is given twice") as err:
        FleetSource([remote("http://gpu1:9400"), remote("http://gpu1:9400/metrics")])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="host 'a' is given twice"):
        FleetSource([remote("http://gpu1:9400", name="a"), remote("http://gpu2:9400", name="a")])


async def test_an_empty_fleet_starts_and_closes():
    fleet = FleetSource([])
    await fleet.start()
    assert fleet.hosts() == () and fleet.latest() == {}
    await fleet.close()
