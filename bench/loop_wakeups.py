"""Event-loop iterations per sampling cycle of an idle, unscraped exporter (simulated host).

Counts the loop's ``selector.select`` calls (one per loop iteration, a wake-up from sleep or not)
while a :class:`~vgpumon.collect.sampler.Sampler` runs its own loop with the exporter's app
built on it and nobody scrapes, and divides by the cycles in the window. No HTTP, no scrapes:
what the sampler and the publisher cost the loop between scrapes.

    python bench/loop_wakeups.py --sim passthrough-guest --sim hgx-8xh100-nvlink
"""

from __future__ import annotations

import argparse
import asyncio
import selectors
from typing import Any

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export.server import build_app
from vgpumon.nvml.loader import open_session


async def per_cycle(scenario: str, interval: float, window: float) -> tuple[int, int]:
    """(loop iterations, cycles) over ``window`` seconds after a warm-up."""
    loop = asyncio.get_running_loop()
    sampler = Sampler(open_session(sim=scenario), SamplerConfig(interval_seconds=interval))
    app = build_app(sampler)
    app.publisher.kick()
    stop = asyncio.Event()
    task = asyncio.create_task(sampler.run(stop))
    await asyncio.sleep(5 * interval)  # first cycles and the first render
    selector: selectors.BaseSelector = loop._selector  # type: ignore[attr-defined]
    real = selector.select
    count = 0

    def select(timeout: float | None = None) -> Any:
        nonlocal count
        count += 1
        return real(timeout)

    selector.select = select  # type: ignore[method-assign]
    first = sampler.latest
    cycles_before = _cycles(first)
    await asyncio.sleep(window)
    selector.select = real  # type: ignore[method-assign]
    cycles = _cycles(sampler.latest) - cycles_before
    stop.set()
    await task
    await app.publisher.close()
    sampler.close()
    return count, cycles


def _cycles(snapshot: Any) -> int:
    return int(snapshot.health.cycles_total) if snapshot is not None else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", action="append", help="scenario (repeatable)")
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--window", type=float, default=4.0)
    args = parser.parse_args()
    for scenario in args.sim or ["passthrough-guest"]:
        count, cycles = asyncio.run(per_cycle(scenario, args.interval, args.window))
        print(f"| {scenario} | {count} | {cycles} | {count / max(cycles, 1):.1f} |")


if __name__ == "__main__":
    main()
