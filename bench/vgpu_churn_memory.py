"""Memory of vgpumon's vGPU readers under VM churn, measured with tracemalloc on the simulator.

The ``churn-1000`` stress scenario (``vgpumon/sim/scenarios/stress/churn-1000.yaml``, also used by
``tests/collect/test_vgpu_churn.py``: one long-lived VM plus a VM created every 0.1 s that lives
0.6 s), sampled by the vGPU readers every 0.5 s with the scheduler
log read every 0.25 s, on a manual clock. After a 20 s warm-up (every bounded cache full), traced
memory is read every ``--step`` create/destroy events, split into vgpumon's collector (everything
under ``vgpumon/`` but the simulator), the simulator, and the rest (asyncio, the standard library).

    python3 bench/vgpu_churn_memory.py --events 10000 --step 1000
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from typing import Any

import vgpumon.sim as sim_pkg
from vgpumon.testing import (
    CHURN_SCENARIO,
    CHURN_WARM_UP,
    PACKAGE_DIR,
    SIM_DIR,
    settle_memory,
    sim_host,
    stress_scenario_text,
)


def traced() -> dict[str, int]:
    out = {"collector": 0, "sim": 0, "other": 0}
    for stat in tracemalloc.take_snapshot().statistics("filename"):
        name = stat.traceback[0].filename
        kind = (
            "sim"
            if name.startswith(SIM_DIR)
            else "collector"
            if name.startswith(PACKAGE_DIR)
            else "other"
        )
        out[kind] += stat.size
    return out


async def run(events: int, step: int) -> list[dict[str, Any]]:
    vms = (events // 2) + int(CHURN_WARM_UP / 0.1) + 10
    text = stress_scenario_text(CHURN_SCENARIO).replace("count: 700", f"count: {vms}")
    tracemalloc.start()
    host = sim_host(sim_pkg.parse_scenario(text, "churn.yaml"))
    rows: list[dict[str, Any]] = []
    try:
        await host.cycle()
        base: dict[str, int] | None = None
        base_t = 0.0
        next_mark = 0
        started = time.perf_counter()
        cycles = 0
        while True:
            host.advance(0.5, poll_every=0.25)
            await host.cycle()
            cycles += 1
            if base is None and host.t >= CHURN_WARM_UP:
                settle_memory()
                base, base_t = traced(), host.t
                started, cycles = time.perf_counter(), 0
                continue
            if base is None:
                continue
            done = round((host.t - base_t) / 0.1) * 2  # one create and one destroy per VM
            if done >= next_mark:
                settle_memory()
                now = traced()
                rows.append(
                    {
                        "events": done,
                        **{f"{k}_growth": now[k] - base[k] for k in now},
                        "collector": now["collector"],
                        "sim": now["sim"],
                        "ms_per_cycle": 1000 * (time.perf_counter() - started) / max(1, cycles),
                    }
                )
                next_mark += step
                if done >= events:
                    break
    finally:
        host.close()
        tracemalloc.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--step", type=int, default=250)
    args = parser.parse_args()
    rows = asyncio.run(run(args.events, args.step))
    print(
        "| events after warm-up | collector growth (B) | sim growth (B) | other growth (B) | "
        "collector total (B) | sim total (B) | ms / cycle (traced) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['events']} | {r['collector_growth']:+d} | {r['sim_growth']:+d} | "
            f"{r['other_growth']:+d} | {r['collector']} | {r['sim']} | {r['ms_per_cycle']:.1f} |"
        )


if __name__ == "__main__":
    main()
