"""Run CUDA load whose effect on every reading is known, and check what vgpumon reads.

A ladder of steps runs on one device (an NVML index, a GPU UUID or a MIG device UUID): idle; duty
0.25, 0.5, 0.75 and 1 on every SM; duty 1 on half and a quarter of the SMs; a larger footprint;
several processes at once. Each step settles, is measured with the readers the exporter uses (or,
with --url, through a running exporter), and compared: NVML utilization against the duty, GPM SM
activity against duty x SM fraction (for a MIG device: its GPU instance's), memory used against
the footprint, the load's PIDs in the process list with their memory, per-process SM utilization.
A reading the device does not give (utilization on MIG, GPM before Hopper or in a vGPU guest) is
skipped with the reason. Exit status: 0 all checks passed or were skipped, 1 a check failed, 2 bad
usage or nothing could be run (no GPU, no cuda-core, exporter unreachable). Needs the [load] extra
(cuda-core), except with --sim, where the simulated device follows the ladder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from typing import Any

from vgpumon.commands.common import (
    add_connection_arguments,
    add_nvml_arguments,
    connection_from_args,
    session_from_args,
)
from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.units import parse_duration, parse_size

DEFAULTS = {
    "settle": "2s",
    "window": "3s",
    "sample_interval": "500ms",
    "tolerance_util": "2",
    "tolerance_gpm": "2",
    "tolerance_process_util": "10",
    "tolerance_memory": "1GiB",
    "memory": "256MiB",
    "memory_step": "1GiB",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_nvml_arguments(parser, "validate")
    parser.add_argument(
        "--device",
        default="0",
        metavar="DEVICE",
        help="NVML index (as 'vgpumon snapshot' numbers GPUs), GPU UUID, or MIG device UUID "
        "(default 0); the load runs on it by UUID",
    )
    parser.add_argument(
        "--steps",
        metavar="LIST",
        help="comma list of steps to run (names, or the groups duty and sm; default all); "
        "--list-steps shows them",
    )
    parser.add_argument("--list-steps", action="store_true", help="print the ladder and exit")
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--settle",
        default=DEFAULTS["settle"],
        metavar="DURATION",
        help="wait after each load change (default 2s)",
    )
    timing.add_argument(
        "--window",
        default=DEFAULTS["window"],
        metavar="DURATION",
        help="measurement window per step; GPM is averaged over it (default 3s)",
    )
    timing.add_argument(
        "--sample-interval",
        default=DEFAULTS["sample_interval"],
        metavar="DURATION",
        help="time between readings in the window (default 500ms; at least 100ms for GPM)",
    )
    tol = parser.add_argument_group("tolerances (percentage points unless noted)")
    tol.add_argument(
        "--tolerance-util",
        default=DEFAULTS["tolerance_util"],
        metavar="PP",
        help="NVML utilization (default 2)",
    )
    tol.add_argument(
        "--tolerance-gpm",
        default=DEFAULTS["tolerance_gpm"],
        metavar="PP",
        help="GPM SM activity (default 2)",
    )
    tol.add_argument(
        "--tolerance-process-util",
        default=DEFAULTS["tolerance_process_util"],
        metavar="PP",
        help="per-process SM utilization, sampled coarsely by NVML (default 10)",
    )
    tol.add_argument(
        "--tolerance-memory",
        default=DEFAULTS["tolerance_memory"],
        metavar="SIZE",
        help="memory each process may hold beyond its footprint: its CUDA context "
        "(default 1GiB; what contexts were seen to hold: docs/measurements.md)",
    )
    load = parser.add_argument_group("load")
    load.add_argument(
        "--memory",
        default=DEFAULTS["memory"],
        metavar="SIZE",
        help="footprint of the duty and SM steps, and of each process of the multi-process "
        "step (default 256MiB)",
    )
    load.add_argument(
        "--memory-step",
        default=DEFAULTS["memory_step"],
        metavar="SIZE",
        help="footprint of the memory step (default 1GiB)",
    )
    load.add_argument(
        "--processes",
        type=int,
        default=2,
        metavar="N",
        help="processes in the multi-process step (default 2)",
    )
    remote = parser.add_argument_group("through a running exporter")
    remote.add_argument(
        "--url",
        metavar="URL",
        help="read a running 'vgpumon serve' at http://HOST:PORT instead of sampling here; "
        "--device then names the GPU as that exporter does",
    )
    remote.add_argument(
        "--via",
        choices=("metrics", "snapshot"),
        default="metrics",
        help="read the exporter's /metrics (default) or its /api/v1/snapshot JSON",
    )
    remote.add_argument(
        "--load-device",
        metavar="DEVICE",
        help="with --url: where the load runs as this machine's CUDA names it (default: the "
        "target's UUID; give an index inside a VM whose GPU has another UUID)",
    )
    add_connection_arguments(parser)
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the report as JSON")
    out.add_argument(
        "--no-progress", action="store_true", help="no live display on the terminal (stderr)"
    )


CONNECTION_FLAGS = (
    ("--ca-file", "ca_file"),
    ("--insecure", "insecure"),
    ("--username", "username"),
    ("--password-file", "password_file"),
    ("--password-env", "password_env"),
)


def parse_points(text: str, flag: str) -> float:
    """Percentage points (``2``, ``2pp``, ``2%``) as a ratio (0.02)."""
    raw = str(text).strip().lower()
    for suffix in ("pp", "%"):
        if raw.endswith(suffix):
            raw = raw[: -len(suffix)].strip()
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"bad {flag} {text!r}: give percentage points, e.g. 2 or 2pp") from None
    if not 0.0 <= value <= 100.0:
        raise ConfigError(f"{flag} must be between 0 and 100 percentage points, got {text}")
    return value / 100.0


def plan_from_args(args: argparse.Namespace) -> Any:
    from vgpumon.validate.run import Plan, Timing
    from vgpumon.validate.steps import Tolerances, default_ladder, select_steps

    timing = Timing(
        settle_s=parse_duration(args.settle),
        window_s=parse_duration(args.window),
        sample_interval_s=parse_duration(args.sample_interval),
    ).validate()
    tolerances = Tolerances(
        utilization=parse_points(args.tolerance_util, "--tolerance-util"),
        gpm=parse_points(args.tolerance_gpm, "--tolerance-gpm"),
        process_utilization=parse_points(args.tolerance_process_util, "--tolerance-process-util"),
        context_bytes=parse_size(args.tolerance_memory),
    ).validate()
    ladder = default_ladder(
        memory_bytes=parse_size(args.memory),
        memory_step_bytes=parse_size(args.memory_step),
        processes=args.processes,
    )
    remote = args.url is not None
    return Plan(
        device=str(args.device),
        steps=select_steps(ladder, args.steps),
        timing=timing,
        tolerances=tolerances,
        check_load_device=not (remote and args.load_device is not None),
        pids_may_differ=remote,
    )


def _list_steps(args: argparse.Namespace) -> int:
    from vgpumon.validate.steps import default_ladder

    ladder = default_ladder(
        memory_bytes=parse_size(args.memory),
        memory_step_bytes=parse_size(args.memory_step),
        processes=args.processes,
    )
    width = max(len(s.name) for s in ladder)
    for step in ladder:
        print(f"{step.name:<{width}}  {step.description}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list_steps:
        return _list_steps(args)
    if args.url is not None and (args.sim or args.nvml_module):
        raise ConfigError(
            "--url reads a running exporter: it does not go with --sim or --nvml-module"
        )
    if args.load_device is not None and args.url is None:
        raise ConfigError("--load-device only applies with --url (otherwise --device is used)")
    if args.url is None:
        given = [flag for flag, dest in CONNECTION_FLAGS if getattr(args, dest)]
        if given:
            raise ConfigError(f"{given[0]} only applies with --url")
    plan = plan_from_args(args)
    return asyncio.run(_run(args, plan))


async def _run(args: argparse.Namespace, plan: Any) -> int:
    from vgpumon.validate.display import RichProgress, print_report
    from vgpumon.validate.drivers import RunnerDriver, SimDriver
    from vgpumon.validate.readings import Target
    from vgpumon.validate.report import report_json
    from vgpumon.validate.run import Progress, Validation
    from vgpumon.validate.sources import ExporterSource, SamplerSource

    if args.url is not None:
        source: Any = ExporterSource(args.url, via=args.via, connection=connection_from_args(args))
    else:
        from vgpumon.validate.sources import in_process_config

        session = session_from_args(args)
        source = SamplerSource(session, config=in_process_config(plan.timing.sample_interval_s))

    def driver_for(target: Target) -> Any:
        # Called once the readings work and the target is known, so "no GPU" or "exporter
        # unreachable" is what a user without either hears first.
        if args.sim:
            return SimDriver(source.session.module, target)
        from vgpumon.install_hints import install_hint
        from vgpumon.loadgen.runner import cuda_core_installed

        if not cuda_core_installed():
            raise VgpumonError(
                f"validate runs CUDA load and cuda-core is not installed: {install_hint('load')}"
            )
        return RunnerDriver(args.load_device or target.load_device)

    progress: Progress = Progress()
    display: Any = None
    if not args.no_progress and sys.stderr.isatty():
        progress = display = RichProgress()
    validation = Validation(plan, source, driver_for, progress=progress)
    with display or contextlib.nullcontext():
        report = await validation.run()
    if args.json:
        sys.stdout.write(report_json(report) + "\n")
    else:
        # A pipe or a file gets the table at a width where its rows stay on one line each.
        print_report(report, width=None if sys.stdout.isatty() else 150)
    return report.exit_code
