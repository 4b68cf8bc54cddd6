"""What an exporter costs its host: vgpumon serve against nvitop-exporter and a serial floor.

One run, one host, the three measured in turn (the order rotates each round, so drift in the
host's load is shared between them):

* ``vgpumon``: ``vgpumon serve`` with its defaults;
* ``nvitop``: ``nvitop-exporter`` (pip install nvitop-exporter) at the same interval;
* ``floor``: a minimal serial loop that makes exactly the NVML calls vgpumon's sampler makes in a
  cycle (recorded from vgpumon itself over ten cycles, then replayed one call after another with
  no processing at all): what reading the same values costs with nothing around it.

Each is measured at the default 1 s interval: CPU share over a window in which each exporter is
scraped every 15 s as Prometheus would (``--scrape-every``; 0 for no scrapes at all), resident
memory (idle and after the scrape load), cycle wall and CPU time, scrape latency p50/p99 with 1
and with 50 concurrent scrapers, and bytes per scrape. ``--sim`` runs every simulated host
(1, 8, 16 GPUs x 0, 16, 48 vGPUs each, and 8 GPUs x 7 MIG instances), with the simulator standing
in for ``pynvml`` in all three (``bench/shim``) and its per-call costs set from real measurements
(``VGPUMON_SIM_LATENCY=realistic``); without ``--sim`` it measures the real GPUs of this host.

Writes ``bench/results/exporter-cost-<label>.json`` and ``.md`` (machine, driver, command, date).
See bench/README.md for how to run it and what the figures mean.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.util
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from serve_ready import free_port  # bench/serve_ready.py

try:
    import psutil  # type: ignore[import-untyped]  # comes with nvitop
except ImportError:  # serve_rss.py borrows only the simulated hosts; measuring here needs it
    psutil = None

ROOT = Path(__file__).resolve().parents[1]
SHIM = Path(__file__).resolve().parent / "shim"
RESULTS = Path(__file__).resolve().parent / "results"
RUNNERS = ("vgpumon", "nvitop", "floor")
# Not run by default: vgpumon with --no-metering.enabled, for the A/B of what usage metering costs.
EXTRA_RUNNERS = ("vgpumon-nometering",)
INTERVAL = 1.0
SCRAPE_EVERY = 15.0  # Prometheus' usual scrape interval, during the CPU window
SIM_HOSTS = [f"{g}x{v}" for g in (1, 8, 16) for v in (0, 16, 48)] + ["mig8x7"]


# --------------------------------------------------------------------------- simulated hosts


def host_scenario(name: str) -> str:
    """Scenario YAML of a simulated host: ``GxV`` (G L40S vGPU hosts, V vGPUs each) or mig8x7."""
    if name == "mig8x7":
        gis = "\n".join(
            f"          - {{profile: 1g.10gb, placement: {p}, load: {{duty: 0.5}}}}"
            for p in range(7)
        )
        return (
            "name: bench-mig8x7\ndescription: 8 H100 with 7 MIG instances each\nseed: 7\n"
            "gpus:\n  - model: h100-sxm-80gb\n    count: 8\n    mig:\n      enabled: true\n"
            f"      instances:\n{gis}\n"
        )
    gpus, vgpus = (int(x) for x in name.split("x"))
    out = [
        f"name: bench-{name}",
        f"description: {gpus} L40S vGPU hosts with {vgpus} vGPUs each",
        "seed: 11",
        "gpus:",
    ]
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
                vid = g * 100 + i + 1  # instance ids are host-wide
                out.append(
                    f"        - {{id: {vid}, type: 1145, vm_id: vm-{vid}, load: {{sm: 0.02}}}}"
                )
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the floor


Call = tuple[Any, tuple[Any, ...], dict[str, Any]]


def record_cycles(scenario: str | None, interval: float, count: int = 10) -> list[list[Call]]:
    """vgpumon's NVML calls of ``count`` steady cycles, each cycle's list in call order.

    Recorded in real time, one interval per cycle, so that what vgpumon's background pollers
    (the scheduler log) read between cycles is recorded at its real rate too. Calls that block
    (event waits) or allocate (GPM sample buffers, init/shutdown) are not recorded. Afterwards
    vgpumon's own background services are stopped, while NVML stays initialised and reader state
    stays allocated, so the recorded handles and GPM sample buffers remain valid for replays.
    """
    import threading

    from vgpumon.collect import Sampler
    from vgpumon.commands.serve import sampler_config
    from vgpumon.config.serve import ServeSettings
    from vgpumon.nvml.loader import open_session

    session = open_session(sim=scenario)
    real = session.module
    calls: list[Call] = []
    lock = threading.Lock()
    skip = ("EventSetWait", "Init", "Shutdown", "SampleAlloc", "SampleFree", "EventSetCreate",
            "EventSetFree", "RegisterEvents")  # fmt: skip

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            value = getattr(real, name)
            if not callable(value) or not name.startswith("nvml") or any(s in name for s in skip):
                return value

            def recorded(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    calls.append((value, args, kwargs))
                return value(*args, **kwargs)

            return recorded

    session.module = Recorder()
    settings = ServeSettings(interval_seconds=interval)
    sampler = Sampler(session, sampler_config(settings))
    cycles: list[list[Call]] = []

    async def record() -> None:
        await sampler.cycle()  # acquire handles, first reads: not part of a steady cycle
        await asyncio.sleep(interval)
        for _ in range(count):
            with lock:
                calls.clear()
            started = time.monotonic()
            await sampler.cycle()
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
            with lock:
                cycles.append(list(calls))

    asyncio.run(record())
    session.module = real
    for service in sampler.services.values():
        close = getattr(service, "close", None)
        if callable(close):
            close()
    return cycles


def floor_worker(scenario: str | None, status_path: str, interval: float) -> None:
    """Replay vgpumon's recorded NVML calls (:func:`record_cycles`) serially, one cycle per
    interval, forever: the floor.

    Runs in its own process (``--floor-worker``). Each second it writes its cumulative replay wall
    and CPU time to ``status_path``.
    """
    cycles = record_cycles(scenario, interval)
    i = 0
    cpu_total = wall_total = 0.0
    while True:
        started, cpu0 = time.perf_counter(), time.thread_time()
        for fn, args, kwargs in cycles[i % len(cycles)]:
            try:  # noqa: SIM105 - no context manager object per call in the floor
                fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - the floor reads, it does not judge
                pass
        wall, cpu = time.perf_counter() - started, time.thread_time() - cpu0
        i += 1
        cpu_total += cpu
        wall_total += wall
        # cumulative, so that the measurement takes a window's average (a slow simulated host
        # may need more than one interval per serial cycle)
        status = {"cycles": i, "cpu_total": cpu_total, "wall_total": wall_total}
        tmp = Path(status_path + ".tmp")
        tmp.write_text(json.dumps(status))
        os.replace(tmp, status_path)  # readers never see a half-written file
        time.sleep(max(0.0, interval - wall))


# --------------------------------------------------------------------------- processes


@dataclass
class Running:
    name: str
    proc: subprocess.Popen[bytes]
    port: int | None
    status: Path | None = None
    log: Path | None = None


def start(runner: str, scenario: str | None, tmp: Path, interval: float) -> Running:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    if scenario is not None:
        env["VGPUMON_SIM_LATENCY"] = env.get("VGPUMON_SIM_LATENCY", "realistic")
    log = tmp / f"{runner}.log"
    port: int | None = free_port()
    status = None
    if runner in ("vgpumon", "vgpumon-nometering"):
        cmd = [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--web.listen-address",
            f"127.0.0.1:{port}",
        ]
        cmd += ["--interval", str(interval)]
        if runner == "vgpumon-nometering":  # the A/B of what usage metering costs
            cmd += ["--no-metering.enabled"]
        if scenario is not None:
            cmd += ["--sim", scenario]
    elif runner == "nvitop":
        if importlib.util.find_spec("nvitop_exporter") is None:
            raise SystemExit("nvitop-exporter is not installed: pip install nvitop-exporter")
        cmd = [sys.executable, "-m", "nvitop_exporter", "--bind-address", "127.0.0.1"]
        cmd += ["--port", str(port)]
        cmd += ["--interval", str(interval), "--hostname", "bench"]
        if scenario is not None:
            env["PYTHONPATH"] = os.pathsep.join((str(SHIM), env["PYTHONPATH"]))
            env["VGPUMON_BENCH_SCENARIO"] = scenario
    else:
        status = tmp / "floor.json"
        status.unlink(missing_ok=True)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--floor-worker", str(status)]
        cmd += ["--interval", str(interval)]
        if scenario is not None:
            cmd += ["--scenario", scenario]
        port = None
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    return Running(runner, proc, port, status, log)


def stop(run: Running) -> None:
    if run.proc.poll() is None:
        run.proc.send_signal(signal.SIGTERM)
        try:
            run.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            run.proc.kill()
            run.proc.wait()


async def wait_ready(run: Running, seconds: float = 120.0) -> None:
    import aiohttp

    give_up = time.monotonic() + seconds
    async with aiohttp.ClientSession() as client:
        while time.monotonic() < give_up:
            if run.proc.poll() is not None:
                text = run.log.read_text(errors="replace")[-2000:] if run.log else ""
                raise SystemExit(f"{run.name} exited ({run.proc.returncode}):\n{text}")
            if run.status is not None:
                if run.status.exists():
                    return
            else:
                try:
                    async with client.get(f"http://127.0.0.1:{run.port}/metrics") as r:
                        body = await r.read()
                        # vgpumon answers /metrics before its first cycle; wait for GPU series
                        if r.status == 200 and (run.name != "vgpumon" or b"vgpumon_gpu_up" in body):
                            return
                except aiohttp.ClientError:
                    pass
            await asyncio.sleep(0.2)
    raise SystemExit(f"{run.name} did not get ready within {seconds:.0f} s")


# --------------------------------------------------------------------------- measurements


def metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


async def scrape_load(port: int, scrapers: int, per_scraper: int) -> dict[str, float]:
    """Latencies (ms) and body size of ``scrapers`` concurrent clients, each scraping in a loop."""
    import aiohttp

    latencies: list[float] = []
    sizes: list[int] = []
    errors = 0
    url = f"http://127.0.0.1:{port}/metrics"
    connector = aiohttp.TCPConnector(limit=scrapers)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as client:

        async def one() -> None:
            nonlocal errors
            for _ in range(per_scraper):
                t0 = time.perf_counter()
                try:
                    async with client.get(url, headers={"Accept-Encoding": "identity"}) as r:
                        body = await r.read()
                        ok = r.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok, body = False, b""
                if ok:  # a refusal (503 past the in-flight cap) is fast: not a latency
                    latencies.append((time.perf_counter() - t0) * 1000)
                    sizes.append(len(body))
                else:
                    errors += 1

        await asyncio.gather(*(one() for _ in range(scrapers)))
    latencies.sort()
    return {
        "p50_ms": statistics.median(latencies) if latencies else 0.0,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
        if latencies
        else 0.0,
        "requests": len(latencies) + errors,
        "errors": errors,
        "bytes": statistics.median(sizes) if sizes else 0,
    }


@dataclass
class Measure:
    runner: str
    cpu_share: float = 0.0  # fraction of one core over the CPU window
    rss_mb: float = 0.0
    rss_after_scrapes_mb: float | None = None
    cycle_wall_ms: float | None = None
    cycle_cpu_ms: float | None = None
    scrape_1: dict[str, float] = field(default_factory=dict)
    scrape_50: dict[str, float] = field(default_factory=dict)
    # share of a core per thread kind over the CPU window (kernel thread names, digits folded:
    # gpu0..gpu15 -> gpu#); vgpumon names its threads (vgpumon/collect/threads.py)
    threads: dict[str, float] = field(default_factory=dict)


async def fetch_text(url: str) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as client, client.get(url) as r:
        return await r.text()


def task_seconds(pid: int, tid: int) -> float | None:
    """Seconds thread ``tid`` has run on a CPU, to the nanosecond (``/proc/.../schedstat``);
    None where the kernel does not keep it. The user and system times of ``/proc/.../stat``
    count in clock ticks (10 ms): a one-GPU exporter spends only a few ticks in a 30 s window."""
    try:
        return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def exporter_processes(proc: Any) -> list[Any]:
    """The exporter's processes: itself and its children (a large host's vgpumon sampler runs
    in a process of its own, vgpumon/collect/placement.py)."""
    try:
        return [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return [proc]


def thread_times(proc: Any) -> dict[int, tuple[str, float]]:
    """Thread id -> (kernel name with digits folded to #, seconds on a CPU: schedstat's
    nanoseconds where the kernel keeps them, else user+system ticks), over the exporter's
    processes (a child's threads keep their own names: vgpumon's sampler process names its main
    thread ``cycle``)."""
    out: dict[int, tuple[str, float]] = {}
    for one in exporter_processes(proc):
        out.update(_thread_times(one, main=one.pid == proc.pid))
    return out


def _thread_times(proc: Any, main: bool) -> dict[int, tuple[str, float]]:
    out: dict[int, tuple[str, float]] = {}
    try:
        threads = proc.threads()
    except psutil.Error:
        return out
    for t in threads:
        try:
            name = Path(f"/proc/{proc.pid}/task/{t.id}/comm").read_text().strip()
        except OSError:
            name = "?"
        if t.id == proc.pid and main:
            name = "main"
        precise = task_seconds(proc.pid, t.id)
        used = precise if precise is not None else t.user_time + t.system_time
        out[t.id] = (re.sub(r"\d+", "#", name), used)
    return out


def process_seconds(proc: Any, before: dict[int, tuple[str, float]],
                    after: dict[int, tuple[str, float]], ticks: float) -> float:  # fmt: skip
    """CPU seconds of the process between two :func:`thread_times` readings: the threads'
    precise times, plus what the tick count says threads that ended meanwhile spent (a thread
    that ended is in the process's ticks but no longer in its task list)."""
    alive = sum(cpu - before[tid][1] for tid, (_, cpu) in after.items() if tid in before)
    born = sum(cpu for tid, (_, cpu) in after.items() if tid not in before)
    gone_ticks = max(0.0, ticks - alive - born)
    # Ticks over-count by up to one tick per thread; only a clear excess is what ended threads
    # spent.
    slack = 0.01 * (len(after) + 1)
    return alive + born + (gone_ticks if gone_ticks > slack else 0.0)


def thread_split(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]],
                 seconds: float) -> dict[str, float]:  # fmt: skip
    """Share of a core per folded thread name between two :func:`thread_times` readings."""
    split: dict[str, float] = {}
    for tid, (name, cpu) in after.items():
        used = cpu - before.get(tid, (name, 0.0))[1]
        if used > 0:
            split[name] = split.get(name, 0.0) + used / seconds
    return dict(sorted(split.items(), key=lambda kv: -kv[1]))


