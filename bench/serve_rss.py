"""Resident memory of ``vgpumon serve`` on exporter_cost.py's simulated hosts, nothing else.

For each host (``1x0``, ``16x48``, ... as in ``exporter_cost.py --sim``; ``nodriver``: no
simulator and no NVML driver, the real-host code path serving ``vgpumon_up 0``): start serve, wait
until it serves, read ``VmRSS`` after ``--settle`` seconds (idle), after 200 sequential and 50x4
concurrent scrapes plus one ``/api/v1/snapshot`` (after scrapes), and ``--settle`` seconds later.
Needs no psutil and no nvitop-exporter; the figures are MiB.

    python3 bench/serve_rss.py --hosts nodriver,1x0,16x48
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from exporter_cost import ROOT, free_port, host_scenario


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def get(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=60) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return bytes(body)


def measure(host: str, settle: float) -> tuple[float, float, float]:
    tmp = Path(tempfile.mkdtemp(prefix="vgpumon-rss-"))
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "vgpumon.cli",
        "serve",
        "--web.listen-address",
        f"127.0.0.1:{port}",
    ]
    if host != "nodriver":
        scenario = tmp / f"{host}.yaml"
        scenario.write_text(host_scenario(host))
        cmd += ["--sim", str(scenario)]
    env = dict(os.environ, VGPUMON_SIM_LATENCY=os.environ.get("VGPUMON_SIM_LATENCY", "realistic"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.Popen(
        cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    ready = b"vgpumon_up" if host == "nodriver" else b"vgpumon_gpu_up"
    try:
        give_up = time.monotonic() + 120
        while True:
            try:
                if ready in get(base + "/metrics"):
                    break
            except OSError:
                pass
            if time.monotonic() > give_up or proc.poll() is not None:
                raise SystemExit(f"{host}: serve did not become ready")
            time.sleep(0.2)
        time.sleep(settle)
        idle = rss_mib(proc.pid)
        for _ in range(200):
            get(base + "/metrics")

        def scraper() -> None:
            for _ in range(4):
                # a 503 past --web.max-requests is by design
                with contextlib.suppress(urllib.error.HTTPError):
                    get(base + "/metrics")

        scrapers = [threading.Thread(target=scraper) for _ in range(50)]
        for t in scrapers:
            t.start()
        for t in scrapers:
            t.join()
        get(base + "/api/v1/snapshot")
        after = rss_mib(proc.pid)
        time.sleep(settle)
        return idle, after, rss_mib(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--hosts", default="nodriver,1x0,16x48", help="comma-separated hosts")
    p.add_argument("--settle", type=float, default=30.0, help="seconds before each idle read")
    args = p.parse_args(argv)
    print("| host | idle MiB | after scrapes MiB | settle s later MiB |\n|---|---|---|---|")
    for host in args.hosts.split(","):
        idle, after, later = measure(host, args.settle)
        print(f"| {host} | {idle:.1f} | {after:.1f} | {later:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
