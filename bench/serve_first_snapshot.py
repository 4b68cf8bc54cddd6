"""Time from starting ``vgpumon serve --sim SCENARIO`` to its first snapshot, as a user sees it.

    python bench/serve_first_snapshot.py SCENARIO RUNS [serve flags...]

Each run starts ``serve`` on a free port and polls ``/-/ready`` every 10 ms: the first answer
(the listener is up; 503 until the first snapshot) and the first 200 (the first snapshot is
served), in seconds from the start. Prints the load average and the pairs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from serve_ready import free_port, wait_ready  # bench/serve_ready.py

SERVE = "import sys; from vgpumon.cli import main; sys.exit(main(sys.argv[1:]))"
# A first snapshot later than this ends the run (a 16 x 48 host's takes seconds).
READY_WITHIN_SECONDS = 300.0


def one_run(scenario: str, extra: list[str]) -> tuple[float | None, float]:
    port = free_port()
    started = time.monotonic()
    cmd = [sys.executable, "-c", SERVE, "serve", "--sim", scenario]
    cmd += ["--web.listen-address", f"127.0.0.1:{port}", "--log.level", "warning", *extra]
    proc = subprocess.Popen(cmd)
    try:
        first_answer = wait_ready(
            f"http://127.0.0.1:{port}", proc, READY_WITHIN_SECONDS, every=0.01, timeout=2.0
        )
        ready = time.monotonic() - started
        return (None if first_answer is None else first_answer - started), ready
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str]) -> int:
    scenario, runs, extra = argv[1], int(argv[2]), argv[3:]
    results = []
    for _ in range(runs):
        results.append(one_run(scenario, extra))
        time.sleep(1)
    pairs = ", ".join(f"{a or 0:.2f}/{b:.2f}" for a, b in results)
    print(f"load {os.getloadavg()[0]:.1f}; listener up / first snapshot served, s: {pairs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
