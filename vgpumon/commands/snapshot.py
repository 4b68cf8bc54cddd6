"""Sample the host once and print what NVML reports: a table, JSON, or the /metrics exposition.

Values that need two samples (GPM activity) come from a second cycle taken --interval seconds
after the first; everything else is read once. At a terminal the tables fit its width; piped or
redirected they are as wide as their content, so no value is ever cut.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from vgpumon.collect import SamplerConfig, take_snapshot
from vgpumon.collect.registry import collector_names
from vgpumon.commands import names
from vgpumon.commands.common import add_nvml_arguments, session_from_args
from vgpumon.config.checks import MAX_SECONDS
from vgpumon.errors import ConfigError
from vgpumon.model import Snapshot, to_json
from vgpumon.units import for_flag, parse_duration

FORMATS = ("table", "json", "openmetrics")
ALWAYS = "device"  # identity and modes: every other reader depends on them


def add_snapshot_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The sampling flags shared by ``snapshot`` and ``record``."""
    add_nvml_arguments(parser, command)
    names.add_arguments(parser, command)
    parser.add_argument(
        "--interval",
        default="1",
        metavar="DURATION",
        help="time between the two cycles when a reading needs two samples: seconds or a "
        "duration such as 500ms (default 1)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_snapshot_arguments(parser, "snapshot")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the snapshot as JSON")
    out.add_argument(
        "--format", choices=FORMATS, default="table", help="output format (default table)"
    )
    parser.add_argument(
        "--collector",
        action="extend",
        nargs="+",
        default=None,
        metavar="NAME",
        help="read only these collectors (repeatable; 'device' is always read)",
    )


def config_from_args(args: argparse.Namespace) -> SamplerConfig:
    # The one units grammar (``500ms``, ``2s``); 0 takes a single cycle, a day is the most.
    interval = for_flag("--interval", parse_duration, str(args.interval), lo=0.0, hi=MAX_SECONDS)
    names = getattr(args, "collector", None)
    collectors = None
    if names:
        known = collector_names()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ConfigError(f"unknown collector {', '.join(unknown)}; known: {', '.join(known)}")
        collectors = frozenset([ALWAYS, *names])
    return SamplerConfig(interval_seconds=interval, collectors=collectors)


def snapshot_from_args(args: argparse.Namespace) -> Snapshot:
    config = config_from_args(args)
    enrichers = names.from_args(args)
    session = session_from_args(args)
    return asyncio.run(
        take_snapshot(session, interval=config.interval_seconds, config=config, enrichers=enrichers)
    )


def run(args: argparse.Namespace) -> int:
    fmt = "json" if args.json else args.format
    snapshot = snapshot_from_args(args)
    if fmt == "json":
        sys.stdout.write(to_json(snapshot, indent=2) + "\n")
    elif fmt == "openmetrics":
        from vgpumon.metrics.exposition import render as render_exposition

        sys.stdout.flush()
        sys.stdout.buffer.write(render_exposition(snapshot, openmetrics=True))
        sys.stdout.buffer.flush()
    else:
        from vgpumon.view.render import render

        render(snapshot)
    return 0
