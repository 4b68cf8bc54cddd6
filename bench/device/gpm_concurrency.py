"""Does NVML's GPM survive two processes sampling the same GPUs? (a real-GPU diagnostic)

Each process allocates two GPM samples per GPU, then every ``--period`` seconds takes a sample
and computes the metrics between it and the previous one (what vgpumon's ``gpm`` reader does),
for ``--seconds``. Run it alone and as several processes at once and compare exit statuses:

    python3 bench/device/gpm_concurrency.py --seconds 15 &
    python3 bench/device/gpm_concurrency.py --seconds 15 &
    wait
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import pynvml as n

METRICS = (1, 2, 5, 10, 20)  # graphics, SM activity, SM occupancy, DRAM BW, ... (a few ids)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--no-metrics", action="store_true", help="sample only, never MetricsGet")
    args = p.parse_args()
    n.nvmlInit()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    samples = [[n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()] for _ in handles]
    newer = [None] * len(handles)
    gets = metrics = errors = 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for i, h in enumerate(handles):
            target = samples[i][0] if newer[i] is not samples[i][0] else samples[i][1]
            try:
                n.nvmlGpmSampleGet(h, target)
                gets += 1
            except n.NVMLError as err:
                errors += 1
                print(f"pid {os.getpid()} gpu {i} SampleGet: {err}", flush=True)
                continue
            if newer[i] is not None and not args.no_metrics:
                req = n.c_nvmlGpmMetricsGet_t()
                req.version = n.NVML_GPM_METRICS_GET_VERSION
                req.numMetrics = len(METRICS)
                req.sample1, req.sample2 = newer[i], target
                for k, m in enumerate(METRICS):
                    req.metrics[k].metricId = m
                try:
                    n.nvmlGpmMetricsGet(req)
                    metrics += 1
                except n.NVMLError as err:
                    errors += 1
                    print(f"pid {os.getpid()} gpu {i} MetricsGet: {err}", flush=True)
            newer[i] = target
        time.sleep(args.period)
    print(f"pid {os.getpid()} ok: {gets} samples, {metrics} metric sets, {errors} errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
