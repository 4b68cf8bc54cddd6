"""CPU and thread wake-ups per sampling cycle of a running ``vgpumon serve``, by thread, A/B.

    python bench/serve_cycle_cpu.py --root . --root /tmp/old-tree --rounds 3 -- \\
        --nvml-module nvml_standin

Starts ``vgpumon serve ARGS --interval 1`` from each ``--root`` (a checkout: its code runs, with
``bench/shim`` of this checkout on the path for the NVML stand-in, whose scenario is
``VGPUMON_STANDIN_SCENARIO``, default here ``passthrough-guest``: one GPU), the roots alternating
round by round; after a warm-up it reads every thread's CPU time (nanoseconds) and the times it
was put on a CPU (its wake-ups) from ``/proc/PID/task/TID/schedstat`` over a window, scraped every
15 s as Prometheus does, and prints per cycle: CPU ms and wake-ups, in all and by thread name
(digits folded: ``gpu#``). Issue 31, finding 4: a one-GPU cycle's hand-offs between threads cost
about as much CPU as the Python around them; the serial floor (``bench/exporter_cost.py``) has
none. Linux only.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from serve_ready import free_port  # bench/serve_ready.py

HERE = Path(__file__).resolve().parent


def threads(pid: int) -> dict[str, tuple[str, int, int]]:
    """tid -> (name, CPU ns, times run) for every thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns, _, runs = (int(x) for x in f.read().split()[:3])
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = "main" if int(tid) == pid else re.sub(r"\d+", "#", f.read().strip())
        except (OSError, ValueError):
            continue
        out[tid] = (name, ns, runs)
    return out


def one_run(root: str, args: list[str], warmup: float, window: float) -> dict[str, object]:
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(root).resolve()), str(HERE / "shim")])
    env.setdefault("VGPUMON_STANDIN_SCENARIO", "passthrough-guest")
    cmd = [sys.executable, "-m", "vgpumon.cli", "serve", "--interval", "1", "--log.level",
           "warning", "--web.listen-address", f"127.0.0.1:{port}", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, cwd="/tmp", stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        time.sleep(warmup)

        def cycles() -> float:
            with urllib.request.urlopen(url, timeout=10) as r:
                text = r.read().decode()
            m = re.search(r"^vgpumon_sampler_cycles_total(?:\{[^}]*\})? (\S+)$", text, re.M)
            return float(m.group(1)) if m else float("nan")

        c0, before, t0 = cycles(), threads(proc.pid), time.monotonic()
        next_scrape = t0 + 15.0
        while (left := t0 + window - time.monotonic()) > 0:
            time.sleep(min(left, max(0.0, next_scrape - time.monotonic())))
            if time.monotonic() >= next_scrape:
                cycles()
                next_scrape += 15.0
        after, c1 = threads(proc.pid), cycles()
    finally:
        proc.terminate()
        proc.wait(10)
    n = c1 - c0
    cpu: collections.Counter[str] = collections.Counter()
    runs: collections.Counter[str] = collections.Counter()
    for tid, (name, ns, r) in after.items():
        _, ns0, r0 = before.get(tid, (name, 0, 0))
        cpu[name] += ns - ns0
        runs[name] += r - r0
    return {
        "cycles": n,
        "cpu_ms_per_cycle": sum(cpu.values()) / 1e6 / n,
        "wakeups_per_cycle": sum(runs.values()) / n,
        "threads": {
            k: [round(cpu[k] / 1e6 / n, 3), round(runs[k] / n, 2)] for k, _ in cpu.most_common()
        },
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", action="append", required=True, help="a checkout to run (repeat: A/B)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--window", type=float, default=30.0)
    p.add_argument("--json")
    p.add_argument("serve_args", nargs="*", help="after --: more serve arguments")
    a = p.parse_args()
    results: dict[str, list[dict[str, object]]] = {root: [] for root in a.root}
    for i in range(a.rounds):
        for root in a.root if i % 2 == 0 else list(reversed(a.root)):
            r = one_run(root, a.serve_args, a.warmup, a.window)
            results[root].append(r)
            print(f"round {i + 1} {root}: {json.dumps(r)}", flush=True)
    print(
        "\n| root | cycle CPU ms (median) | wake-ups per cycle (median) | by thread (ms/wake-ups) |"
    )
    print("|---|---|---|---|")
    for root, rs in results.items():
        cpu = statistics.median(float(r["cpu_ms_per_cycle"]) for r in rs)  # type: ignore[arg-type]
        wake = statistics.median(float(r["wakeups_per_cycle"]) for r in rs)  # type: ignore[arg-type]
        split = ", ".join(f"{k} {v[0]} ms/{v[1]}" for k, v in rs[-1]["threads"].items())  # type: ignore[attr-defined]
        print(f"| {root} | {cpu:.3f} | {wake:.2f} | {split} |")
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
