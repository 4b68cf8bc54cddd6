"""Event-loop iterations per sampling cycle of an idle, unscraped exporter.

Counts the loop's ``selector.select`` calls (one per loop iteration, a wake-up from sleep or not)
while a :class:`~vgpumon.collect.sampler.Sampler` runs its own loop with the exporter's app
built on it and nobody scrapes, and divides by the cycles in the window. No HTTP, no scrapes:
what the sampler and the publisher cost the loop between scrapes.

    python bench/loop_wakeups.py --sim passthrough-guest --sim hgx-8xh100-nvlink

``--real`` does the same on this host's GPUs (pynvml), and ``--serve`` measures the whole
``vgpumon serve`` command instead (its HTTP listener, enrichers and metering included), run in
this process at its default 1 s interval, and also names the callbacks the loop ran, per second.
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


async def per_cycle(scenario: str | None, interval: float, window: float) -> tuple[int, int]:
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


def serve_wakeups(serve_args: list[str], window: float, warm_up: float = 8.0) -> int:
    """Run ``vgpumon serve SERVE_ARGS`` here; after ``warm_up`` s, count the loop's iterations
    and the callbacks it ran over ``window`` s, print them per second, then stop the server."""
    import collections
    import os
    import signal
    import threading
    import time
    from asyncio import events

    from vgpumon.cli import main as cli

    selects = [0]
    callbacks: collections.Counter[str] = collections.Counter()
    real_select = selectors.DefaultSelector.select
    real_run = events.Handle._run

    def select(self: Any, timeout: float | None = None) -> Any:
        selects[0] += 1
        return real_select(self, timeout)

    def run(self: Any) -> Any:
        callback = self._callback
        callbacks[getattr(callback, "__qualname__", type(callback).__name__)] += 1
        return real_run(self)

    selectors.DefaultSelector.select = select  # type: ignore[method-assign]
    events.Handle._run = run  # type: ignore[method-assign]

    def measure() -> None:
        time.sleep(warm_up)
        selects[0] = 0
        callbacks.clear()
        time.sleep(window)
        print(f"loop iterations per second: {selects[0] / window:.2f}")
        for name, count in callbacks.most_common(12):
            print(f"  {count / window:6.2f}/s {name}")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=measure, daemon=True).start()
    return cli(["serve", *serve_args])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", action="append", help="scenario (repeatable)")
    parser.add_argument("--real", action="store_true", help="this host's GPUs, not a scenario")
    parser.add_argument(
        "--serve", nargs=argparse.REMAINDER, metavar="ARGS",
        help="measure `vgpumon serve ARGS` (e.g. --serve --web.listen-address 127.0.0.1:9839)",
    )  # fmt: skip
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--window", type=float, default=4.0)
    args = parser.parse_args()
    if args.serve is not None:
        raise SystemExit(serve_wakeups(args.serve, args.window))
    for scenario in [None] if args.real else args.sim or ["passthrough-guest"]:
        count, cycles = asyncio.run(per_cycle(scenario, args.interval, args.window))
        print(f"| {scenario or 'real'} | {count} | {cycles} | {count / max(cycles, 1):.1f} |")


if __name__ == "__main__":
    main()
