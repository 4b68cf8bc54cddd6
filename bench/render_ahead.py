"""What rendering every snapshot ahead of scrapes costs, against rendering on the first scrape.

Two ``vgpumon serve`` processes run side by side on the same host and GPUs (a real GPU, or one
simulated scenario), one with ``--web.render-ahead auto`` (the default: a snapshot that renders
in under 2 ms waits for a scrape) and one with ``--web.render-ahead always`` (every snapshot is
rendered as the sampler publishes it). Both sample at the default 1 s interval and are scraped
like Prometheus, once every ``--scrape-every`` seconds (15 by default), the two in turn. Over the
window the script reads each process's CPU time (``/proc/PID/stat``) and times every scrape in
the client.

    python3 bench/render_ahead.py --window 120                      # the real GPUs
    python3 bench/render_ahead.py --sim passthrough-guest --window 120
    python3 bench/render_ahead.py --sim baremetal-8xh100 --out bench/results

Prints a Markdown table; with ``--out DIR`` also writes ``render-ahead-LABEL.{json,md}``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from serve_ready import wait_ready  # bench/serve_ready.py

ROOT = Path(__file__).resolve().parent.parent
MODES = ("auto", "always")
BASE_PORT = 19850


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape_ms(port: int) -> float:
    started = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        resp.read()
    return (time.perf_counter() - started) * 1000


def start(mode: str, port: int, sim: str | None) -> subprocess.Popen[bytes]:
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
    cmd += ["--web.render-ahead", mode, *(["--sim", sim] if sim else [])]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def measure(sim: str | None, window: float, every: float, warm_up: float) -> dict[str, Any]:
    procs = {mode: start(mode, BASE_PORT + i, sim) for i, mode in enumerate(MODES)}
    try:
        for i, mode in enumerate(MODES):
            wait_ready(f"http://127.0.0.1:{BASE_PORT + i}", procs[mode])
        time.sleep(warm_up)  # past the first cycles (static values) and the first renders
        cpu0 = {mode: cpu_seconds(p.pid) for mode, p in procs.items()}
        t0 = time.monotonic()
        latencies: dict[str, list[float]] = {mode: [] for mode in MODES}
        due = t0 + every / 2
        while due < t0 + window:
            time.sleep(max(0.0, due - time.monotonic()))
            for i, mode in enumerate(MODES):
                latencies[mode].append(scrape_ms(BASE_PORT + i))
            due += every
        time.sleep(max(0.0, t0 + window - time.monotonic()))
        elapsed = time.monotonic() - t0
        cpu1 = {mode: cpu_seconds(p.pid) for mode, p in procs.items()}
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(timeout=10)
    return {
        mode: {
            "cpu_percent": 100 * (cpu1[mode] - cpu0[mode]) / elapsed,
            "scrapes": len(latencies[mode]),
            "scrape_ms_median": statistics.median(latencies[mode]) if latencies[mode] else None,
            "scrape_ms_max": max(latencies[mode]) if latencies[mode] else None,
            "scrape_ms": [round(x, 2) for x in latencies[mode]],
        }
        for mode in MODES
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"# Render ahead or on the first scrape: {report['label']}",
        "",
        f"- date: {report['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']}",
        f"- window {report['window']:g} s, scraped every {report['scrape_every']:g} s, "
        f"{report['rounds']} round(s), both processes side by side; medians over rounds",
        "",
        "| `--web.render-ahead` | CPU % of a core | scrape ms median | scrape ms max |",
        "|---|---|---|---|",
    ]
    for mode in MODES:
        rows = [r[mode] for r in report["rounds_raw"]]
        cpu = statistics.median(r["cpu_percent"] for r in rows)
        med = statistics.median(r["scrape_ms_median"] for r in rows)
        top = max(r["scrape_ms_max"] for r in rows)
        lines.append(f"| {mode} | {cpu:.3f} | {med:.2f} | {top:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sim", metavar="SCENARIO", help="a simulated scenario (default: real GPUs)")
    p.add_argument("--window", type=float, default=120.0, help="seconds measured (default 120)")
    p.add_argument("--scrape-every", type=float, default=15.0, help="seconds (default 15)")
    p.add_argument("--warm-up", type=float, default=5.0, help="seconds before the window")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--label", help="result name part (default: the scenario or 'gpu')")
    p.add_argument("--out", type=Path, help="write render-ahead-LABEL.{json,md} here")
    args = p.parse_args(argv)
    if args.window <= 0 or args.scrape_every <= 0 or args.rounds < 1:
        p.error("--window and --scrape-every must be positive, --rounds at least 1")
    label = args.label or args.sim or "gpu"
    report: dict[str, Any] = {
        "label": label,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average at start {os.getloadavg()[0]:.2f}",
        "window": args.window,
        "scrape_every": args.scrape_every,
        "rounds": args.rounds,
        "rounds_raw": [
            measure(args.sim, args.window, args.scrape_every, args.warm_up)
            for _ in range(args.rounds)
        ],
    }
    text = markdown(report)
    print(text, end="")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"render-ahead-{label}.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / f"render-ahead-{label}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
