"""CPU and wall time of one render of the simulated 16 GPU x 48 vGPU host, snapshot after snapshot.

Each render gets a new snapshot in which every value a sampler's next cycle brings is new, at the
resolution NVML reports it (utilizations in whole percent, framebuffer in MiB, power in
milliwatts, scheduler times in microseconds), while the entities stay the same:

- **first**: a new :class:`~vgpumon.metrics.exposition.Renderer` (nothing cached: the first
  snapshot after start or after a reload of the export options);
- **next**: the same renderer again (what every later snapshot costs);
- **next, one vGPU replaced**: the same, but in each snapshot one vGPU is another one (a VM
  stopped and another started: the vGPU scope's entities change).

CPU is ``time.process_time()`` around ``Renderer.render`` (the render holds the GIL all along, so
its CPU is what it takes from the event loop); wall is ``time.perf_counter()``. Medians over
``--repeat`` renders of each kind.

    python bench/render_cpu.py [--repeat 30] [--gpus 16] [--vgpus 48]

Prints a Markdown table (bench/results/render-16x48-*.md hold runs of it).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import platform
import random
import statistics
import sys
import time

from scrape_latency import synthetic_host  # bench/scrape_latency.py

from vgpumon.metrics.exposition import Renderer
from vgpumon.model import Snapshot, Utilization, VgpuSchedulerUsage, VgpuUtilization


def percent(rnd: random.Random) -> float:
    return rnd.randrange(101) / 100


def micros(rnd: random.Random, most: float) -> float:
    return rnd.randrange(int(most * 1e6)) / 1e6


def varied(base: Snapshot, seed: int) -> Snapshot:
    """``base`` with new values wherever a sampler's next cycle would bring them."""
    rnd = random.Random(seed)
    gpus = []
    for g in base.gpus:
        instances = tuple(
            dataclasses.replace(
                v,
                utilization=VgpuUtilization(percent(rnd), percent(rnd), 0.0, 0.0, samples=6),
                framebuffer_used_bytes=rnd.randrange(1024) << 20,
            )
            for v in g.vgpu_instances
        )
        schedulers = tuple(
            dataclasses.replace(
                s,
                usage=tuple(
                    VgpuSchedulerUsage(u.vgpu_id, micros(rnd, 1e5), micros(rnd, 1e3))
                    for u in s.usage
                ),
            )
            for s in g.vgpu_schedulers
        )
        gpus.append(
            dataclasses.replace(
                g,
                vgpu_instances=instances,
                vgpu_schedulers=schedulers,
                power_watts=rnd.randrange(100_000, 300_000) / 1e3,
                utilization=Utilization(percent(rnd), percent(rnd), 0.0, 0.0),
            )
        )
    return dataclasses.replace(base, gpus=tuple(gpus), timestamp=time.time())


def replaced(snapshot: Snapshot, seed: int) -> Snapshot:
    """``snapshot`` with one vGPU (a different one each time) given a new identity."""
    gpus = list(snapshot.gpus)
    g = seed % len(gpus)
    instances = list(gpus[g].vgpu_instances)
    if instances:
        v = seed % len(instances)
        instances[v] = dataclasses.replace(instances[v], vgpu_id=1_000_000 + seed)
        gpus[g] = dataclasses.replace(gpus[g], vgpu_instances=tuple(instances))
    return dataclasses.replace(snapshot, gpus=tuple(gpus))


def timed(renderer: Renderer, snapshot: Snapshot) -> tuple[float, float]:
    """(CPU ms, wall ms) of one render of both formats."""
    cpu, wall = time.process_time(), time.perf_counter()
    renderer.render(snapshot)
    return (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=30, help="renders of each kind")
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--vgpus", type=int, default=48)
    args = parser.parse_args()
    if args.repeat < 1 or args.gpus < 1 or args.vgpus < 0:
        print("render_cpu: --repeat and --gpus must be at least 1, --vgpus at least 0")
        return 2
    base = synthetic_host(args.gpus, args.vgpus)
    snapshots = [varied(base, seed) for seed in range(args.repeat + 1)]
    renderer = Renderer()
    body = renderer.render(snapshots[0]).text
    first = [timed(Renderer(), s) for s in snapshots[1:]]
    following = [timed(renderer, s) for s in snapshots[1:]]
    churn = [timed(renderer, replaced(s, seed)) for seed, s in enumerate(snapshots[1:])]
    load = os.getloadavg()
    print(f"## Render of one {args.gpus} GPU x {args.vgpus} vGPU snapshot\n")
    print(f"- date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC")
    python = platform.python_version()
    print(f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {python}")
    print(f"- load average before the renders: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"- command: python bench/render_cpu.py {' '.join(sys.argv[1:])}".rstrip())
    lines = body.count(b"\n")
    print(f"- body: {len(body)} bytes, {lines} lines (text format)")
    print(f"- medians of {args.repeat} renders, each of a snapshot with new values\n")
    print("| render | CPU ms | wall ms |")
    print("|---|---|---|")
    for name, rows in (
        ("first snapshot (new renderer)", first),
        ("next snapshots", following),
        ("next snapshots, one vGPU replaced in each", churn),
    ):
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        print(f"| {name} | {cpu:.2f} | {wall:.2f} |")
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
