"""Resident memory of a running ``vgpumon serve`` under vGPU churn, scraped like Prometheus.

Starts ``vgpumon serve`` as a subprocess on a simulated vGPU host where VMs come and go all the
time (``--gpus`` L40S GPUs, each with one long-lived VM and a new VM every ``--every`` seconds that
lives ``--lifetime`` seconds; VM, vGPU and process ids never repeat), scrapes ``/metrics`` every
``--scrape-every`` seconds the way Prometheus does (OpenMetrics, gzip), with ``/api/v1/snapshot``
and a burst of ``--burst`` concurrent scrapes once a minute, and reads the process' resident
memory (``VmRSS`` of ``/proc/PID/status``) every ``--sample-every`` seconds for ``--minutes``.

Reports the first and last RSS and the least-squares slope in KiB/min over the whole run and over
its second half (after warm-up, the figure that says whether memory grows). Writes
``bench/results/serve-churn-rss.json`` and ``.md`` with the machine, the command and the date.

    python3 bench/serve_churn_rss.py --minutes 10
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from serve_ready import free_port, wait_ready  # bench/serve_ready.py

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
ACCEPT = "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.1"


def churn_scenario(gpus: int, every: float, lifetime: float) -> str:
    """A vGPU host where each GPU starts a VM every ``every`` s that lives ``lifetime`` s."""
    out = [
        f"name: bench-churn-{gpus}",
        f"description: {gpus} L40S vGPU hosts, a VM every {every:g} s living {lifetime:g} s",
        "seed: 5",
        "gpus:",
    ]
    for g in range(gpus):
        out += [
            "  - model: l40s",
            "    virtualization_mode: host_vgpu",
            "    load: {duty: 0.5}",
            "    vgpu:",
            "      types:",
            f'        - {{id: {10 * g + 1}, name: "NVIDIA L40S-4Q", framebuffer: 4GiB,'
            " max_instances: 12}",
            f'        - {{id: {10 * g + 2}, name: "NVIDIA L40S-4C", framebuffer: 4GiB,'
            " max_instances: 12}",
            "      scheduler: {policy: equal_share}",
            "      instances:",
            f"        - {{id: {g + 1}, type: {10 * g + 1}, load: {{sm: 0.5}}}}",
        ]
    out.append("vgpu_events:")
    for g in range(gpus):
        out.append(
            f"  - {{gpu: {g}, types: [{10 * g + 1}, {10 * g + 2}], start: 0.5s, every: {every}s,"
            f" lifetime: {lifetime}s, load: {{sm: 0.3, memory: 0.1}}}}"
        )
    return "\n".join(out) + "\n"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def get(url: str, accept: str | None = None, timeout: float = 30.0) -> bytes:
    headers = {"Accept-Encoding": "gzip"}
    if accept:
        headers["Accept"] = accept
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return bytes(body)


def slope_kib_per_min(points: list[tuple[float, int]]) -> float | None:
    """Least-squares slope of (seconds, KiB) points, in KiB per minute."""
    if len(points) < 3:
        return None
    xs = [t / 60.0 for t, _ in points]
    ys = [float(v) for _, v in points]
    return statistics.linear_regression(xs, ys).slope


class Scraper(threading.Thread):
    """Scrapes like Prometheus until stopped; counts scrapes and errors."""

    def __init__(self, base: str, every: float, burst: int, stop: threading.Event) -> None:
        super().__init__(daemon=True, name="scraper")
        self.base, self.every, self.burst, self.stop = base, every, burst, stop
        self.scrapes = 0
        self.errors = 0
        self.last_body_bytes = 0

    def _one(self, path: str, accept: str | None = None) -> None:
        try:
            body = get(self.base + path, accept)
            if path == "/metrics":
                self.last_body_bytes = len(body)
            self.scrapes += 1
        except OSError:
            self.errors += 1

    def run(self) -> None:
        started = time.monotonic()
        next_burst = started + 60.0
        while not self.stop.is_set():
            self._one("/metrics", ACCEPT)
            if time.monotonic() >= next_burst:
                next_burst += 60.0
                self._one("/api/v1/snapshot")
                threads = [
                    threading.Thread(target=self._one, args=("/metrics", ACCEPT))
                    for _ in range(self.burst)
                ]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            self.stop.wait(self.every)


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": platform.node(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "libc": " ".join(platform.libc_ver()),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="vgpumon-churn-rss-"))
    scenario = tmp / "churn.yaml"
    scenario.write_text(churn_scenario(args.gpus, args.every, args.lifetime))
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    cmd = [
        sys.executable,
        "-m",
        "vgpumon.cli",
        "serve",
        "--web.listen-address",
        f"127.0.0.1:{port}",
    ]
    cmd += ["--sim", str(scenario), "--interval", str(args.interval)]
    if args.processes:
        cmd.append("--process-series")
    log = tmp / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()
    samples: list[tuple[float, int]] = []
    try:
        wait_ready(base, proc, 120.0)
        scraper = Scraper(base, args.scrape_every, args.burst, stop)
        scraper.start()
        t0 = time.monotonic()
        end = t0 + args.minutes * 60.0
        while True:
            now = time.monotonic()
            samples.append((now - t0, rss_kib(proc.pid)))
            if args.verbose:
                print(f"{now - t0:6.0f} s  {samples[-1][1] / 1024:.1f} MiB", flush=True)
            if now >= end or proc.poll() is not None:
                break
            time.sleep(min(args.sample_every, max(0.0, end - now)))
        stop.set()
        scraper.join(timeout=60)
        if proc.poll() is not None:
            raise SystemExit(f"vgpumon serve exited with {proc.returncode}: {log.read_text()}")
    finally:
        stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    half = samples[-1][0] / 2
    second = [p for p in samples if p[0] >= half]
    return {
        "first_rss_kib": samples[0][1],
        "last_rss_kib": samples[-1][1],
        "max_rss_kib": max(v for _, v in samples),
        "slope_kib_per_min": slope_kib_per_min(samples),
        "slope_second_half_kib_per_min": slope_kib_per_min(second),
        "scrapes": scraper.scrapes,
        "scrape_errors": scraper.errors,
        "metrics_body_bytes": scraper.last_body_bytes,
        "samples": [[round(t, 1), v] for t, v in samples],
        "serve_command": " ".join(cmd[1:]),
    }


def markdown(doc: dict[str, Any]) -> str:
    r = doc["result"]
    a = doc["args"]

    def mib(kib: int) -> str:
        return f"{kib / 1024:.1f}"

    def slope(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1f}"

    lines = [
        "# `vgpumon serve` resident memory under vGPU churn",
        "",
        f"- Date: {doc['date']}",
        f"- Machine: {doc['machine']['cpu']} ({doc['machine']['cpus']} CPUs), "
        f"kernel {doc['machine']['kernel']}, CPython {doc['machine']['python']}, "
        f"{doc['machine']['libc']}",
        f"- Command: `{doc['command']}`",
        f"- Host: {a['gpus']} simulated L40S vGPU GPUs, each with one long-lived VM and a new VM "
        f"every {a['every']:g} s that lives {a['lifetime']:g} s (ids never repeat); serve "
        f"interval {a['interval']:g} s{', --process-series' if a['processes'] else ''}",
        f"- Load: `/metrics` every {a['scrape_every']:g} s (OpenMetrics, gzip), and once a "
        f"minute `/api/v1/snapshot` plus {a['burst']} concurrent scrapes; "
        f"{r['scrapes']} requests, {r['scrape_errors']} errors, "
        f"{r['metrics_body_bytes']} bytes per /metrics body",
        f"- RSS (`VmRSS`) read every {a['sample_every']:g} s for {a['minutes']:g} min",
        "",
        "| first RSS MiB | last RSS MiB | max RSS MiB | slope KiB/min (whole run) |"
        " slope KiB/min (second half) |",
        "|---|---|---|---|---|",
        f"| {mib(r['first_rss_kib'])} | {mib(r['last_rss_kib'])} | {mib(r['max_rss_kib'])} | "
        f"{slope(r['slope_kib_per_min'])} | {slope(r['slope_second_half_kib_per_min'])} |",
        "",
        "RSS over time (s, MiB):",
        "",
        " ".join(f"{t:.0f}:{v / 1024:.1f}" for t, v in r["samples"]),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--minutes", type=float, default=10.0, help="how long to run (default 10)")
    p.add_argument("--gpus", type=int, default=16, help="simulated GPUs (default 16)")
    p.add_argument("--every", type=float, default=1.0, help="a new VM per GPU every S s (1)")
    p.add_argument("--lifetime", type=float, default=7.0, help="each VM lives S s (default 7)")
    p.add_argument("--interval", type=float, default=1.0, help="serve --interval (default 1)")
    p.add_argument("--processes", action="store_true", help="serve --process-series")
    p.add_argument("--scrape-every", type=float, default=15.0, help="scrape interval, s (15)")
    p.add_argument("--burst", type=int, default=10, help="concurrent scrapes once a minute (10)")
    p.add_argument("--sample-every", type=float, default=10.0, help="RSS sample interval, s (10)")
    p.add_argument("--label", default="serve-churn-rss", help="result file name")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--verbose", "-v", action="store_true", help="print each RSS sample")
    args = p.parse_args(argv)
    started = datetime.datetime.now(datetime.timezone.utc)
    result = run(args)
    doc = {
        "date": started.isoformat(timespec="seconds"),
        "machine": machine(),
        "command": " ".join(["python3", "bench/serve_churn_rss.py", *(argv or sys.argv[1:])]),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "result": result,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.label}.json").write_text(json.dumps(doc, indent=2) + "\n")
    (args.out / f"{args.label}.md").write_text(markdown(doc))
    print(markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
