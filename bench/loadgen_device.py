"""Measure what NVML and GPM report under the load generator, on a real GPU.

Runs one LoadRunner (the API ``vgpumon validate`` uses) through a ladder of loads with
``runner.update`` and reads, with raw pynvml, for each step:

* NVML utilization (``nvmlDeviceGetUtilizationRates().gpu``), median of reads over the window;
* GPM SM utilization, SM occupancy, any-tensor and HMMA utilization, DRAM bandwidth utilization,
  from two ``nvmlGpmSampleGet`` samples the window apart;
* the SM clock and the duty the worker itself measured.

Then two processes at once (NVML must list both PIDs with their footprint share), and that memory
is released after stop. Writes ``loadgen-device.json`` and a markdown table to ``--out``.

    PYTHONPATH=. python3 bench/loadgen_device.py --out bench/results
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pynvml

from vgpumon.loadgen import LoadRunner, LoadSpec, blocks_for

GIB = 1024**3
METRICS = {
    "graphics_util": pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
    "sm_util": pynvml.NVML_GPM_METRIC_SM_UTIL,
    "sm_occupancy": pynvml.NVML_GPM_METRIC_SM_OCCUPANCY,
    "any_tensor_util": pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
    "hmma_tensor_util": pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL,
    "dram_bw_util": pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL,
    "fp32_util": pynvml.NVML_GPM_METRIC_FP32_UTIL,
}

# label, changes, expected NVML util %, expected GPM SM util % (None: not a duty/SM check)
LADDER: list[tuple[str, dict[str, Any], float | None, float | None]] = [
    ("idle, 1 GiB held", {"duty": 0.0}, 0, 0),
    ("spin duty 0.25, all SMs", {"duty": 0.25, "sm_fraction": 1.0}, 25, 25),
    ("spin duty 0.50, all SMs", {"duty": 0.5}, 50, 50),
    ("spin duty 0.75, all SMs", {"duty": 0.75}, 75, 75),
    ("spin duty 1.00, all SMs", {"duty": 1.0}, 100, 100),
    ("spin duty 1.00, half the SMs", {"duty": 1.0, "sm_fraction": 0.5}, 100, 50),
    ("spin duty 0.50, quarter of SMs", {"duty": 0.5, "sm_fraction": 0.25}, 50, 12.5),
    ("tensor duty 1.00, all SMs, 1 warp", {"kernel": "tensor", "duty": 1.0, "sm_fraction": 1.0},
     100, 100),
    ("tensor duty 0.50, all SMs, 1 warp", {"duty": 0.5}, 50, 50),
    ("tensor duty 1.00, all SMs, 4 warps", {"duty": 1.0, "warps_per_block": 4}, 100, 100),
    ("stream duty 1.00, all SMs, 1 warp", {"kernel": "stream", "warps_per_block": 1}, 100, 100),
    ("stream duty 1.00, all SMs, 8 warps", {"warps_per_block": 8}, 100, 100),
]  # fmt: skip


def gpm_read(handle: Any, older: Any, newer: Any) -> dict[str, float | None]:
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = len(METRICS)
    mg.sample1 = older
    mg.sample2 = newer
    for i, metric_id in enumerate(METRICS.values()):
        mg.metrics[i].metricId = metric_id
    pynvml.nvmlGpmMetricsGet(mg)
    out: dict[str, float | None] = {}
    for i, name in enumerate(METRICS):
        metric = mg.metrics[i]
        out[name] = round(float(metric.value), 2) if metric.nvmlReturn == 0 else None
    return out


def process_memory(handle: Any, pids: list[int]) -> dict[int, int | None]:
    seen = {p.pid: p.usedGpuMemory for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)}
    return {pid: (int(seen[pid]) if seen.get(pid) is not None else None) for pid in pids}


def measure(handle: Any, runner: LoadRunner, settle_s: float, window_s: float) -> dict[str, Any]:
    time.sleep(settle_s)
    older, newer = pynvml.nvmlGpmSampleAlloc(), pynvml.nvmlGpmSampleAlloc()
    try:
        pynvml.nvmlGpmSampleGet(handle, older)
        utils, clocks = [], []
        end = time.monotonic() + window_s
        while time.monotonic() < end:
            time.sleep(0.25)
            utils.append(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            clocks.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
        pynvml.nvmlGpmSampleGet(handle, newer)
        gpm = gpm_read(handle, older, newer)
    finally:
        pynvml.nvmlGpmSampleFree(older)
        pynvml.nvmlGpmSampleFree(newer)
    statuses = [s for s in runner.statuses() if s is not None]
    return {
        "nvml_util_median": statistics.median(utils),
        "nvml_util_min": min(utils),
        "nvml_util_max": max(utils),
        "sm_clock_mhz_median": statistics.median(clocks),
        "gpm": gpm,
        "worker_duty": [s["duty"] for s in statuses],
        "worker_sm_clock_mhz": [round(s["sm_clock_hz"] / 1e6) for s in statuses],
        "memory_used_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).used),
        "process_memory": {str(k): v for k, v in process_memory(handle, runner.pids).items()},
    }


def device_handle(uuid: str) -> Any:
    for prefix in ("GPU-", "MIG-"):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(prefix + uuid)
        except pynvml.NVMLError:
            continue
    raise SystemExit(f"NVML has no device with CUDA UUID {uuid}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--settle", type=float, default=1.5)
    parser.add_argument("--window", type=float, default=3.0)
    parser.add_argument("--device", default="0")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    pynvml.nvmlInit()
    report: dict[str, Any] = {
        "driver": pynvml.nvmlSystemGetDriverVersion(),
        "nvml_py": getattr(pynvml, "__version__", None),
        "python": platform.python_version(),
        "command": " ".join(sys.argv),
        "settle_s": args.settle,
        "window_s": args.window,
        "steps": [],
    }
    base_spec = LoadSpec(duty=0.0, memory_bytes=GIB, device=args.device)
    t_start = time.monotonic()
    with LoadRunner(base_spec, status_interval_s=0.5) as runner:
        worker = runner.workers[0]
        handle = device_handle(worker.uuid)
        report["device"] = {
            "name": pynvml.nvmlDeviceGetName(handle),
            "uuid": pynvml.nvmlDeviceGetUUID(handle),
            "sm_count": worker.sm_count,
            "compute_capability": worker.compute_capability,
            "gpm_supported": bool(pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice),
            "calibrated_sm_clock_mhz": round(worker.sm_clock_hz / 1e6),
            "cuda_core": worker.ready_event.get("cuda_core"),
            "globaltimer_ok": worker.ready_event.get("globaltimer_ok"),
        }
        report["startup_s"] = round(time.monotonic() - t_start, 2)
        print(json.dumps(report["device"]), flush=True)
        for label, changes, want_util, want_sm in LADDER:
            runner.update(**changes)
            spec = runner.spec
            row = {
                "label": label,
                "kernel": spec.kernel,
                "duty": spec.duty,
                "sm_fraction": spec.sm_fraction,
                "warps_per_block": spec.warps_per_block,
                "blocks": blocks_for(spec.sm_fraction, worker.sm_count),
                "expected_nvml_util": want_util,
                "expected_gpm_sm_util": want_sm,
                **measure(handle, runner, args.settle, args.window),
            }
            report["steps"].append(row)
            print(json.dumps(row), flush=True)
        pid = runner.pids[0]
    time.sleep(1.0)
    report["after_stop_single"] = {
        "process_memory": process_memory(handle, [pid]),
        "memory_used_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).used),
    }

    two = LoadSpec(duty=0.5, memory_bytes=2 * GIB, processes=2, device=args.device)
    with LoadRunner(two, status_interval_s=0.5) as runner:
        pids = runner.pids
        row = {"label": "2 processes, duty 0.5 each, 2 GiB total", "pids": pids}
        row.update(measure(handle, runner, args.settle, args.window))
        report["two_processes"] = row
        print(json.dumps(row), flush=True)
    time.sleep(1.0)
    report["after_stop_two"] = {
        "process_memory": {str(k): v for k, v in process_memory(handle, pids).items()},
        "memory_used_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).used),
    }
    print(json.dumps(report["after_stop_two"]), flush=True)
    pynvml.nvmlShutdown()

    (args.out / "loadgen-device.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "loadgen-device-table.md").write_text(table(report))
    print(table(report))
    return 0


def table(report: dict[str, Any]) -> str:
    lines = [
        "| step | blocks | NVML util (exp) | GPM SM util (exp) | occupancy | any tensor | HMMA "
        "| DRAM BW | FP32 | worker duty | SM MHz |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in report["steps"]:
        g = s["gpm"]
        duty = statistics.median(s["worker_duty"]) if s["worker_duty"] else None
        lines.append(
            f"| {s['label']} | {s['blocks']} | {s['nvml_util_median']} ({s['expected_nvml_util']}) "
            f"| {g['sm_util']} ({s['expected_gpm_sm_util']}) | {g['sm_occupancy']} "
            f"| {g['any_tensor_util']} | {g['hmma_tensor_util']} | {g['dram_bw_util']} "
            f"| {g['fp32_util']} | {duty} | {s['sm_clock_mhz_median']} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
