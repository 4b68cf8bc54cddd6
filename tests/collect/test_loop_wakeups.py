"""The event loop is woken once per sampling cycle (issue 21: "one event-loop wake per cycle").

The sampler's cycles run in a thread of their own and only the finished snapshot crosses to the
loop; the exporter's publisher keeps no timer. Counted, not timed: the loop's iterations (its
selector's ``select`` calls) while an idle exporter's sampler cycles and nobody scrapes.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

import pytest

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export.server import build_app
from vgpumon.nvml.loader import open_session


@pytest.mark.parametrize("scenario", ["passthrough-guest", "hgx-8xh100-nvlink"])
async def test_an_idle_exporter_wakes_its_loop_once_per_cycle(scenario: str) -> None:
    loop = asyncio.get_running_loop()
    sampler = Sampler(open_session(sim=scenario), SamplerConfig(interval_seconds=0.05))
    app = build_app(sampler)
    app.publisher.kick()
    stop = asyncio.Event()
    running = asyncio.create_task(sampler.run(stop))
    try:
        while sampler.latest is None or sampler.latest.health.cycles_total < 4:
            await asyncio.sleep(0.05)  # the first cycles (handles, the first render)
        selector: selectors.BaseSelector = loop._selector  # type: ignore[attr-defined]
        real = selector.select
        count = 0

        def select(timeout: float | None = None) -> Any:
            nonlocal count
            count += 1
            return real(timeout)

        first = sampler.latest.health.cycles_total
        selector.select = select  # type: ignore[method-assign]
        try:
            # one sleep: the test's own timer is one iteration more
            await asyncio.sleep(1.0)
        finally:
            selector.select = real  # type: ignore[method-assign]
        cycles = sampler.latest.health.cycles_total - first
        assert cycles >= 5, "the sampler hardly cycled"
        # one iteration per cycle, plus the window's edges and the test's own sleep
        assert count <= cycles + 3, f"{count} loop iterations for {cycles} cycles"
    finally:
        stop.set()
        await running
        await app.publisher.close()
        sampler.close()