async def prometheus_like(port: int | None, window: float, every: float) -> None:
    """Spend ``window`` seconds scraping ``port`` once every ``every`` s, as Prometheus does.

    The first scrape comes half a period in; ``every`` 0 (or no port: the floor serves
    nothing) leaves the window idle. An exporter that renders on scrape (nvitop-exporter, and
    vgpumon on a small host) pays for its renders here, as it would in production.
    """
    if port is None or every <= 0:
        await asyncio.sleep(window)
        return
    end = time.monotonic() + window
    due = time.monotonic() + every / 2
    while due < end:
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        await fetch_text(f"http://127.0.0.1:{port}/metrics")
        due += every
    await asyncio.sleep(max(0.0, end - time.monotonic()))


async def measure(
    run: Running, window: float, scrapes: tuple[int, int], interval: float, scrape_every: float
) -> Measure:
    proc = psutil.Process(run.proc.pid)
    await wait_ready(run)
    await settle(run)
    await asyncio.sleep(2 * interval)  # past the first cycles (handles, static values)
    before_text = ""
    if run.name.startswith("vgpumon"):
        before_text = await fetch_text(f"http://127.0.0.1:{run.port}/metrics")
    floor0 = json.loads(run.status.read_text()) if run.status is not None else None
    t0, c0, th0 = time.monotonic(), tree_cpu_times(proc), thread_times(proc)
    await prometheus_like(run.port, window, scrape_every)
    t1, c1, th1 = time.monotonic(), tree_cpu_times(proc), thread_times(proc)
    floor1 = json.loads(run.status.read_text()) if run.status is not None else None
    cpu = process_seconds(proc, th0, th1, c1 - c0)
    m = Measure(run.name, cpu_share=cpu / (t1 - t0), rss_mb=tree_rss(proc) / 2**20)
    m.threads = thread_split(th0, th1, t1 - t0)
    cycles_in_window = (t1 - t0) / interval
    if run.name.startswith("vgpumon"):
        text = await fetch_text(f"http://127.0.0.1:{run.port}/metrics")
        wall = metric(text, "vgpumon_sampler_last_cycle_duration_seconds")
        m.cycle_wall_ms = wall * 1000 if wall is not None else None
        n0 = metric(before_text, "vgpumon_sampler_cycles_total")
        n1 = metric(text, "vgpumon_sampler_cycles_total")
        if n0 is not None and n1 is not None and n1 > n0:
            cycles_in_window = n1 - n0
    m.cycle_cpu_ms = cpu / cycles_in_window * 1000  # everything the process did, per cycle
    if floor0 is not None and floor1 is not None and floor1["cycles"] > floor0["cycles"]:
        # the floor's own accounting: CPU and wall of its serial replays in the window
        n = floor1["cycles"] - floor0["cycles"]
        m.cycle_cpu_ms = (floor1["cpu_total"] - floor0["cpu_total"]) / n * 1000
        m.cycle_wall_ms = (floor1["wall_total"] - floor0["wall_total"]) / n * 1000
    if run.port is not None:
        m.scrape_1 = await scrape_load(run.port, 1, scrapes[0])
        m.scrape_50 = await scrape_load(run.port, 50, scrapes[1])
        m.rss_after_scrapes_mb = tree_rss(proc) / 2**20
    return m


