"""Per-thread CPU of a running process over a window, from /proc (Linux).

    python3 bench/device/thread_cpu.py PID SECONDS

Prints one line per thread (id, kernel thread name, % of a core) and the total. vgpumon's threads
carry their names into the kernel (``gpu0``, ``system``, ``xid``, ``schedlog-...``), so the split
says which part of the exporter costs what. Exits 1 when the process is gone before the end.
"""

from __future__ import annotations

import os
import sys
import time


def snapshot(pid: int) -> dict[tuple[str, str], int]:
    """Clock ticks of user plus system time per (thread id, name)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
            with open(f"/proc/{pid}/task/{tid}/comm") as comm:
                name = comm.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[(tid, name)] = int(fields[11]) + int(fields[12])
    return out


def main() -> int:
    pid, seconds = int(sys.argv[1]), float(sys.argv[2])
    try:
        before = snapshot(pid)
        time.sleep(seconds)
        after = snapshot(pid)
    except FileNotFoundError:
        print(f"process {pid} is gone", file=sys.stderr)
        return 1
    hz = os.sysconf("SC_CLK_TCK")
    for key in sorted(after):
        share = 100 * (after[key] - before.get(key, 0)) / hz / seconds
        print(f"{key[0]} {key[1]:16s} {share:6.2f} %")
    total = sum(after[k] - before.get(k, 0) for k in after)
    print(f"total {100 * total / hz / seconds:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
