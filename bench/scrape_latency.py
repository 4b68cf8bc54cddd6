"""Scrape latency of `vgpumon serve` under concurrent scrapers, and the cost of one render.

Two measurements:

1. ``vgpumon serve --sim SCENARIO`` in its own process (the largest built-in scenario by default:
   the one with the most samples), hit by CONCURRENCY scrapers in one asyncio client process, each
   scraping REQUESTS times back to back with Prometheus' own Accept and Accept-Encoding headers.
   Latency is per request, measured in the client (request sent to body read).
2. The cold render of one snapshot (what the first scrape after each sampling cycle pays) for the
   largest built-in scenario and for a synthetic 16 GPU x 48 vGPU host, the design's upper bound.

Usage: python bench/scrape_latency.py [--scenario NAME] [--concurrency 50] [--seconds 10]
       [--max-requests N]
Prints a Markdown report (bench/results/scrape-latency.md holds a run of it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import aiohttp

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export.exposition import render
from vgpumon.model import (
    Gpu,
    Memory,
    Snapshot,
    Utilization,
    VgpuInstance,
    VgpuLicense,
    VgpuScheduler,
    VgpuSchedulerUsage,
    VgpuUtilization,
)
from vgpumon.nvml.loader import open_session
from vgpumon.sim import builtin_scenarios

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def snapshot_of(scenario: str) -> Snapshot:
    async def two_cycles() -> Snapshot:
        sampler = Sampler(open_session(sim=scenario), SamplerConfig(deadline_seconds=2.0))
        try:
            await sampler.cycle()
            await asyncio.sleep(0.2)
            return await sampler.cycle()
        finally:
            sampler.close()
            release = getattr(sampler.session.module, "release_hangs", None)
            if callable(release):
                release()

    return asyncio.run(two_cycles())


def largest_scenario() -> tuple[str, Snapshot, int]:
    best: tuple[str, Snapshot, int] | None = None
    for name in sorted(builtin_scenarios()):
        snap = snapshot_of(name)
        samples = sum(1 for line in render(snap).splitlines() if not line.startswith(b"#"))
        if best is None or samples > best[2]:
            best = (name, snap, samples)
    assert best is not None, "no built-in scenarios"
    return best


def synthetic_host(gpus: int = 16, vgpus: int = 48) -> Snapshot:
    """The design's largest host: 16 GPUs x 48 vGPUs, every vGPU with utilization and license."""
    out = []
    for g in range(gpus):
        instances = tuple(
            VgpuInstance(
                vgpu_id=g * 1000 + v,
                uuid=f"{g:08x}-{v:04x}-0000-0000-000000000000",
                vm_id=f"vm-{g}-{v}",
                vm_id_type="uuid",
                type_name="NVIDIA L40S-1Q",
                type_class="Quadro",
                guest_driver_version="580.82.07",
                framebuffer_total_bytes=1 << 30,
                framebuffer_used_bytes=1 << 29,
                encoder_sessions=1,
                fbc_sessions=0,
                utilization=VgpuUtilization(0.1, 0.05, 0.0, 0.0, samples=6),
                license=VgpuLicense(True, "licensed", "valid", 1.9e9),
            )
            for v in range(vgpus)
        )
        out.append(
            Gpu(
                index=g,
                uuid=f"GPU-{g:08x}-0000-0000-0000-000000000000",
                name="NVIDIA L40S",
                virtualization_mode="host_vgpu",
                utilization=Utilization(0.5, 0.2, 0.0, 0.0),
                memory=Memory(48 << 30, 24 << 30, 24 << 30, 1 << 30),
                power_watts=200.0,
                vgpu_instances=instances,
                vgpu_schedulers=(
                    VgpuScheduler(
                        policy="equal_share",
                        timeslice_seconds=0.002,
                        usage=tuple(VgpuSchedulerUsage(i.vgpu_id, 1.0, 0.1) for i in instances),
                    ),
                ),
            )
        )
    return Snapshot(timestamp=time.time(), gpus=tuple(out))


