"""What each NVML function that vgpumon calls costs on this host, per call and per sampling cycle.

The exporter's cost is mostly NVML's: a one-GPU host spends a few milliseconds a second inside the
driver, and one slow routine (the energy counter, PCIe throughput) can outweigh all the others.
This records the calls of ten steady ``vgpumon serve`` cycles (the same recording as the floor in
``bench/exporter_cost.py``: background pollers included, event waits and allocations left out),
then replays them ``--passes`` times, timing every call on its own: wall time and the calling
thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``). The table says which calls to read less often,
batch or drop; ``ms CPU / cycle`` is calls per cycle times the mean CPU per call.

    python bench/nvml_call_costs.py --out bench/results/...      # this host's GPUs
    python bench/nvml_call_costs.py --sim kvm-vgpu-timesliced    # a simulated host

Errors a call raises in the replay (NOT_SUPPORTED, for instance) are part of its cost: NVML
answers them too, and vgpumon asks again only where the absence cache lets it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from exporter_cost import driver_version, record_cycles


def replay(cycles: list[list[Any]], passes: int) -> dict[str, dict[str, Any]]:
    """Per function name: calls per cycle, wall and CPU time per call (µs)."""
    wall: dict[str, list[float]] = defaultdict(list)
    cpu: dict[str, list[float]] = defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    for cycle in cycles:
        for fn, _args, _kwargs in cycle:
            counts[getattr(fn, "__name__", repr(fn))] += 1
    for _ in range(passes):
        for cycle in cycles:
            for fn, args, kwargs in cycle:
                name = getattr(fn, "__name__", repr(fn))
                w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
                try:
                    fn(*args, **kwargs)
                except Exception:  # noqa: BLE001 - an error answer is a cost like any other
                    errors[name] += 1
                c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
                wall[name].append((w1 - w0) / 1000)
                cpu[name].append((c1 - c0) / 1000)
    out: dict[str, dict[str, Any]] = {}
    for name, per_cycle in counts.items():
        calls = per_cycle / len(cycles)
        out[name] = {
            "calls_per_cycle": calls,
            "wall_us_median": statistics.median(wall[name]),
            "wall_us_mean": statistics.fmean(wall[name]),
            "wall_us_max": max(wall[name]),
            "cpu_us_median": statistics.median(cpu[name]),
            "cpu_us_mean": statistics.fmean(cpu[name]),
            "cpu_ms_per_cycle": calls * statistics.fmean(cpu[name]) / 1000,
            "wall_ms_per_cycle": calls * statistics.fmean(wall[name]) / 1000,
            "error_share": errors[name] / len(wall[name]),
        }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["cpu_ms_per_cycle"]))


# Field ids that could replace a slower getter, timed alone too (``--probe-fields``):
# 83 TOTAL_ENERGY_CONSUMPTION and 191 ENERGY (nvmlDeviceGetTotalEnergyConsumption takes 3-17 ms),
# 185 POWER_AVERAGE and 186 POWER_INSTANT, 197/198 PCIE_COUNT_TX/RX_BYTES (cumulative PCIe
# traffic, where nvmlDeviceGetPcieThroughput blocks 20 ms per direction), 94 PCIE_REPLAY_COUNTER
# (cadenced: read alone).
PROBE_FIELDS = (83, 191, 185, 186, 197, 198, 94)


def field_breakdown(
    cycles: list[list[Any]], passes: int, probe: tuple[int, ...] = ()
) -> dict[str, dict[str, float]]:
    """Each field id of the batched ``nvmlDeviceGetFieldValues`` calls, asked alone.

    The batch costs what its slowest entries cost; this says which they are (a field whose
    answer needs the GPU, such as a counter kept in firmware, against one the driver caches).
    ``probe`` ids are timed the same way, with whether the GPU answered them.
    """
    batch = next(
        ((fn, args) for c in cycles for fn, args, _ in c if "GetFieldValues" in fn.__name__),
        None,
    )
    if batch is None:
        return {}
    fn, (handle, ids) = batch
    out: dict[str, dict[str, float]] = {}
    for field_id in [*ids, *(p for p in probe if p not in ids)]:
        cpu: list[float] = []
        answered = 0.0
        for _ in range(passes):
            c0 = time.thread_time_ns()
            got: Any = None
            with contextlib.suppress(Exception):  # an error answer costs like any other
                got = fn(handle, [field_id])
            cpu.append((time.thread_time_ns() - c0) / 1000)
            with contextlib.suppress(Exception):
                answered = 1.0 if int(got[0].nvmlReturn) == 0 else 0.0
        key = f"probe {field_id}" if field_id not in ids else str(field_id)
        out[key] = {"cpu_us_median": statistics.median(cpu), "batch": len(ids), "ok": answered}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["cpu_us_median"]))


def gpm_breakdown(cycles: list[list[Any]], passes: int) -> dict[str, float]:
    """``nvmlGpmMetricsGet`` with all of vgpumon's metrics against one metric alone.

    Says whether its cost is per call (the two samples' decoding) or per metric computed.
    """
    call = next(
        ((fn, args) for c in cycles for fn, args, _ in c if fn.__name__ == "nvmlGpmMetricsGet"),
        None,
    )
    if call is None:
        return {}
    fn, (metrics_get,) = call
    count = int(metrics_get.numMetrics)

    def median_cpu(n: int) -> float:
        metrics_get.numMetrics = n
        cpu: list[float] = []
        for _ in range(passes):
            c0 = time.thread_time_ns()
            with contextlib.suppress(Exception):
                fn(metrics_get)
            cpu.append((time.thread_time_ns() - c0) / 1000)
        return statistics.median(cpu)

    try:
        return {"metrics": count, "cpu_us_all": median_cpu(count), "cpu_us_one": median_cpu(1)}
    finally:
        metrics_get.numMetrics = count


def markdown(report: dict[str, Any]) -> str:
    rows = report["calls"]
    total_cpu = sum(r["cpu_ms_per_cycle"] for r in rows.values())
    total_wall = sum(r["wall_ms_per_cycle"] for r in rows.values())
    lines = [
        f"# NVML call costs: {report['label']}",
        "",
        f"- date: {report['date']}",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']}; driver {report['driver']}; Python {report['python']}",
        f"- {report['cycles']} recorded cycles at {report['interval']} s, replayed "
        f"{report['passes']} times; per call: median and mean of every replay",
        f"- per cycle in all: **{total_cpu:.2f} ms CPU**, {total_wall:.2f} ms wall "
        f"({sum(r['calls_per_cycle'] for r in rows.values()):.1f} calls)",
        "",
        "| function | calls / cycle | wall µs median | wall µs mean | wall µs max "
        "| CPU µs median | CPU µs mean | ms CPU / cycle | share | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        share = r["cpu_ms_per_cycle"] / total_cpu if total_cpu else 0.0
        lines.append(
            f"| `{name}` | {r['calls_per_cycle']:.2f} | {r['wall_us_median']:.1f} "
            f"| {r['wall_us_mean']:.1f} | {r['wall_us_max']:.0f} | {r['cpu_us_median']:.1f} "
            f"| {r['cpu_us_mean']:.1f} | {r['cpu_ms_per_cycle']:.3f} | {share * 100:.1f} % "
            f"| {r['error_share'] * 100:.0f} % |"
        )
    fields = report.get("fields") or {}
    if fields:
        lines += [
            "",
            f"Field ids of one GPU's batched `nvmlDeviceGetFieldValues` ({len(fields)} entries), "
            "each asked alone, CPU µs median:",
            "",
            ", ".join(
                f"{k} {v['cpu_us_median']:.1f}" + ("" if v.get("ok", 1.0) else " (not answered)")
                for k, v in fields.items()
            ),
        ]
    gpm = report.get("gpm") or {}
    if gpm:
        lines += [
            "",
            f"`nvmlGpmMetricsGet`, CPU µs median: {gpm['cpu_us_all']:.1f} with vgpumon's "
            f"{gpm['metrics']:.0f} metrics, {gpm['cpu_us_one']:.1f} with one.",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--sim", help="a simulated host (built-in name or scenario file)")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--cycles", type=int, default=10, help="cycles recorded (default 10)")
    p.add_argument("--passes", type=int, default=20, help="replays of the recording (default 20)")
    p.add_argument("--label", help="result file name part (default: sim or the GPU's name)")
    p.add_argument("--out", help="directory for nvml-call-costs-LABEL.{json,md}")
    args = p.parse_args(argv)
    cycles = record_cycles(args.sim, args.interval, args.cycles)
    calls = replay(cycles, args.passes)
    label = args.label or ("sim" if args.sim else "gpu")
    report = {
        "label": label,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python bench/nvml_call_costs.py " + " ".join(argv or sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "python": platform.python_version(),
        "driver": driver_version(args.sim),
        "interval": args.interval,
        "cycles": len(cycles),
        "passes": args.passes,
        "calls": calls,
        "fields": field_breakdown(cycles, args.passes, PROBE_FIELDS),
        "gpm": gpm_breakdown(cycles, args.passes),
    }
    text = markdown(report)
    print(text)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"nvml-call-costs-{label}.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / f"nvml-call-costs-{label}.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
