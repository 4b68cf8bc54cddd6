"""One snapshot-stream shape: ``serve`` and ``top`` drive the sampler and the agentless hosts
through :class:`vgpumon.feed.SnapshotFeed`, and ``top`` on this host runs the sampler's own loop
(the remote and SSH feeds and the fleet that joins feeds: test_fleet_feed.py)."""

from __future__ import annotations

import asyncio
import inspect

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export import server
from vgpumon.feed import Fleet, SnapshotFeed
from vgpumon.metrics.hosts import HostsView
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session
from vgpumon.sources.agentless import AgentlessFeed
from vgpumon.sources.fleet import this_host

MEMBERS = ("name", "latest", "not_ready_reason", "on_snapshot", "refresh", "run")


def test_the_sampler_and_the_agentless_hosts_are_feeds() -> None:
    sampler = Sampler(open_session(sim="passthrough-guest"))
    try:
        feed: SnapshotFeed[Snapshot] = sampler  # mypy checks the shape
        for member in MEMBERS:
            assert hasattr(feed, member), member
    finally:
        sampler.close()
    agentless: type[SnapshotFeed[HostsView]] = AgentlessFeed
    for member in MEMBERS:
        assert hasattr(agentless, member), member


def test_serve_takes_a_typed_feed() -> None:
    hints = inspect.signature(server.serve).parameters
    assert "feed" in hints and hints["feed"].annotation == "Feed"


async def test_top_refresh_wakes_the_samplers_own_loop() -> None:
    sampler = Sampler(open_session(sim="passthrough-guest"), SamplerConfig(interval_seconds=3600))
    feed = this_host(sampler, closers=[lambda: asyncio.to_thread(sampler.close)])
    news: asyncio.Queue[Fleet] = asyncio.Queue()
    feed.on_snapshot(news.put_nowait)
    stop = asyncio.Event()
    running = asyncio.create_task(feed.run(stop))
    try:
        first = (await asyncio.wait_for(news.get(), 10)).hosts[0]
        feed.refresh()  # an hour before the next cycle is due
        second = (await asyncio.wait_for(news.get(), 10)).hosts[0]
        assert second.sequence == first.sequence + 1
        assert second.snapshot is sampler.latest
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