def render_cost(snapshot: Snapshot, repeat: int = 20) -> tuple[float, float, int, int]:
    """(median text ms, median OpenMetrics ms, samples, body bytes) of a cold render."""
    text = [0.0] * repeat
    om = [0.0] * repeat
    body = b""
    for i in range(repeat):
        fresh = dataclasses.replace(snapshot)  # a new object: nothing cached anywhere
        t0 = time.perf_counter()
        body = render(fresh)
        t1 = time.perf_counter()
        render(fresh, openmetrics=True)
        t2 = time.perf_counter()
        text[i], om[i] = (t1 - t0) * 1e3, (t2 - t1) * 1e3
    samples = sum(1 for line in body.splitlines() if not line.startswith(b"#"))
    return statistics.median(text), statistics.median(om), samples, len(body)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def scrape_load(url: str, concurrency: int, seconds: float) -> dict[str, Any]:
    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, auto_decompress=False) as session:
        for _ in range(20):  # warm-up: connections, the first render
            async with session.get(url, headers=headers) as resp:
                await resp.read()

        async def scraper() -> None:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                async with session.get(url, headers=headers) as resp:
                    await resp.read()
                latencies.append(time.perf_counter() - t0)
                statuses[resp.status] = statuses.get(resp.status, 0) + 1

        started = time.perf_counter()
        stop_at = started + seconds
        await asyncio.gather(*(scraper() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e3

    return {
        "requests": len(latencies),
        "statuses": statuses,
        "p50": pct(0.50),
        "p90": pct(0.90),
        "p99": pct(0.99),
        "max": latencies[-1] * 1e3,
        "rate": len(latencies) / wall,
    }


def wait_ready(base: str, proc: subprocess.Popen[bytes], seconds: float = 30) -> None:
    import urllib.request

    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            raise SystemExit(f"vgpumon serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("vgpumon serve did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", help="built-in scenario (default: the largest)")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the load")
    parser.add_argument(
        "--max-requests", help="the server's --web.max-requests (default: the server's default)"
    )
    parser.add_argument("--interval", default="1", help="sampling interval of the server")
    args = parser.parse_args()

    if args.scenario:
        name, snap = args.scenario, snapshot_of(args.scenario)
    else:
        name, snap, _ = largest_scenario()
    scen_text, scen_om, scen_samples, scen_bytes = render_cost(snap)
    syn_text, syn_om, syn_samples, syn_bytes = render_cost(synthetic_host())

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable, "-m", "vgpumon.cli", "serve", "--sim", name,
        "--listen", f"127.0.0.1:{port}", "--interval", args.interval, "--log-level", "warning",
    ]
    if args.max_requests:
        cmd += ["--web.max-requests", args.max_requests]
    proc = subprocess.Popen(cmd)
    try:
        wait_ready(base, proc)
        load = asyncio.run(scrape_load(f"{base}/metrics", args.concurrency, args.seconds))
    finally:
        proc.terminate()
        proc.wait(timeout=15)

    print("# Scrape latency\n")
    command = " ".join(["python bench/scrape_latency.py", *sys.argv[1:]])
    print(f"Command: `{command}`\n")
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.platform()}\n"
    )
    print(f"## {args.concurrency} concurrent scrapers, `vgpumon serve --sim {name}`\n")
    cap = args.max_requests or "default (40)"
    print(
        f"Server: own process, sampling every {args.interval} s, --web.max-requests {cap}. "
        f"Client: one asyncio process, {args.concurrency} scrapers scraping back to back for "
        f"{args.seconds:g} s with Prometheus' Accept header (OpenMetrics) and "
        "`Accept-Encoding: gzip`.\n"
    )
    print("| requests | statuses | p50 ms | p90 ms | p99 ms | max ms | scrapes/s |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {load['requests']} | {load['statuses']} | {load['p50']:.1f} | {load['p90']:.1f} | "
        f"{load['p99']:.1f} | {load['max']:.1f} | {load['rate']:.0f} |\n"
    )
    print("## Cold render of one snapshot (median of 20)\n")
    print("| snapshot | samples | text bytes | text ms | OpenMetrics ms |")
    print("|---|---|---|---|---|")
    print(f"| {name} | {scen_samples} | {scen_bytes} | {scen_text:.1f} | {scen_om:.1f} |")
    print(
        f"| synthetic 16 GPUs x 48 vGPUs | {syn_samples} | {syn_bytes} | {syn_text:.1f} | "
        f"{syn_om:.1f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
