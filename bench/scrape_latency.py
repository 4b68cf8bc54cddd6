"""Scrape latency of `vgpumon serve` as a user runs it (its own sampler), and of the server alone.

The verdict (the default): the whole ``vgpumon serve`` with its own sampler, on a large host (the
16 GPU x 48 vGPU scenario by default), hit by an open loop of ``--rate`` scrapes per second
(Prometheus' Accept header, OpenMetrics, gzip) for ``--seconds`` at each ``--intervals``; latency is
measured from each request's scheduled time, so a stalled server cannot hide behind fewer
requests. The server runs under ``bench/serve_probe.py``, which records its event loop's stalls.
Three columns (``--columns``):

* ``sim``: ``serve --sim SCENARIO``, the simulator standing in for NVML (its Python runs in the
  sampler, as a driver's code does not);
* ``standin``: ``serve --nvml-module nvml_standin`` (``bench/shim/nvml_standin.py``): the same
  host's answers at a real GPU's per-call costs, spent with the interpreter released as ctypes
  releases it for libnvidia-ml;
* ``synthetic``: the server alone, no sampler, serving a synthetic host of the same size whose
  snapshot is replaced every interval (what the HTTP side can do; a second column, never the
  verdict).

Other modes:

* ``--synthetic``: only the server alone, closed loop (``--concurrency``), open loop (``--rate``)
  or bursts (``--burst``);
* ``--closed``: the whole ``serve`` on a built-in scenario (``--scenario``, default the largest),
  ``--concurrency`` scrapers back to back, with the cold render of one snapshot;
* ``--compare-render``: prometheus-client's renderer against vgpumon's on 16 x 48.

Usage: python bench/scrape_latency.py [--rate 100] [--seconds 20] [--intervals 1,5]
       python bench/scrape_latency.py --synthetic [--rate 1000] [--concurrency 50] [--seconds 10]
Prints a Markdown report (bench/results/scrape-latency*.md hold runs of it); ``--json`` writes
every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from serve_ready import free_port, wait_ready  # bench/serve_ready.py

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export.address import ListenAddress
from vgpumon.export.connections import ConnectionGuard, ServerLimits
from vgpumon.export.gc_settings import settle_after_startup
from vgpumon.export.listener import Listener
from vgpumon.export.server import build_app, process_families
from vgpumon.metrics.exposition import render
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


def prometheus_client_render(snapshot: Snapshot) -> tuple[bytes, bytes]:
    """Both formats through prometheus-client's own objects and encoders (the old renderer)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

    from vgpumon.metrics.table import FAMILIES, ExportOptions

    class Collector:
        def collect(self) -> Any:
            for family in FAMILIES:
                metric = None
                for labels, value in family.samples(snapshot, ExportOptions()):
                    if metric is None:
                        metric = Metric(
                            family.base_name, family.help, family.type, unit=family.unit
                        )
                    metric.add_sample(
                        family.name, dict(zip(family.labels, labels, strict=True)), value
                    )
                if metric is not None:
                    yield metric

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry), generate_openmetrics(registry)


def gzip_both(exposition: Any) -> tuple[bytes, bytes]:
    import gzip

    return gzip.compress(exposition.text, 6), gzip.compress(exposition.openmetrics, 6)


def compare_render(repeat: int = 5) -> None:
    """Median ms per snapshot of the 16 x 48 host: prometheus-client against vgpumon's renderer."""
    from functools import partial

    from vgpumon.metrics.exposition import Renderer

    snap = synthetic_host()
    renderer = Renderer()
    rows: dict[str, list[float]] = {}

    def timed(name: str, fn: Any) -> Any:
        t0 = time.perf_counter()
        out = fn()
        rows.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
        return out

    for _ in range(repeat):
        fresh = dataclasses.replace(snap, timestamp=time.time())
        ref_text, ref_om = timed(
            "prometheus-client, text + OpenMetrics", partial(prometheus_client_render, fresh)
        )
        timed("vgpumon renderer, both formats, first snapshot", partial(Renderer().render, fresh))
        mine = timed(
            "vgpumon renderer, both formats, next snapshots (label sets cached)",
            partial(renderer.render, fresh),
        )
        timed("gzip of both bodies (worker thread, GIL released)", partial(gzip_both, mine))
        assert mine.text == ref_text and mine.openmetrics == ref_om, "byte-identical"
    print(f"## Render of one 16 GPU x 48 vGPU snapshot (median of {repeat})\n")
    print(f"Machine load average {os.getloadavg()[0]:.1f}; both outputs byte-identical.\n")
    print("| renderer | ms |")
    print("|---|---|")
    for name, values in rows.items():
        print(f"| {name} | {statistics.median(values):.1f} |")
    print()


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


