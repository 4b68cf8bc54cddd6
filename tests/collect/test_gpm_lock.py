"""GPM calls, one thread at a time: the fix for a segfault on a multi-GPU host.

Two GPU workers inside ``nvmlGpmMetricsGet`` at once segfaulted on a 2 x H100 NVLink host
(docs/exporter.md, "GPM, one thread at a time"); one at a time they ran clean. These tests
check, on a simulated 8-GPU host read in parallel, that GPM calls never overlap, and that a GPU
stuck inside GPM costs the others at most the lock wait (its last averages stand meanwhile).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from vgpumon.collect import gpm
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.device import READERS as DEVICE_READERS
from vgpumon.collect.registry import every_cycle
from vgpumon.testing import SimHost, SimHostFactory


def _watch_gpm(host: SimHost, hold_seconds: float) -> dict[str, int]:
    """Count how many threads are inside a GPM call at once (each call held ``hold_seconds``)."""
    seen = {"inside": 0, "most": 0, "calls": 0}
    lock = threading.Lock()
    real = host.session.module

    class Watching:
        def __getattr__(self, name: str) -> Any:
            value = getattr(real, name)
            if not callable(value) or not name.startswith("nvmlGpm"):
                return value

            def watched(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    seen["inside"] += 1
                    seen["calls"] += 1
                    seen["most"] = max(seen["most"], seen["inside"])
                try:
                    time.sleep(hold_seconds)  # a real GPM read takes about 2 ms
                    return value(*args, **kwargs)
                finally:
                    with lock:
                        seen["inside"] -= 1

            return watched

    host.session.module = Watching()
    return seen


async def test_gpus_read_in_parallel_never_overlap_in_gpm(sim_host: SimHostFactory) -> None:
    host = sim_host(
        "baremetal-8xh100",
        [*DEVICE_READERS, *gpm.READERS],
        SamplerConfig(dispatch="parallel", cadences=every_cycle()),
    )
    seen = _watch_gpm(host, 0.005)
    await host.cycle()
    host.advance(1.0)
    snapshot = await host.cycle()
    assert snapshot.health.dispatch == "parallel"
    assert seen["calls"] >= 8 * 3, "every GPU sampled GPM (and computed metrics once)"
    assert seen["most"] == 1
    assert all(g.gpm is not None and g.gpm.sm_active is not None for g in snapshot.gpus)


async def test_a_gpu_stuck_in_gpm_costs_the_others_only_the_lock_wait(
    sim_host: SimHostFactory,
) -> None:
    host = sim_host(
        "baremetal-8xh100",
        [*DEVICE_READERS, *gpm.READERS],
        SamplerConfig(dispatch="parallel", cadences=every_cycle()),
    )
    await host.cycle()
    host.advance(1.0)
    before = await host.cycle()
    assert all(g.gpm is not None for g in before.gpus)
    assert gpm._ONE_READER.acquire(timeout=1)  # as a GPU hung inside a GPM call holds it
    try:
        host.advance(1.0)
        started = time.monotonic()
        held = await host.cycle()
        took = time.monotonic() - started
    finally:
        gpm._ONE_READER.release()
    assert took < 10 * gpm.LOCK_WAIT_SECONDS, "the workers waited in parallel, then gave up"
    pairs = zip(held.gpus, before.gpus, strict=True)
    assert all(h.gpm is b.gpm for h, b in pairs), "last averages stand"
    host.advance(1.0)
    after = await host.cycle()
    intervals = [g.gpm.interval_seconds if g.gpm is not None else None for g in after.gpus]
    assert all(i is not None and abs(i - 2.0) < 0.01 for i in intervals), "across the held cycle"
