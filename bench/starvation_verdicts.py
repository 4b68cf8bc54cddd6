"""The share verdicts of a real-time ``vgpumon serve --sim``, after the verdict's minute.

On the 16 x 48 bench host no vGPU may be starved (docs/verdicts.md); the verdicts also need the
scheduler-log poller to keep up with 16 rings (a window with missed entries gives no verdict), which
only a host with the cores for it does: run it on the 16-core host, where every vGPU should be
``ok``. On vgpu-contention, vGPU 3 is ``starved``.

    python bench/starvation_verdicts.py bench/scenarios/vgpu-16x48.yaml --seconds 100
    python bench/starvation_verdicts.py tests/fixtures/scenarios/vgpu-contention.yaml

Prints one JSON object: the share states counted over every vGPU, the starved vGPUs, and the
scheduler-log entries read and missed since start.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter

STATE = re.compile(r"^vgpumon_vgpu_scheduler_share_state\{([^}]*)\} 1\.0$", re.M)
LOG = re.compile(r"^vgpumon_vgpu_scheduler_log_entries(_missed)?_total\{[^}]*\} (\S+)$", re.M)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario")
    parser.add_argument("--seconds", type=float, default=90.0, help="how long serve runs first")
    args = parser.parse_args()
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "vgpumon.cli", "serve", "--sim", args.scenario,
         "--web.listen-address", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        time.sleep(args.seconds)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as resp:
            text = resp.read().decode()
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    states: Counter[str] = Counter()
    starved = []
    for labels in STATE.findall(text):
        found = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        states[found["state"]] += 1
        if found["state"] == "starved":
            starved.append(f"GPU {found['gpu']} vGPU {found['vgpu_id']}")
    entries = missed = 0.0
    for is_missed, value in LOG.findall(text):
        if is_missed:
            missed += float(value)
        else:
            entries += float(value)
    result = {
        "scenario": args.scenario,
        "seconds": args.seconds,
        "share_states": dict(states),
        "starved": starved,
        "log_entries": entries,
        "log_entries_missed": missed,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