# -- the synthetic-host server ----------------------------------------------------------------


@dataclasses.dataclass
class Ticker:
    """A snapshot source that publishes a new synthetic snapshot every ``interval`` seconds."""

    base: Snapshot
    latest: Snapshot | None = None
    name: str = "synthetic host"
    not_ready_reason: str | None = None
    listeners: list[Callable[[Snapshot], object]] = dataclasses.field(default_factory=list)

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self.listeners.append(listener)

    def refresh(self) -> None:
        pass

    async def run(self, stop: asyncio.Event) -> None:
        await stop.wait()

    def tick(self, n: int) -> None:
        # New power values each tick (the values change, the identities do not), a new object.
        gpus = tuple(
            dataclasses.replace(g, power_watts=150.0 + (n + i) % 50)
            for i, g in enumerate(self.base.gpus)
        )
        self.latest = latest = dataclasses.replace(self.base, timestamp=time.time(), gpus=gpus)
        for listener in self.listeners:  # as the sampler tells the publisher
            listener(latest)


async def serve_synthetic(
    port: int,
    interval: float,
    gpus: int,
    vgpus: int,
    web_config: str | None,
    gc_freeze: bool = True,
) -> None:
    """Serve the synthetic host on 127.0.0.1:PORT until SIGTERM (the benchmark's server side),
    with serve's memory settings: the allocator tuned before any thread, and the housekeeping
    (a collection and malloc_trim once a minute, after a publish)."""
    import signal

    from vgpumon import allocator
    from vgpumon.export.housekeeping import Housekeeping

    allocator.tune()
    runtime = None
    if web_config:
        from vgpumon.export.webconfig_runtime import WebConfigRuntime

        runtime = WebConfigRuntime(web_config)
    source = Ticker(synthetic_host(gpus, vgpus))
    source.tick(0)
    app = build_app(source, web_config=runtime, max_requests=10_000, extra=process_families())
    ssl_context = runtime.ssl_context() if runtime is not None else None
    limits = ServerLimits(max_connections=int(os.environ.get("VGPUMON_BENCH_MAX_CONN", "128")))
    listener = Listener(app, ConnectionGuard(limits))
    await listener.start([ListenAddress("127.0.0.1", port)], ssl_context)
    app.publisher.kick()  # as `serve` does: render the first snapshot at once
    if gc_freeze:  # as `vgpumon serve` does once it is up
        settle_after_startup()
    housekeeping = Housekeeping()
    app.publisher.after_publish.append(housekeeping.after_publish)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    probe_out = os.environ.get("VGPUMON_BENCH_PROBE_OUT")  # the loop's stalls, as serve_probe.py
    probing = None
    if probe_out:
        from serve_probe import Probe

        probe = Probe()
        probing = asyncio.get_running_loop().create_task(probe.run())
    n = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            n += 1
            source.tick(n)
    await listener.close(1.0)
    await app.publisher.close()
    if probing is not None and probe_out:
        import json

        probing.cancel()
        with open(probe_out, "w", encoding="utf-8") as f:
            json.dump(probe.summary(), f)


def start_synthetic_server(
    port: int,
    interval: float,
    gpus: int,
    vgpus: int,
    web_config: str | None = None,
    gc_freeze: bool = True,
) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        __file__,
        "--serve-synthetic",
        str(port),
        "--interval",
        str(interval),
        "--gpus",
        str(gpus),
        "--vgpus",
        str(vgpus),
    ]
    if web_config:
        cmd += ["--web-config", web_config]
    if not gc_freeze:
        cmd.append("--no-gc-freeze")
    return subprocess.Popen(cmd)


