"""Run CUDA load with a known duty cycle, SM fraction and memory footprint.

Kernels are compiled at run time with NVRTC (needs the [load] extra: cuda-core and cuda-bindings).
Each period (default 100 ms) a kernel spins for duty × period on round(fraction × SMs) blocks of
one warp each, one block per SM, then the GPU idles; NVML utilization then reads the duty, GPM SM
utilization duty × fraction. --memory is the total across --processes (each holds an equal share).
Ctrl-C or SIGTERM stops the load and frees its memory.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType
from typing import Any

from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.loadgen.spec import KERNELS, LoadSpec
from vgpumon.units import for_flag, format_bytes, parse_duration, parse_ratio, parse_size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duty",
        default="1.0",
        metavar="RATIO",
        help="busy fraction of each period: 0..1 or 0%%..100%% (default 1)",
    )
    parser.add_argument(
        "--sm-fraction",
        default="1.0",
        metavar="RATIO",
        help="fraction of the SMs given one block each, above 0 (default 1: all SMs)",
    )
    parser.add_argument(
        "--memory",
        default="0",
        metavar="SIZE",
        help="device memory to hold, total over all processes, e.g. 512MiB, 4GiB (default 0)",
    )
    parser.add_argument(
        "--kernel",
        choices=KERNELS,
        default="spin",
        help="spin: SM busy only; tensor: mma.sync tensor-core work; stream: DRAM traffic over "
        "the --memory buffer (at least 256MiB per process)",
    )
    parser.add_argument(
        "--duration",
        default=None,
        metavar="DURATION",
        help="stop after this long, e.g. 30s, 5m (default: until Ctrl-C)",
    )
    parser.add_argument(
        "--device",
        default="0",
        metavar="DEVICE",
        help="CUDA index, GPU UUID (GPU-...) or MIG device UUID (MIG-...) (default 0)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        metavar="N",
        help="worker processes, each its own CUDA context (default 1)",
    )
    parser.add_argument(
        "--period", default="100ms", metavar="DURATION", help="duty-cycle period (default 100ms)"
    )
    parser.add_argument(
        "--warps-per-block",
        type=int,
        default=1,
        metavar="N",
        help="warps in each block (default 1)",
    )
    parser.add_argument(
        "--status-interval",
        default="1s",
        metavar="DURATION",
        help="how often each worker reports its measured duty (default 1s; 0 = never)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per line (started with PIDs, ready, status, stopped, exit)",
    )


def spec_from_args(args: argparse.Namespace) -> LoadSpec:
    """The LoadSpec a command line asks for; ConfigError (one line) for anything malformed."""
    duration = (
        None
        if args.duration in (None, "", "0")
        else for_flag("--duration", parse_duration, args.duration)
    )
    if duration is not None and duration <= 0:
        raise ConfigError(f"duration must be positive, got {args.duration!r}")
    return LoadSpec(
        duty=for_flag("--duty", parse_ratio, args.duty),
        sm_fraction=for_flag("--sm-fraction", parse_ratio, args.sm_fraction),
        memory_bytes=for_flag("--memory", parse_size, args.memory),
        kernel=args.kernel,
        duration_s=duration,
        device=str(args.device),
        processes=args.processes,
        period_s=for_flag("--period", parse_duration, args.period),
        warps_per_block=args.warps_per_block,
    ).validate()


class _Printer:
    """Serialises output from the workers' reader threads; JSON lines or short human lines."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self._lock = threading.Lock()

    def event(self, event: dict[str, Any]) -> None:
        if self.as_json:
            self._write(json.dumps(event, separators=(",", ":")))
            return
        kind = event.get("event")
        pid = event.get("pid")
        if kind == "ready":
            self._write(
                f"pid {pid}: {event.get('name')} (uuid {event.get('uuid')}, "
                f"{event.get('sm_count')} SMs, cc {event.get('compute_capability')}): "
                f"{event.get('kernel')} kernel, {event.get('blocks')} blocks x "
                f"{event.get('threads_per_block')} threads, duty {event.get('duty'):g} of "
                f"{float(event.get('period_s', 0)) * 1000:g} ms, "
                f"{format_bytes(int(event.get('memory_bytes', 0)))} held, SM clock "
                f"{float(event.get('sm_clock_hz', 0)) / 1e6:.0f} MHz"
            )
        elif kind == "status":
            self._write(
                f"pid {pid}: duty {event.get('duty'):.3f} (target {event.get('target_duty'):g}), "
                f"SM clock {float(event.get('sm_clock_hz', 0)) / 1e6:.0f} MHz"
            )
        elif kind == "stopped":
            self._write(
                f"pid {pid}: stopped ({event.get('reason')}) after {event.get('elapsed_s')} s, "
                f"mean duty {event.get('duty')}, memory freed"
            )
        elif kind == "output":
            self._write(f"pid {pid}: {event.get('line')}")

    def line(self, payload: dict[str, Any], text: str) -> None:
        """A controller line: the payload in JSON mode, the text (if any) otherwise."""
        if self.as_json:
            self._write(json.dumps(payload, separators=(",", ":")))
        elif text:
            self._write(text)

    def _write(self, text: str) -> None:
        with self._lock:
            print(text, flush=True)


def run(args: argparse.Namespace) -> int:
    from vgpumon.loadgen.runner import LoadRunner

    spec = spec_from_args(args)
    status_interval = for_flag("--status-interval", parse_duration, args.status_interval)
    printer = _Printer(args.json)
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    runner = LoadRunner(spec, status_interval_s=status_interval, on_event=printer.event)
    try:
        try:
            pids = runner.start()
        except VgpumonError as err:
            if args.json:
                printer.line({"event": "error", "message": str(err)}, "")
            raise
        until = "until Ctrl-C" if spec.duration_s is None else f"for {spec.duration_s:g} s"
        printer.line(
            {"event": "started", "pids": pids, "spec": spec.to_dict()},
            f"vgpumon load: {len(pids)} process(es) running {until}: pids "
            + " ".join(str(p) for p in pids),
        )
        try:
            while not stop.is_set() and not runner.wait(0.2):
                pass
        except KeyboardInterrupt:
            pass
    finally:
        runner.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    errors = runner.errors
    clean = all(r is not None for r in runner.results()) and not errors
    code = 0 if clean else 1
    printer.line({"event": "exit", "code": code, "errors": errors}, "")
    if errors and not args.json:
        for message in errors:
            print(f"vgpumon: error: {message}", file=sys.stderr)
    return code
