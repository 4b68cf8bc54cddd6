"""What NVML's per-process utilization says while two processes share a GPU (a diagnostic).

From the repository root on a GPU host with the [load] extra::

    python3 bench/device/process_samples.py --seconds 12 > samples.jsonl

Starts two ``vgpumon load`` processes at ``--duties`` on GPU ``--device``, waits for their
warm-up, then once a second prints one JSON line: the compute processes NVML lists, the entries
of ``nvmlDeviceGetProcessUtilization`` asked from one second back, from the newest timestamp
seen (vgpumon's cursor) and from 0 (the whole buffer), those of
``nvmlDeviceGetProcessesUtilizationInfo``, and the GPU's own utilization samples.
docs/metering.md says what it showed and what follows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

import pynvml


def entries(call: Any, handle: Any, since: int) -> list[tuple[int, int, int, int]] | str:
    try:
        return [(s.pid, s.timeStamp, s.smUtil, s.memUtil) for s in call(handle, since)]
    except pynvml.NVMLError as err:
        return str(err)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duties", default="0.3,0.5", help="one load process per duty")
    p.add_argument("--seconds", type=int, default=12, help="lines to print, one a second")
    p.add_argument("--device", type=int, default=0)
    args = p.parse_args()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(args.device)
    run_for = f"{args.seconds + 20}s"
    load = [sys.executable, "-m", "vgpumon.cli", "load", "--memory", "512MiB"]
    load += ["--device", str(args.device), "--duration", run_for]
    loads = [
        subprocess.Popen(
            [*load, "--duty", duty],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for duty in args.duties.split(",")
    ]
    try:
        time.sleep(12)  # CUDA start-up and the load's warm-up
        cursor: int | None = None
        for _ in range(args.seconds):
            now = time.time()
            back = int((now - 1.0) * 1_000_000)
            util = {
                "now-1s": entries(pynvml.nvmlDeviceGetProcessUtilization, handle, back),
                "cursor": entries(pynvml.nvmlDeviceGetProcessUtilization, handle, cursor or back),
                "zero": entries(pynvml.nvmlDeviceGetProcessUtilization, handle, 0),
                "info_v1": entries(pynvml.nvmlDeviceGetProcessesUtilizationInfo, handle, back),
            }
            if isinstance(util["cursor"], list) and util["cursor"]:
                cursor = max(stamp for _, stamp, _, _ in util["cursor"])
            procs = [
                (p.pid, p.usedGpuMemory)
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            ]
            try:
                _, samples = pynvml.nvmlDeviceGetSamples(handle, 1, int((now - 1.2) * 1e6))
                gpu: Any = [(s.timeStamp, s.sampleValue.uiVal) for s in samples]
            except pynvml.NVMLError as err:
                gpu = str(err)
            line = {"t": now, "procs": procs, "util": util, "gpu_samples": gpu}
            print(json.dumps(line), flush=True)
            time.sleep(1.0)
    finally:
        for load in loads:
            load.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