# -- load generators (one per client process) ---------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Load:
    url: str
    seconds: float
    concurrency: int = 0  # closed loop: this many scrapers back to back
    rate: float = 0.0  # open loop: this many scrapes per second
    burst: bool = False  # with concurrency: all scrapers at once, once a second (Prometheus-like)
    auth: tuple[str, str] | None = None
    cafile: str | None = None


class Lane:
    """One kept-alive HTTP/1.1 connection speaking just enough HTTP for a scrape.

    A hand-written client because aiohttp's client costs more CPU per request than the server
    under test, and client and server share the machine.
    """

    def __init__(self, load: Load, ssl_ctx: Any) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(load.url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.ssl = ssl_ctx
        lines = [
            f"GET {parts.path} HTTP/1.1",
            f"Host: {self.host}:{self.port}",
            f"Accept: {PROMETHEUS_ACCEPT}",
            "Accept-Encoding: gzip",
        ]
        if load.auth:
            import base64

            token = base64.b64encode(":".join(load.auth).encode()).decode()
            lines.append(f"Authorization: Basic {token}")
        self.request = ("\r\n".join(lines) + "\r\n\r\n").encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self) -> int:
        if self.writer is None or self.reader is None or self.reader.at_eof():
            self.reader, self.writer = await asyncio.open_connection(
                self.host, self.port, ssl=self.ssl
            )
        self.writer.write(self.request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await self.reader.readexactly(length)
        if b"connection: close" in head.lower():
            self.close()
        return status

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _client_load(load: Load) -> tuple[list[float], dict[int, int]]:
    import ssl

    ssl_ctx: Any = ssl.create_default_context(cafile=load.cafile) if load.cafile else None
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    lanes: asyncio.Queue[Lane] = asyncio.Queue()
    for _ in range(max(load.concurrency, 32)):
        lanes.put_nowait(Lane(load, ssl_ctx))
    for lane in list(lanes._queue):  # type: ignore[attr-defined]
        await lane.get()  # warm-up: connections (and TLS handshakes), the first render

    async def one(scheduled: float) -> None:
        lane = await lanes.get()
        try:
            status = await asyncio.wait_for(lane.get(), 30)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
            lane.close()
            status = 0
        finally:
            lanes.put_nowait(lane)
        latencies.append(time.perf_counter() - scheduled)
        statuses[status] = statuses.get(status, 0) + 1

    started = time.perf_counter()
    stop_at = started + load.seconds
    if load.burst:
        k = 0
        while started + k < stop_at:
            delay = started + k - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            scheduled = time.perf_counter()
            await asyncio.gather(*(one(scheduled) for _ in range(load.concurrency)))
            k += 1
    elif load.rate:
        gap = 1.0 / load.rate
        pending: set[asyncio.Task[None]] = set()
        k = 0
        while True:
            scheduled = started + k * gap
            if scheduled >= stop_at:
                break
            delay = scheduled - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(one(scheduled))
            pending.add(task)
            task.add_done_callback(pending.discard)
            k += 1
        await asyncio.gather(*pending)
    else:

        async def scraper() -> None:
            while time.perf_counter() < stop_at:
                await one(time.perf_counter())

        await asyncio.gather(*(scraper() for _ in range(load.concurrency)))
    while not lanes.empty():
        lanes.get_nowait().close()
    return latencies, statuses


def _client_process(load: Load, out: Any) -> None:
    out.put(asyncio.run(_client_load(load)))


def run_clients(load: Load, procs: int) -> dict[str, Any]:
    """``load`` split over ``procs`` client processes; merged latency figures."""
    per = dataclasses.replace(
        load,
        concurrency=max(1, load.concurrency // procs) if load.concurrency else 0,
        rate=load.rate / procs,
    )
    queue: Any = multiprocessing.get_context("spawn").Queue()
    workers = [
        multiprocessing.get_context("spawn").Process(target=_client_process, args=(per, queue))
        for _ in range(procs)
    ]
    for w in workers:
        w.start()
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    for _ in workers:
        lat, st = queue.get(timeout=load.seconds + 120)
        latencies += lat
        for k, v in st.items():
            statuses[k] = statuses.get(k, 0) + v
    for w in workers:
        w.join(timeout=30)
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1e3

    return {
        "requests": len(latencies),
        "statuses": statuses,
        "non_200": sum(v for k, v in statuses.items() if k != 200),
        "p50": pct(0.50),
        "p90": pct(0.90),
        "p99": pct(0.99),
        "max": latencies[-1] * 1e3,
        "rate": len(latencies) / load.seconds,
    }


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def synthetic_main(args: argparse.Namespace) -> int:
    port = free_port()
    proc = start_synthetic_server(
        port, float(args.interval), args.gpus, args.vgpus, gc_freeze=not args.no_gc_freeze
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base, proc)
        load = Load(
            f"{base}/metrics",
            args.seconds,
            args.concurrency if not args.rate else 0,
            float(args.rate or 0),
            burst=args.burst,
        )
        cpu0 = process_cpu_seconds(proc.pid)
        result = run_clients(load, args.client_procs)
        result["server_cpu_ms_per_scrape"] = (
            (process_cpu_seconds(proc.pid) - cpu0) * 1e3 / max(1, result["requests"])
        )
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    mode = (
        f"{args.rate:g} scrapes/s (open loop)"
        if args.rate
        else f"{args.concurrency} scrapers arriving together once a second"
        if args.burst
        else f"{args.concurrency} concurrent scrapers (closed loop)"
    )
    target = "pass" if result["p99"] < 5.0 and result["non_200"] == 0 else "MISS"
    print(f"## Synthetic {args.gpus} GPUs x {args.vgpus} vGPUs, {mode}\n")
    print(f"Command: `python bench/scrape_latency.py {' '.join(sys.argv[1:])}`  ")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ")
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.platform()}, load average "
        f"{os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| requests | statuses | p50 ms | p90 ms | p99 ms | max ms | scrapes/s "
        "| server CPU ms/scrape | p99 < 5 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {result['requests']} | {result['statuses']} | {result['p50']:.2f} | "
        f"{result['p90']:.2f} | {result['p99']:.2f} | {result['max']:.1f} | "
        f"{result['rate']:.0f} | {result['server_cpu_ms_per_scrape']:.3f} | {target} |\n"
    )
    return 0


