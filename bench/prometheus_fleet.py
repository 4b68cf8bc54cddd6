"""What ``vgpumon top --prometheus`` costs: a real Prometheus scraping simulated exporters.

Setup: ``--hosts`` exporters of ``--scenario`` (default 200 x ``baremetal-8xh100``, 8 GPUs each;
``--scenario vgpu-8x8`` is 8 L40S GPUs with 8 vGPUs each), served by ``--processes`` helper
processes (several exporters per process, as bench/tui_cost.py serves its fleet), each sampling
every scrape interval; one Prometheus scrapes them every ``--scrape`` seconds, the hosts split
into ``--clusters`` values of a ``cluster`` target label. Then, in this process and nothing
else, ``top --prometheus URL --prometheus.group-by cluster`` runs headless (Textual's headless
driver) with its feed on its own thread, as ``top`` runs it:

* first paint: seconds from starting the app until the fleet screen lists every host, up, with
  its GPUs (the time to the first full screen a user sees);
* CPU share of one core (process CPU time / wall time) over ``--seconds`` at the refresh the
  scrape interval gives;
* key latency (p50, p99, max) of ``--keys`` presses of down/up/s (move, sort) on the fleet
  screen, and of opening a host (Enter) and going back;
* Prometheus query time per refresh: the wall time the feed's queries took (all families, as
  the client measured it), per refresh, and the queries per refresh.

``--rules`` loads the fleet rules (packaging/prometheus/vgpumon-fleet.rules.yml) and reads the
fleet screen from them, as ``top`` does above 500 hosts (the threshold set to 0 here): the
figures of a fleet too large to read every series of, at this size. ``--compare-url`` also runs
``top --url`` over the same exporters (every exporter polled by ``top`` itself) for the same
seconds, as the figure the fleet screen replaces.

Needs only Python and a ``prometheus`` binary (``--prometheus-binary``, default from PATH: the
lead's GPU host has no tmux and may have no Prometheus; carry one there). Usage::

    python bench/prometheus_fleet.py [--hosts 200] [--scenario baremetal-8xh100] [--scrape 5]
        [--seconds 60] [--keys 200] [--json FILE] [--rules] [--compare-url]

Prints a Markdown report; bench/results/prometheus-fleet*.md hold runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FLEET_RULES = HERE.parent / "packaging" / "prometheus" / "vgpumon-fleet.rules.yml"
sys.path.insert(0, str(HERE))

from tui_cost import free_ports, load_now, rss_mib  # noqa: E402

VGPU_8X8 = "vgpu-8x8"


def vgpu_scenario_text(gpus: int = 8, vgpus: int = 8) -> str:
    """An 8-GPU vGPU host: L40S, equal share, ``vgpus`` 4Q vGPUs each, every 8th unlicensed."""
    lines = [
        f"name: {VGPU_8X8}",
        f"description: {gpus} L40S x {vgpus} vGPUs (bench/prometheus_fleet.py)",
        "seed: 35",
        "gpus:",
    ]
    for g in range(gpus):
        lines += [
            "  - model: l40s",
            f'    pci_bus_id: "00000000:{0x40 + g:02X}:00.0"',
            "    virtualization_mode: host_vgpu",
            "    load: {duty: 0.7, sm_fraction: 0.9, dram: 0.4}",
            "    vgpu:",
            "      types:",
            '        - {id: 1150, name: "NVIDIA L40S-4Q", framebuffer: 4GiB, max_instances: 12}',
            "      scheduler: {policy: equal_share, timeslice: 2ms}",
            "      instances:",
        ]
        for i in range(vgpus):
            lic = ", license: unlicensed_restricted" if i % 8 == 0 else ""
            lines.append(
                f'        - {{id: {g * 100 + i + 1}, type: "NVIDIA L40S-4Q", '
                f"load: {{sm: {0.05 * (i % 5 + 1):.2f}}}, framebuffer_used: 1GiB{lic}}}"
            )
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the exporters


async def serve_many(scenario: str, interval: float, ports: list[int]) -> None:
    """Exporters over ``scenario`` on ``ports`` in this process, sampling every ``interval``."""
    from vgpumon.collect.base import SamplerConfig
    from vgpumon.collect.sampler import Sampler
    from vgpumon.export.address import ListenAddress
    from vgpumon.export.listener import Listener
    from vgpumon.export.server import build_app
    from vgpumon.nvml.loader import open_session

    stop = asyncio.Event()
    tasks = []
    for port in ports:
        sampler = Sampler(open_session(sim=scenario), SamplerConfig(interval_seconds=interval))
        await Listener(build_app(sampler)).start([ListenAddress("127.0.0.1", port)])
        tasks.append(asyncio.create_task(sampler.run(stop)))
    print("ready", flush=True)
    await asyncio.gather(*tasks)


def start_exporters(
    scenario: str, interval: float, ports: list[int], processes: int
) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(processes):
        chunk = ports[i::processes]
        if not chunk:
            continue
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, "--serve", scenario, str(interval), *map(str, chunk)],
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            for p in procs:
                p.kill()
            raise SystemExit(f"exporters did not start: {line!r}")
    return procs


# --------------------------------------------------------------------------- Prometheus


def start_prometheus(
    binary: str,
    directory: Path,
    ports: list[int],
    scrape: float,
    clusters: int,
    rules: bool = False,
) -> tuple[str, subprocess.Popen[bytes]]:
    groups = [
        {
            "targets": [f"127.0.0.1:{p}" for p in ports[c::clusters]],
            "labels": {"cluster": f"c{c}"},
        }
        for c in range(clusters)
    ]
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": f"{scrape:g}s",
            "scrape_timeout": f"{min(scrape, 10):g}s",
            "evaluation_interval": f"{scrape:g}s",
        },
        "scrape_configs": [{"job_name": "vgpumon", "static_configs": groups}],
    }
    if rules:
        config["rule_files"] = [str(FLEET_RULES)]
    (directory / "prometheus.yml").write_text(json.dumps(config))
    (port,) = free_ports(1)
    log = (directory / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return f"http://127.0.0.1:{port}", proc


async def wait_until_scraped(url: str, hosts: int, seconds: float, rules: bool = False) -> float:
    """Seconds until Prometheus has every target up with vgpumon series (and, with ``rules``,
    the fleet rules' figures of every host)."""
    from vgpumon.sources.promapi import PrometheusClient, PrometheusError

    client = PrometheusClient(url)
    started = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            try:
                queries = ["count(vgpumon_last_sample_timestamp_seconds)"]
                if rules:
                    queries.append("count(vgpumon:host_gpus:count)")
                answers = [await client.instant(q) for q in queries]
                if all(a.series and a.series[0][1] >= hosts for a in answers):
                    return time.monotonic() - started
            except PrometheusError:
                pass
            await asyncio.sleep(1.0)
    finally:
        await client.close()
    raise SystemExit(f"Prometheus did not scrape {hosts} exporters within {seconds:g} s")


# --------------------------------------------------------------------------- measuring top


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure_prometheus(
    url: str, hosts: int, seconds: float, keys: int, gpus: int, rules: bool = False
) -> dict[str, Any]:
    from vgpumon.sources.promapi import PrometheusClient
    from vgpumon.sources.prometheus_fleet import PrometheusFleet
    from vgpumon.tui.app import create_app

    client = PrometheusClient(url)
    feed = PrometheusFleet(client, group_by=("cluster",), rollup_above_hosts=0 if rules else 500)
    started = time.monotonic()
    cpu_started = time.process_time()
    app = create_app(feed, interval=1.0)
    result: dict[str, Any] = {}
    async with app.run_test(size=(160, 50)) as pilot:
        first_paint = None
        while time.monotonic() - started < 60:
            ups = [
                u
                for u in app.hosts.values()
                if u.state.value == "up"
                and (
                    (u.snapshot is not None and len(u.snapshot.gpus) == gpus)
                    or (u.rollup is not None and u.rollup.gpus == gpus)
                )
            ]
            if len(ups) >= hosts and app.redraws:
                await pilot.pause()
                first_paint = time.monotonic() - started
                break
            await asyncio.sleep(0.02)
        first_paint_cpu = time.process_time() - cpu_started
        await asyncio.sleep(2.0)  # the first full refresh behind it
        refreshes0, queries0, query_s0 = feed.refreshes, client.queries, client.query_seconds
        refresh_s0 = feed.refresh_seconds_total
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        refreshes = feed.refreshes - refreshes0
        refresh_seconds = feed.refresh_seconds_total - refresh_s0
        queries = client.queries - queries0
        query_seconds = client.query_seconds - query_s0
        latencies = []
        for i in range(keys):
            key = ("down", "down", "up", "s", "down", "up", "S", "down")[i % 8]
            t0 = time.perf_counter()
            await pilot.press(key)
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
        t0 = time.perf_counter()
        await pilot.press("enter")
        open_host = time.perf_counter() - t0
        await asyncio.sleep(feed.interval_seconds + 1.0)
        t0 = time.perf_counter()
        await pilot.press("escape")
        back = time.perf_counter() - t0
        result = {
            "hosts": hosts,
            "hosts_up": sum(1 for u in app.hosts.values() if u.state.value == "up"),
            "read_as": "fleet rules" if feed.rollup_mode else "every series",
            "first_paint_seconds": None if first_paint is None else round(first_paint, 2),
            "first_paint_cpu_seconds": round(first_paint_cpu, 2),
            "refresh_seconds": feed.interval_seconds,
            "seconds": round(wall, 1),
            "cpu_share_of_one_core": round(cpu / wall, 4),
            "refreshes": refreshes,
            "queries_per_refresh": round(queries / refreshes, 1) if refreshes else None,
            # Summed over the refresh's queries (several run at once), and the refresh's wall time.
            "query_seconds_per_refresh": round(query_seconds / refreshes, 3) if refreshes else None,
            "refresh_wall_seconds": round(refresh_seconds / refreshes, 3) if refreshes else None,
            "key_ms_p50": round(percentile(latencies, 0.5) * 1e3, 1),
            "key_ms_p99": round(percentile(latencies, 0.99) * 1e3, 1),
            "key_ms_max": round(max(latencies) * 1e3, 1),
            "keys": len(latencies),
            "open_host_ms": round(open_host * 1e3, 1),
            "back_ms": round(back * 1e3, 1),
            "rss_mib": rss_mib(),
        }
    return result


async def measure_url(urls: list[str], seconds: float, keys: int) -> dict[str, Any]:
    """``top --url`` over the same exporters: every one polled every second by top itself."""
    from vgpumon.sources.remote import RemoteTarget, remote_fleet
    from vgpumon.tui.app import create_app

    targets = [RemoteTarget(u) for u in urls]
    app = create_app(remote_fleet(targets, interval_seconds=1.0), interval=1.0)
    async with app.run_test(size=(160, 50)) as pilot:
        await asyncio.sleep(10.0)
        cpu0, wall0 = time.process_time(), time.monotonic()
        await asyncio.sleep(seconds)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        latencies = []
        for i in range(keys):
            t0 = time.perf_counter()
            await pilot.press(("down", "down", "up", "s")[i % 4])
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(0.02)
        return {
            "hosts": len(urls),
            "cpu_share_of_one_core": round(cpu / wall, 4),
            "key_ms_p50": round(percentile(latencies, 0.5) * 1e3, 1),
            "key_ms_p99": round(percentile(latencies, 0.99) * 1e3, 1),
        }


def report(results: dict[str, Any]) -> str:
    env = results["environment"]
    p = results["prometheus"]
    out = [
        "# vgpumon top --prometheus: a fleet read from Prometheus",
        "",
        f"{results['hosts']} exporters of `{results['scenario']}` ({results['gpus']} GPUs each), "
        f"scraped every {results['scrape_seconds']:g} s by Prometheus {env['prometheus']}; "
        f"Python {env['python']}, {env['platform']}, {env['cpus']} CPUs, load average before "
        f"{env['load_before']['loadavg_1m']} (1 min). Command: `{results['command']}`.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| first paint (every host up, with its GPUs) | {p['first_paint_seconds']} s |",
        f"| CPU share of one core at a {p['refresh_seconds']:g} s refresh | "
        f"{p['cpu_share_of_one_core'] * 100:.1f} % |",
        f"| key latency p50 / p99 / max ({p['keys']} keys) | {p['key_ms_p50']} / "
        f"{p['key_ms_p99']} / {p['key_ms_max']} ms |",
        f"| open a host (Enter) / back (Escape) | {p['open_host_ms']} / {p['back_ms']} ms |",
        f"| fleet screen read as | {p['read_as']} |",
        f"| Prometheus queries per refresh: wall time (sum of each query's time) | "
        f"{p['refresh_wall_seconds']} s ({p['query_seconds_per_refresh']} s over "
        f"{p['queries_per_refresh']} queries) |",
        f"| resident memory | {p['rss_mib']} MiB |",
    ]
    if "url" in results:
        u = results["url"]
        out += [
            f"| `top --url` over the same exporters: CPU share | "
            f"{u['cpu_share_of_one_core'] * 100:.1f} % (key p99 {u['key_ms_p99']} ms) |",
        ]
    return "\n".join(out) + "\n"


def prometheus_version(binary: str) -> str:
    try:
        text = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    except OSError:
        return "?"
    return text.split()[2] if text.count(" ") >= 2 else text.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--scenario", default="baremetal-8xh100")
    parser.add_argument("--scrape", type=float, default=5.0)
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--prometheus-binary", default=shutil.which("prometheus") or "prometheus")
    parser.add_argument("--rules", action="store_true")
    parser.add_argument("--compare-url", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--serve", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        scenario, interval, *ports = args.serve
        asyncio.run(serve_many(scenario, float(interval), [int(p) for p in ports]))
        return 0
    from vgpumon import sim

    with tempfile.TemporaryDirectory(prefix="vgpumon-bench-") as tmp:
        directory = Path(tmp)
        scenario = args.scenario
        if scenario == VGPU_8X8:
            path = directory / f"{VGPU_8X8}.yaml"
            path.write_text(vgpu_scenario_text())
            scenario = str(path)
        gpus = len(sim.create(scenario).scenario.gpus)
        ports = free_ports(args.hosts)
        load_before = load_now()
        exporters = start_exporters(scenario, args.scrape, ports, args.processes)
        url, prometheus = start_prometheus(
            args.prometheus_binary, directory, ports, args.scrape, args.clusters, args.rules
        )
        try:
            scraped = asyncio.run(wait_until_scraped(url, args.hosts, 180.0, args.rules))
            results: dict[str, Any] = {
                "hosts": args.hosts,
                "scenario": args.scenario,
                "gpus": gpus,
                "scrape_seconds": args.scrape,
                "scraped_after_seconds": round(scraped, 1),
                "command": "python bench/prometheus_fleet.py " + " ".join(sys.argv[1:]),
                "date": time.strftime("%Y-%m-%d"),
                "environment": {
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "cpus": os.cpu_count(),
                    "prometheus": prometheus_version(args.prometheus_binary),
                    "load_before": load_before,
                },
            }
            results["prometheus"] = asyncio.run(
                measure_prometheus(url, args.hosts, args.seconds, args.keys, gpus, args.rules)
            )
            if args.compare_url:
                urls = [f"http://127.0.0.1:{p}" for p in ports]
                results["url"] = asyncio.run(measure_url(urls, args.seconds, args.keys // 4))
            results["environment"]["load_after"] = load_now()
        finally:
            prometheus.terminate()
            for proc in exporters:
                proc.terminate()
            prometheus.wait(10)
            for proc in exporters:
                proc.wait(10)
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
