"""Render only what will be read: however slow a render, a snapshot nobody scrapes is never
rendered; where scrapes come as often as snapshots, each is rendered ahead and no scrape waits."""

from __future__ import annotations

import asyncio
import dataclasses

from export_helpers import rich_snapshot

from vgpumon.export.publisher import Publisher
from vgpumon.model import Snapshot


async def _settle() -> None:
    for _ in range(50):
        await asyncio.sleep(0.001)


async def test_unscraped_snapshots_of_a_slow_host_are_not_rendered() -> None:
    base = rich_snapshot()
    latest: list[Snapshot] = [base]
    publisher = Publisher(lambda: latest[0])
    publisher.render_ahead_seconds = 1e-9  # every render counts as slow
    try:
        await publisher.bodies_for(base)  # the first render, on the first scrape
        assert publisher.renders == 1
        for n in range(5):  # the sampler goes on; nobody scrapes
            latest[0] = dataclasses.replace(base, timestamp=base.timestamp + n + 1)
            publisher.snapshot_arrived(latest[0])
            await _settle()
        assert publisher.renders == 1, "snapshots nobody read were rendered"
        bodies = await publisher.bodies_for(latest[0])  # a scrape: rendered for it, once
        assert bodies is not None and bodies.of(latest[0]) and publisher.renders == 2
        await publisher.bodies_for(latest[0])
        assert publisher.renders == 2
    finally:
        await publisher.close()


async def test_snapshots_read_as_often_as_they_come_are_rendered_ahead() -> None:
    base = rich_snapshot()
    latest: list[Snapshot] = [base]
    publisher = Publisher(lambda: latest[0])
    publisher.render_ahead_seconds = 1e-9
    try:
        for n in range(6):  # a scrape right after every snapshot
            latest[0] = dataclasses.replace(base, timestamp=base.timestamp + n)
            publisher.snapshot_arrived(latest[0])
            await publisher.bodies_for(latest[0])
            await _settle()
        assert publisher.renders_ahead
        latest[0] = new = dataclasses.replace(base, timestamp=base.timestamp + 99)
        publisher.snapshot_arrived(new)
        await _settle()
        current = publisher.current
        assert current is not None and current.of(new), "rendered before any scrape asked"
    finally:
        await publisher.close()