# -- the whole serve, with its own sampler (the verdict) ----------------------------------------

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
BIG_HOST = os.path.join(BENCH, "scenarios", "vgpu-16x48.yaml")
COLUMNS = ("sim", "standin", "synthetic")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and its children (the sampler process), user and system."""
    total = process_cpu_seconds(pid)
    children: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):  # each thread lists the children it made
            with open(f"/proc/{pid}/task/{task}/children") as f:
                children += [int(c) for c in f.read().split()]
    for child in children:
        with contextlib.suppress(OSError, IndexError):  # it ended meanwhile
            total += tree_cpu_seconds(child)
    return total


def start_column(
    column: str, scenario: str, interval: float, port: int, probe_out: str
) -> subprocess.Popen[bytes]:
    """The server of one column, its event loop under bench/serve_probe.py."""
    env = dict(os.environ)
    every = f"{interval:g}"
    listen = ["--web.listen-address", f"127.0.0.1:{port}", "--interval", every]
    listen += ["--log.level", "warning"]
    if column == "synthetic":
        env["VGPUMON_BENCH_PROBE_OUT"] = probe_out
        gpus, vgpus = synthetic_size(scenario)
        cmd = [sys.executable, __file__, "--serve-synthetic", str(port), "--interval", every,
               "--gpus", str(gpus), "--vgpus", str(vgpus)]  # fmt: skip
        return subprocess.Popen(cmd, env=env)
    probe = [sys.executable, os.path.join(BENCH, "serve_probe.py"), probe_out, "serve"]
    if column == "sim":
        return subprocess.Popen([*probe, "--sim", scenario, *listen], env=env)
    if column == "standin":
        shim = os.path.join(BENCH, "shim")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (shim, ROOT, env.get("PYTHONPATH")) if p)
        env["VGPUMON_STANDIN_SCENARIO"] = scenario
        return subprocess.Popen([*probe, "--nvml-module", "nvml_standin", *listen], env=env)
    raise SystemExit(f"unknown column {column!r} (one of {', '.join(COLUMNS)})")


def synthetic_size(scenario: str) -> tuple[int, int]:
    """GPUs and vGPUs per GPU of the synthetic host standing beside ``scenario``: the same size."""
    if os.path.abspath(scenario) == os.path.abspath(BIG_HOST):
        return 16, 48
    snap = snapshot_of(scenario)
    return len(snap.gpus), max((len(g.vgpu_instances) for g in snap.gpus), default=0)


def whole_run(
    column: str, scenario: str, interval: float, args: argparse.Namespace
) -> dict[str, Any]:
    """One column at one interval: latency of the open loop, and the server's loop stalls."""
    import json
    import tempfile

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        probe_out = os.path.join(tmp, "probe.json")
        proc = start_column(column, scenario, interval, port, probe_out)
        base = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base, proc, seconds=120)
            time.sleep(args.warm_up)  # first renders, the sampler's first cadenced cycles
            load = Load(f"{base}/metrics", args.seconds, 0, float(args.rate))
            cpu0 = tree_cpu_seconds(proc.pid)
            result = run_clients(load, args.client_procs)
            result["server_cpu_share"] = (tree_cpu_seconds(proc.pid) - cpu0) / args.seconds
        finally:
            proc.terminate()
            proc.wait(timeout=60)
        with open(probe_out, encoding="utf-8") as f:
            result["loop"] = json.load(f)
    result.update(column=column, interval=interval)
    return result


