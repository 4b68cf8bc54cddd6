"""Does NVML's GPM survive two processes sampling the same GPUs? (a real-GPU diagnostic)

Each process allocates two GPM samples per GPU, then every ``--period`` seconds takes a sample
and computes the metrics between it and the previous one (what vgpumon's ``gpm`` reader does),
for ``--seconds``. Run it alone and as several processes at once and compare exit statuses:

    python3 bench/device/gpm_concurrency.py --seconds 15 &
    python3 bench/device/gpm_concurrency.py --seconds 15 &
    wait

``--threads`` reads each GPU from its own thread, as vgpumon's parallel dispatch does, and
``--vgpumon-ids`` asks for the metric ids vgpumon's ``gpm`` reader asks for instead of five.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import pynvml as n

METRICS = (1, 2, 5, 10, 20)  # graphics, SM activity, SM occupancy, DRAM BW, ... (a few ids)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--no-metrics", action="store_true", help="sample only, never MetricsGet")
    p.add_argument("--threads", action="store_true", help="one thread per GPU, in parallel")
    p.add_argument("--vgpumon-ids", action="store_true", help="vgpumon's metric ids")
    args = p.parse_args()
    ids = METRICS
    if args.vgpumon_ids:
        from vgpumon.collect.gpm import METRIC_IDS

        ids = METRIC_IDS
    n.nvmlInit()
    handles = [n.nvmlDeviceGetHandleByIndex(i) for i in range(n.nvmlDeviceGetCount())]
    samples = [[n.nvmlGpmSampleAlloc(), n.nvmlGpmSampleAlloc()] for _ in handles]
    newer: list[object] = [None] * len(handles)
    counts = {"gets": 0, "metrics": 0, "errors": 0}
    end = time.monotonic() + args.seconds

    def loop(indices: list[int]) -> None:
        while time.monotonic() < end:
            for i in indices:
                read(i)
            time.sleep(args.period)

    def read(i: int) -> None:
        h = handles[i]
        target = samples[i][0] if newer[i] is not samples[i][0] else samples[i][1]
        try:
            n.nvmlGpmSampleGet(h, target)
            counts["gets"] += 1
        except n.NVMLError as err:
            counts["errors"] += 1
            print(f"pid {os.getpid()} gpu {i} SampleGet: {err}", flush=True)
            return
        if newer[i] is not None and not args.no_metrics:
            req = n.c_nvmlGpmMetricsGet_t()
            req.version = n.NVML_GPM_METRICS_GET_VERSION
            req.numMetrics = len(ids)
            req.sample1, req.sample2 = newer[i], target
            for k, m in enumerate(ids):
                req.metrics[k].metricId = m
            try:
                n.nvmlGpmMetricsGet(req)
                counts["metrics"] += 1
            except n.NVMLError as err:
                counts["errors"] += 1
                print(f"pid {os.getpid()} gpu {i} MetricsGet: {err}", flush=True)
        newer[i] = target

    if args.threads:
        threads = [threading.Thread(target=loop, args=([i],)) for i in range(len(handles))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        loop(list(range(len(handles))))
    print(
        f"pid {os.getpid()} ok: {counts['gets']} samples, {counts['metrics']} metric sets, "
        f"{counts['errors']} errors"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
