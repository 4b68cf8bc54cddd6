"""docs/design.md, rule 1: scrapes never call NVML, so a wedged driver cannot slow /metrics down.

The simulator's ``fault-all-hang-after-start`` answers for 2 s, then every call (system calls
included) hangs. The sampler must report itself wedged while /metrics keeps answering from the
last snapshot, fast.
"""

from __future__ import annotations

import asyncio
import time

from export_helpers import samples_by_name
from http_helpers import LiveClient

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export.server import build_app
from vgpumon.nvml.loader import open_session

SCRAPES = 200
SCRAPE_BUDGET_SECONDS = 0.05


async def test_scrapes_stay_fast_while_every_nvml_call_hangs() -> None:
    session = open_session(sim="fault-all-hang-after-start")
    sampler = Sampler(session, SamplerConfig(interval_seconds=0.2, deadline_seconds=0.5))
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    client = LiveClient(build_app(sampler))
    await client.start_server()
    try:
        give_up = time.monotonic() + 15
        while not sampler.wedged:
            assert time.monotonic() < give_up, "the sampler never reported itself wedged"
            await asyncio.sleep(0.1)
        assert (await client.get("/-/ready")).status == 503
        slowest = 0.0
        body = ""
        for _ in range(SCRAPES):
            started = time.perf_counter()
            resp = await client.get("/metrics")
            body = await resp.text()
            slowest = max(slowest, time.perf_counter() - started)
            assert resp.status == 200
        assert slowest < SCRAPE_BUDGET_SECONDS, f"slowest scrape took {slowest * 1000:.1f} ms"
        samples = samples_by_name(body)
        assert samples["vgpumon_sampler_wedged"] == [({}, 1.0)]
        assert samples["vgpumon_up"] == [({}, 0.0)]
        # The last good GPU data is still served, flagged by the wedge.
        assert samples["vgpumon_gpu_utilization_ratio"]
    finally:
        stop.set()
        await client.close()
        await asyncio.wait_for(sampling, timeout=5)
        # Free the stuck worker threads first: closing the sampler frees GPM buffers via NVML.
        session.module.release_hangs()
        sampler.close()