def whole_main(args: argparse.Namespace) -> int:
    import json

    scenario = args.scenario or BIG_HOST
    intervals = [float(i) for i in str(args.intervals).split(",")]
    columns = [c for c in args.columns.split(",") if c]
    rows = []
    for interval in intervals:
        for column in columns:
            row = whole_run(column, scenario, interval, args)
            rows.append(row)
            print(
                f"  {column} at {interval:g} s: p99 {row['p99']:.2f} ms, loop stall max "
                f"{row['loop']['stall_max_ms']:.1f} ms",
                file=sys.stderr,
                flush=True,
            )
    name = os.path.basename(scenario).removesuffix(".yaml")
    print(f"## Whole `vgpumon serve` on {name}: open loop, {args.rate:g} scrapes/s\n")
    print(f"Command: `python bench/scrape_latency.py {' '.join(sys.argv[1:])}`  ")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ")
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.platform()}, load average "
        f"{os.getloadavg()[0]:.1f} at the end\n"
    )
    print(
        f"Each run: the server started, ready, {args.warm_up:g} s of warm-up, then "
        f"{args.seconds:g} s of scrapes (Prometheus' Accept header, OpenMetrics, gzip) from "
        f"{args.client_procs} client processes; latency from each scrape's scheduled time. "
        "Loop stalls: "
        "`bench/serve_probe.py` in the serving process (a 1 ms sleep, again and again: how late "
        "it woke; *not on a CPU*: the part of a stall the loop thread neither ran nor waited in "
        "the run queue, i.e. waited for the interpreter). Server CPU: the serving process and its "
        "sampler process, % of one core.\n"
    )
    print(
        "| column | interval | scrapes | not 200 | p50 ms | p90 ms | p99 ms | max ms "
        "| loop stall max ms | stall p99 ms | stalls > 20 ms | not on a CPU, max ms "
        "| server CPU % | p99 < 10 ms, no failure, stall < 20 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        loop = row["loop"]
        ok = row["p99"] < 10.0 and row["non_200"] == 0 and loop["stall_max_ms"] < 20.0
        print(
            f"| {row['column']} | {row['interval']:g} s | {row['requests']} | {row['non_200']} "
            f"| {row['p50']:.2f} | {row['p90']:.2f} | {row['p99']:.2f} | {row['max']:.1f} "
            f"| {loop['stall_max_ms']:.1f} | {loop['stall_p99_ms']:.2f} "
            f"| {loop['stalls_over_20ms']} | {loop['no_cpu_max_ms']:.1f} "
            f"| {row['server_cpu_share'] * 100:.1f} | {'pass' if ok else 'MISS'} |"
        )
    print()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": sys.argv, "rows": rows}, f, indent=1)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--synthetic",
        action="store_true",
        help="serve a synthetic host without a sampler (the server alone)",
    )
    parser.add_argument(
        "--rate", type=float, help="open loop: scrapes per second (whole serve: default 100)"
    )
    parser.add_argument(
        "--closed",
        action="store_true",
        help="the whole serve on a built-in scenario, --concurrency scrapers back to back",
    )
    parser.add_argument(
        "--intervals", default="1,5", help="whole serve: the sampling intervals, comma-separated"
    )
    parser.add_argument(
        "--columns",
        default=",".join(COLUMNS),
        help=f"whole serve: which of {', '.join(COLUMNS)}, comma-separated",
    )
    parser.add_argument(
        "--warm-up", type=float, default=5.0, help="whole serve: seconds between ready and load"
    )
    parser.add_argument("--json", help="whole serve: every figure to this file")
    parser.add_argument(
        "--burst",
        action="store_true",
        help="the --concurrency scrapers all at once, once a second (as that many Prometheus "
        "servers would), instead of back to back",
    )
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--vgpus", type=int, default=48)
    parser.add_argument(
        "--compare-render",
        action="store_true",
        help="time prometheus-client's renderer against vgpumon's on 16 x 48",
    )
    parser.add_argument("--serve-synthetic", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--web-config", help=argparse.SUPPRESS)
    parser.add_argument(
        "--no-gc-freeze",
        action="store_true",
        help="the synthetic server skips what `serve` does once up (gc.freeze): for A/B runs",
    )
    parser.add_argument(
        "--scenario",
        help="scenario (built-in name or file); whole serve: default the 16 x 48 host, --closed: "
        "default the largest built-in",
    )
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--seconds", type=float, help="length of the load (whole serve: 20)")
    parser.add_argument(
        "--max-requests", help="the server's --web.max-requests (default: the server's default)"
    )
    parser.add_argument("--interval", default="1", help="sampling interval of the server")
    args = parser.parse_args()
    if args.serve_synthetic:
        profile_to = os.environ.get("VGPUMON_BENCH_PROFILE")  # a cProfile of the server side
        if profile_to:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
            try:
                asyncio.run(
                    serve_synthetic(
                        args.serve_synthetic,
                        float(args.interval),
                        args.gpus,
                        args.vgpus,
                        args.web_config,
                        not args.no_gc_freeze,
                    )
                )
            finally:
                profiler.disable()
                profiler.dump_stats(profile_to)
            return 0
        asyncio.run(
            serve_synthetic(
                args.serve_synthetic,
                float(args.interval),
                args.gpus,
                args.vgpus,
                args.web_config,
                not args.no_gc_freeze,
            )
        )
        return 0
    if args.compare_render:
        compare_render()
        return 0
    if args.synthetic:
        args.seconds = args.seconds or 10.0
        return synthetic_main(args)
    if not args.closed:
        args.rate = args.rate or 100.0
        args.seconds = args.seconds or 20.0
        return whole_main(args)

    args.seconds = args.seconds or 10.0
    if args.scenario:
        name, snap = args.scenario, snapshot_of(args.scenario)
    else:
        name, snap, _ = largest_scenario()
    scen_text, scen_om, scen_samples, scen_bytes = render_cost(snap)
    syn_text, syn_om, syn_samples, syn_bytes = render_cost(synthetic_host())

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [
        sys.executable,
        "-m",
        "vgpumon.cli",
        "serve",
        "--sim",
        name,
        "--web.listen-address",
        f"127.0.0.1:{port}",
        "--interval",
        args.interval,
        "--log.level",
        "warning",
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
