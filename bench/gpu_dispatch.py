"""CPU and wall time of one sampling cycle per GPU dispatch mode, on simulated hosts.

Issue #11 item 6: is reading the GPUs in parallel worth its CPU? For each host (``GxV``: G L40S
GPUs with V vGPUs each, the hosts of ``exporter_cost.py --sim``) and each mode, a sampler exactly
as ``vgpumon serve`` builds it (default readers and cadences) reads a simulator with realistic
per-call costs (``VGPUMON_SIM_LATENCY=realistic``: calls under 100 us spin, longer ones sleep).
Scenario time advances 1 s per cycle, so cadenced values are read as at the default interval.

The modes run in turn, ``--cycles`` cycles each per round, rounds rotating the order, so drift in
the machine's load is shared. Per cycle: the process's CPU time (every thread: workers, the loop,
the simulator) and the cycle's wall time (``vgpumon_sampler_last_cycle_duration_seconds``).
Modes: ``parallel``, ``serial`` (the worker-to-worker chain), ``serial-awaits`` (the loop awaits
each GPU's job), ``auto``.

    PYTHONPATH=$PWD python bench/gpu_dispatch.py --hosts 1x0,16x0,16x48 --rounds 5 --cycles 20
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

MODES = ("parallel", "serial", "serial-awaits", "auto")


def host_scenario(name: str) -> str:
    # exporter_cost.py's hosts, without importing it (it needs psutil)
    gpus, vgpus = (int(x) for x in name.split("x"))
    out = [f"name: bench-{name}", f"description: {gpus} L40S x {vgpus} vGPUs", "seed: 11", "gpus:"]
    for g in range(gpus):
        out += [
            "  - model: l40s",
            "    virtualization_mode: host_vgpu",
            "    load: {duty: 0.3}",
            "    vgpu:",
            "      types:",
            '        - {id: 1145, name: "NVIDIA L40S-1Q", framebuffer: 1GiB, max_instances: 48}',
            "      scheduler: {policy: best_effort, timeslice: 2ms}",
        ]
        if vgpus:
            out.append("      instances:")
            for i in range(vgpus):
                vid = g * 100 + i + 1
                out.append(
                    f"        - {{id: {vid}, type: 1145, vm_id: vm-{vid}, load: {{sm: 0.02}}}}"
                )
    return "\n".join(out) + "\n"


class Run:
    def __init__(self, scenario: str, mode: str) -> None:
        from vgpumon.collect.sampler import Sampler
        from vgpumon.commands.serve import sampler_config
        from vgpumon.config.serve import ServeSettings
        from vgpumon.nvml.loader import open_session
        from vgpumon.sim import ManualClock

        self.clock = ManualClock()
        self.session = open_session(sim=scenario, clock=self.clock)
        config = sampler_config(ServeSettings())
        config.dispatch = "serial" if mode == "serial-awaits" else mode
        self.sampler = Sampler(self.session, config, clock=self.clock.now)
        if mode == "serial-awaits":
            self.sampler._serial_style = "awaits"
        self.cpu: list[float] = []
        self.wall: list[float] = []
        self.modes: dict[str, int] = {}

    async def cycles(self, n: int, record: bool = True) -> None:
        for _ in range(n):
            cpu = time.process_time()
            snap = await self.sampler.cycle()
            cpu = time.process_time() - cpu
            self.clock.advance(1.0)
            if record:
                self.cpu.append(cpu)
                self.wall.append(snap.health.last_cycle_duration_seconds or 0.0)
                mode = snap.health.dispatch or "?"
                self.modes[mode] = self.modes.get(mode, 0) + 1
            await asyncio.sleep(0.005)  # let the workers settle between cycles


async def bench_host(host: str, rounds: int, cycles: int, modes: list[str]) -> dict[str, Run]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{host}.yaml"
        path.write_text(host_scenario(host))
        runs = {m: Run(str(path), m) for m in modes}
        for run in runs.values():
            await run.cycles(5, record=False)  # static reads, auto's first measurements
        for r in range(rounds):
            order = modes[r % len(modes) :] + modes[: r % len(modes)]
            for m in order:
                await runs[m].cycles(cycles)
        for run in runs.values():
            run.sampler.close()
        return runs


def ms(values: list[float], q: float | None = None) -> float:
    if q is None:
        return 1000 * statistics.median(values)
    return 1000 * statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hosts", default="1x0,16x0,16x48")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--cycles", type=int, default=20, help="cycles per mode per round")
    args = p.parse_args()
    os.environ.setdefault("VGPUMON_SIM_LATENCY", "realistic")
    modes = args.modes.split(",")
    print(
        f"# {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, VGPUMON_SIM_LATENCY={os.environ['VGPUMON_SIM_LATENCY']}"
    )
    print(f"# {args.rounds} rounds x {args.cycles} cycles per mode; medians (p90)\n")
    print("| host | mode | CPU ms/cycle | wall ms/cycle | cycles by mode used |")
    print("|---|---|---|---|---|")
    for host in args.hosts.split(","):
        runs = asyncio.run(bench_host(host, args.rounds, args.cycles, modes))
        for m, run in runs.items():
            used = ", ".join(f"{k} {v}" for k, v in sorted(run.modes.items()))
            print(
                f"| {host} | {m} | {ms(run.cpu):.2f} ({ms(run.cpu, 90):.2f}) | "
                f"{ms(run.wall):.2f} ({ms(run.wall, 90):.2f}) | {used} |"
            )
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
