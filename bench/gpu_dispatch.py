"""CPU and wall time of one sampling cycle per GPU dispatch mode, on simulated hosts.

Issue #11 item 6: is reading the GPUs in parallel worth its CPU? For each host (``GxV``: G L40S
GPUs with V vGPUs each, the hosts of ``exporter_cost.py --sim``) and each mode, a sampler exactly
as ``vgpumon serve`` builds it (default readers and cadences) reads a simulator with realistic
per-call costs (``VGPUMON_SIM_LATENCY=realistic``: calls under 100 us spin, longer ones sleep).
Scenario time advances 1 s per cycle, so cadenced values are read as at the default interval.

The modes run in turn, ``--cycles`` cycles each per round, each in a process of its own (one
sampler per process, as in ``serve``: the vGPU scheduler-log pollers and the Xid watcher run on
their own threads), rounds rotating the order, so drift in the machine's load is shared. Per
cycle: the CPU time of the threads that run the cycle (the event loop's, the system worker's and
every GPU worker's, read from their thread CPU clocks: the pollers' time, which does not depend
on the mode, is left out) and the cycle's wall time
(``vgpumon_sampler_last_cycle_duration_seconds``).
Modes: ``parallel``, ``serial`` (the worker-to-worker chain), ``auto``. (A ``serial-awaits``
mode, the loop awaiting each GPU's job, was measured in bench/results/gpu-dispatch.md and then
removed from the sampler: it cost more than the chain.)

    PYTHONPATH=$PWD python bench/gpu_dispatch.py --hosts 1x0,16x0,16x48 --rounds 5 --cycles 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exporter_cost import host_scenario  # the same simulated hosts

MODES = ("parallel", "serial", "auto")


class Run:
    def __init__(self, scenario: str, mode: str, collectors: str = "") -> None:
        from vgpumon.collect.sampler import Sampler
        from vgpumon.commands.serve import sampler_config
        from vgpumon.config.serve import ServeSettings
        from vgpumon.nvml.loader import open_session
        from vgpumon.sim import ManualClock

        self.real = scenario == "real"
        self.clock = ManualClock()
        if self.real:  # this host's GPUs through pynvml, in real time
            self.session = open_session()
        else:
            self.session = open_session(sim=scenario, clock=self.clock)
        config = sampler_config(ServeSettings())
        config.dispatch = mode
        if collectors:
            config.collectors = frozenset(collectors.split(","))
        clock = time.time if self.real else self.clock.now
        self.sampler = Sampler(self.session, config, clock=clock)
        self.cpu: list[float] = []
        self.wall: list[float] = []
        self.modes: dict[str, int] = {}

    def cycle_cpu(self) -> float:
        """CPU seconds so far of the threads that run cycles (loop, system and GPU workers)."""
        idents = [threading.main_thread().ident, self.sampler._system._thread.ident]
        idents += [slot.worker._thread.ident for slot in self.sampler._slots.values()]
        return sum(time.clock_gettime(time.pthread_getcpuclockid(i)) for i in idents if i)

    async def cycles(self, n: int, record: bool = True) -> None:
        for _ in range(n):
            cpu = self.cycle_cpu()
            snap = await self.sampler.cycle()
            cpu = self.cycle_cpu() - cpu
            self.clock.advance(1.0)
            if self.real:
                await asyncio.sleep(0.25)  # real time: cadenced values come due as they will
            if record:
                self.cpu.append(cpu)
                self.wall.append(snap.health.last_cycle_duration_seconds or 0.0)
                mode = snap.health.dispatch or "?"
                self.modes[mode] = self.modes.get(mode, 0) + 1
            await asyncio.sleep(0.005)  # let the workers settle between cycles


async def one(scenario: str, mode: str, cycles: int, collectors: str) -> dict[str, Any]:
    """One mode in this process: warm-up cycles, then ``cycles`` measured."""
    run = Run(scenario, mode, collectors)
    await run.cycles(5, record=False)  # static reads, auto's first measurements
    await run.cycles(cycles)
    run.sampler.close()
    return {"cpu": run.cpu, "wall": run.wall, "modes": run.modes}


def bench_host(
    host: str, rounds: int, cycles: int, modes: list[str], collectors: str
) -> dict[str, Any]:
    out: dict[str, Any] = {m: {"cpu": [], "wall": [], "modes": {}} for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{host}.yaml"
        if host == "real":
            path = Path("real")
        else:
            path.write_text(host_scenario(host))
        for r in range(rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for m in order:
                argv = [sys.executable, __file__, "--one", str(path), m, str(cycles)]
                argv += ["--collectors", collectors]
                got = json.loads(subprocess.run(argv, check=True, capture_output=True).stdout)
                out[m]["cpu"] += got["cpu"]
                out[m]["wall"] += got["wall"]
                for k, v in got["modes"].items():
                    out[m]["modes"][k] = out[m]["modes"].get(k, 0) + v
    return out


def ms(values: list[float], q: float | None = None) -> float:
    if q is None:
        return 1000 * statistics.median(values)
    return 1000 * statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", default="1x0,16x0,16x48", help="GxV sim hosts, or real (pynvml)")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cycles", type=int, default=20, help="cycles per mode per round")
    p.add_argument(
        "--collectors",
        default="",
        help="only these collectors (default: serve's); 'device' alone (static values, read "
        "once) leaves the dispatch's own cost",
    )
    p.add_argument("--one", nargs=3, metavar=("SCENARIO", "MODE", "CYCLES"), help=argparse.SUPPRESS)
    args = p.parse_args()
    os.environ.setdefault("VGPUMON_SIM_LATENCY", "realistic")
    if args.one:
        scenario, mode, n = args.one
        print(json.dumps(asyncio.run(one(scenario, mode, int(n), args.collectors))))
        return 0
    modes = args.modes.split(",")
    print(
        f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, VGPUMON_SIM_LATENCY={os.environ['VGPUMON_SIM_LATENCY']}"
    )
    what = f"collectors {args.collectors}" if args.collectors else "serve's collectors"
    print(f"# {args.rounds} rounds x {args.cycles} cycles per mode, {what}; medians (p90)\n")
    print("| host | mode | CPU ms/cycle | wall ms/cycle | cycles by mode used |")
    print("|---|---|---|---|---|")
    for host in args.hosts.split(","):
        runs = bench_host(host, args.rounds, args.cycles, modes, args.collectors)
        for m, run in runs.items():
            used = ", ".join(f"{k} {v}" for k, v in sorted(run["modes"].items()))
            cpu, wall = run["cpu"], run["wall"]
            print(
                f"| {host} | {m} | {ms(cpu):.2f} ({ms(cpu, 90):.2f}) | "
                f"{ms(wall):.2f} ({ms(wall, 90):.2f}) | {used} |"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
