"""The exporter renders a new snapshot because the sampler says there is one, not by polling.

Polling ``latest`` twenty times a second cost a one-GPU host more CPU than rendering did; the
sampler now calls its listeners when it publishes, and the publisher has no timer of its own:
a render must still follow each cycle at once.
"""

from __future__ import annotations

import asyncio
import time

from http_helpers import LiveClient

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export import server
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session


async def _served_cycle(client: LiveClient, cycles: int) -> float:
    body = await (await client.get("/metrics")).text()
    for line in body.splitlines():
        if line.startswith("vgpumon_sampler_cycles_total "):
            return float(line.split()[1])
    raise AssertionError(f"no cycle count after {cycles} cycles")


async def test_each_cycle_is_rendered_without_waiting_for_a_poll() -> None:
    session = open_session(sim="passthrough-guest")
    sampler = Sampler(session, SamplerConfig())
    client = LiveClient(server.build_app(sampler))
    await client.start_server()
    try:
        for cycles in (1, 2, 3):
            await sampler.cycle()
            give_up = time.monotonic() + 5
            while await _served_cycle(client, cycles) < cycles:
                assert time.monotonic() < give_up, f"cycle {cycles} was never rendered"
                await asyncio.sleep(0.01)
    finally:
        await client.close()
        sampler.close()


async def test_a_failing_listener_neither_stops_sampling_nor_the_others() -> None:
    session = open_session(sim="passthrough-guest")
    sampler = Sampler(session, SamplerConfig())
    seen: list[Snapshot] = []

    def broken(_snapshot: Snapshot) -> None:
        raise RuntimeError("a consumer's bug")

    sampler.on_snapshot(broken)
    sampler.on_snapshot(seen.append)
    try:
        first = await sampler.cycle()
        second = await sampler.cycle()
        assert seen == [first, second]
        assert sampler.latest is second
    finally:
        sampler.close()