def tree_cpu_times(proc: Any) -> float:
    """User and system seconds (ticks) of the exporter's processes."""
    total = 0.0
    for one in exporter_processes(proc):
        try:
            times = one.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def tree_rss(proc: Any) -> float:
    """Resident bytes of the exporter's processes, summed (shared pages counted in each)."""
    total = 0.0
    for one in exporter_processes(proc):
        try:
            total += one.memory_info().rss
        except psutil.Error:
            continue
    return total


async def settle(run: Running, seconds: float = 120.0) -> None:
    """Until vgpumon's sampler runs where it will stay: a large host's moves to a process of its
    own after the first cycle (vgpumon/collect/placement.py), which must not fall in a window."""
    if not run.name.startswith("vgpumon") or run.port is None or run.log is None:
        return
    from vgpumon.collect.placement import large_host
    from vgpumon.model import from_json

    snapshot = from_json(await fetch_text(f"http://127.0.0.1:{run.port}/api/v1/snapshot"))
    if not large_host(snapshot):
        return
    give_up = time.monotonic() + seconds
    while "process of its own now" not in run.log.read_text(errors="replace"):
        if time.monotonic() > give_up:
            raise SystemExit(f"{run.name}: the sampler did not move within {seconds:.0f} s")
        await asyncio.sleep(0.2)


# --------------------------------------------------------------------------- the run


def driver_version(scenario: str | None) -> str:
    from vgpumon.nvml.loader import open_session

    try:
        session = open_session(sim=scenario)
        version = session.call("", "nvmlSystemGetDriverVersion")
        session.shutdown()
        return f"{version}" + (" (simulated)" if scenario else "")
    except Exception as exc:  # noqa: BLE001
        return f"unknown ({exc})"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


async def run_host(
    label: str, scenario: str | None, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    rounds: dict[str, list[Measure]] = {r: [] for r in args.runners}
    for round_index in range(args.rounds):
        k = round_index % len(args.runners)
        order = args.runners[k:] + args.runners[:k]
        for runner in order:
            run = start(runner, scenario, tmp, args.interval)
            try:
                m = await measure(run, args.window, args.scrapes, args.interval, args.scrape_every)
            finally:
                stop(run)
            rounds[runner].append(m)
            print(
                f"  {label:8} {runner:8} cpu {m.cpu_share * 100:6.2f} %  rss {m.rss_mb:6.1f} MB  "
                f"cycle {m.cycle_wall_ms or 0:7.1f} ms wall {m.cycle_cpu_ms or 0:7.1f} ms cpu  "
                f"p99(50) {m.scrape_50.get('p99_ms', 0):7.1f} ms",
                flush=True,
            )
    return {r: [asdict(m) for m in ms] for r, ms in rounds.items()}


def summarize(per_runner: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Median over rounds of each figure, per runner."""
    out: dict[str, dict[str, Any]] = {}
    for runner, ms in per_runner.items():

        def med(key: str, sub: str | None = None, ms: list[dict[str, Any]] = ms) -> float | None:
            got = [(m[key] or {}).get(sub) if sub else m[key] for m in ms]
            values: list[float] = [float(v) for v in got if v is not None]
            return statistics.median(values) if values else None

        out[runner] = {
            "cpu_share": med("cpu_share"),
            "rss_mb": med("rss_mb"),
            "rss_after_scrapes_mb": med("rss_after_scrapes_mb"),
            "cycle_wall_ms": med("cycle_wall_ms"),
            "cycle_cpu_ms": med("cycle_cpu_ms"),
            "p50_1_ms": med("scrape_1", "p50_ms"),
            "p99_1_ms": med("scrape_1", "p99_ms"),
            "p50_50_ms": med("scrape_50", "p50_ms"),
            "p99_50_ms": med("scrape_50", "p99_ms"),
            "errors_50": med("scrape_50", "errors"),
            "bytes": med("scrape_1", "bytes"),
            "threads": {
                name: statistics.median(m["threads"].get(name, 0.0) for m in ms)
                for name in sorted({n for m in ms for n in m.get("threads", {})})
            },
        }
    return out


def markdown(report: dict[str, Any]) -> str:
    def f(v: Any, fmt: str = "{:.1f}") -> str:
        return "–" if v is None else fmt.format(v)

    lines = [
        f"# Exporter cost: {report['label']}",
        "",
        f"- date: {report['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']['cpu']}, {report['machine']['cores']} cores, "
        f"{report['machine']['memory_gb']} GB (load average at start "
        f"{', '.join(f'{x:.2f}' for x in report['machine']['load_average_at_start'])})",
        f"- driver: {report['driver']}",
        f"- interval {report['interval']} s; CPU window {report['window']} s, scraped every "
        f"{report.get('scrape_every', 0):g} s; "
        f"{report['rounds']} round(s), runners in rotating order; medians over rounds",
        f"- simulated per-call costs: {report['sim_latency']}",
        "",
        "| host | exporter | CPU % of a core | × nvitop | cycle CPU × floor "
        "| RSS MB (after scrapes) | cycle wall ms | cycle CPU ms "
        "| p50/p99 ms, 1 scraper | p50/p99 ms, 50 scrapers "
        "| errors (50) | bytes/scrape |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for host, summary in report["hosts"].items():
        floor = (summary.get("floor") or {}).get("cycle_cpu_ms")
        nvitop = (summary.get("nvitop") or {}).get("cpu_share")
        for runner, s in summary.items():
            cpu = s["cpu_share"]
            cyc = s["cycle_cpu_ms"]
            lines.append(
                f"| {host} | {runner} | {f(cpu * 100 if cpu is not None else None, '{:.2f}')} "
                f"| {f(cpu / nvitop if cpu and nvitop else None, '{:.2f}')} "
                f"| {f(cyc / floor if cyc and floor else None, '{:.2f}')} "
                f"| {f(s['rss_mb'])} ({f(s['rss_after_scrapes_mb'])}) "
                f"| {f(s['cycle_wall_ms'])} | {f(s['cycle_cpu_ms'])} "
                f"| {f(s['p50_1_ms'], '{:.2f}')}/{f(s['p99_1_ms'], '{:.2f}')} "
                f"| {f(s['p50_50_ms'], '{:.1f}')}/{f(s['p99_50_ms'], '{:.1f}')} "
                f"| {f(s['errors_50'], '{:.0f}')} | {f(s['bytes'], '{:.0f}')} |"
            )
    lines += [
        "",
        "Where each exporter's CPU went, % of a core by thread (kernel thread names; `main` "
        "runs the event loop: HTTP server, rendering, the sampler's coroutine):",
        "",
    ]
    for host, summary in report["hosts"].items():
        for runner, s in summary.items():
            split = s.get("threads") or {}
            if split:
                parts = ", ".join(
                    f"{n} {v * 100:.2f}"
                    for n, v in sorted(split.items(), key=lambda kv: -kv[1])
                    if v >= 0.0001
                )
                lines.append(f"- {host} {runner}: {parts}")
    lines += [
        "",
        "CPU % is the time the exporter's process ran on a CPU over the window (scraped every "
        f"{report.get('scrape_every', 0):g} s, 0: never) divided by the window, summed over its "
        "threads to the nanosecond from /proc/PID/task/TID/schedstat (the user and system "
        "ticks of /proc/PID/stat count in 10 ms steps, too coarse for a one-GPU exporter); "
        "cycle CPU ms "
        "is that CPU time per sampling cycle (everything the "
        "process did, server and background pollers included). The floor makes vgpumon's NVML "
        "calls of a cycle serially with nothing else; its cycle figures are its own replays' "
        "(CPU time of the replaying thread), averaged over the window; on a slow simulated host "
        "a serial replay can take longer than the interval. It has no HTTP server, hence no "
        "scrape figures. Scrape latencies are those of answered scrapes (200); errors are the "
        "others, mostly vgpumon's 503 past its in-flight cap (`--web.max-requests`, 40), "
        "which is answered at once and would flatter the percentiles if counted.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sim", action="store_true", help="measure the simulated hosts")
    p.add_argument(
        "--hosts", help=f"simulated hosts, comma-separated (default: {','.join(SIM_HOSTS)})"
    )
    p.add_argument("--quick", action="store_true", help="1 round, 10 s windows, fewer scrapes")
    p.add_argument("--rounds", type=int, default=None, help="rounds per host (default 2)")
    p.add_argument("--window", type=float, default=None, help="idle CPU window, s (default 30)")
    p.add_argument("--interval", type=float, default=INTERVAL)
    p.add_argument(
        "--scrape-every",
        type=float,
        default=SCRAPE_EVERY,
        help=f"during the CPU window, scrape each exporter this often, s (default {SCRAPE_EVERY:g},"
        " Prometheus' usual; 0: an idle window with no scrapes)",
    )
    p.add_argument(
        "--runners",
        default=",".join(RUNNERS),
        help="subset of vgpumon,nvitop,floor (or vgpumon-nometering)",
    )
    p.add_argument("--label", help="result file name part (default: sim or the GPU name)")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--floor-worker", metavar="STATUS", help=argparse.SUPPRESS)
    p.add_argument("--scenario", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.floor_worker:
        floor_worker(args.scenario, args.floor_worker, args.interval)
        return 0
    args.runners = [r for r in args.runners.split(",") if r]
    if set(args.runners) - {*RUNNERS, *EXTRA_RUNNERS}:
        p.error(f"--runners: choose from {', '.join((*RUNNERS, *EXTRA_RUNNERS))}")
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.window = args.window or (10.0 if args.quick else 30.0)
    args.scrapes = (20, 2) if args.quick else (200, 20)
    hosts = (args.hosts.split(",") if args.hosts else SIM_HOSTS) if args.sim else ["real"]
    started = datetime.datetime.now(datetime.timezone.utc)
    report: dict[str, Any] = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "interval": args.interval,
        "window": args.window,
        "scrape_every": args.scrape_every,
        "rounds": args.rounds,
        "sim_latency": os.environ.get("VGPUMON_SIM_LATENCY", "realistic") if args.sim else "-",
        "hosts": {},
        "raw": {},
    }
    with tempfile.TemporaryDirectory(prefix="vgpumon-bench-") as tmpdir:
        tmp = Path(tmpdir)
        first = None
        for host in hosts:
            scenario = None
            if args.sim:
                path = tmp / f"bench-{host}.yaml"
                path.write_text(host_scenario(host))
                scenario = str(path)
            first = first or scenario
            print(f"host {host}", flush=True)
            raw = asyncio.run(run_host(host, scenario, args, tmp))
            report["raw"][host] = raw
            report["hosts"][host] = summarize(raw)
        report["driver"] = driver_version(first)
    label = args.label or ("sim" if args.sim else "gpu")
    report["label"] = label
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"exporter-cost-{label}.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / f"exporter-cost-{label}.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
