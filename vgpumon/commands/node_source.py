"""Where ``node-features`` and ``check`` get this node's snapshot: the local NVML, or a running
exporter (``--url``), whose snapshot also carries what only a long-running sampler sees (Xids
since it started, license changes)."""

from __future__ import annotations

import argparse
import asyncio

from vgpumon.commands.common import (
    add_connection_arguments,
    add_nvml_arguments,
    connection_from_args,
    session_from_args,
)
from vgpumon.config.checks import MAX_SECONDS
from vgpumon.model import Snapshot
from vgpumon.units import for_flag, parse_duration


def add_arguments(parser: argparse.ArgumentParser, command: str, *, window_default: str) -> None:
    add_nvml_arguments(parser, command)
    parser.add_argument(
        "--url",
        metavar="URL",
        help="read a running exporter's snapshot (http://HOST:PORT) instead of the local NVML",
    )
    parser.add_argument(
        "--window",
        default=window_default,
        metavar="DURATION",
        help="local NVML only: watch this long and sample again, so events in between (Xids) "
        f"are seen; 0 samples once (default {window_default})",
    )
    add_connection_arguments(parser)


def _window(args: argparse.Namespace) -> float:
    return for_flag("--window", parse_duration, str(args.window), lo=0.0, hi=MAX_SECONDS)


async def _local(args: argparse.Namespace, window: float) -> Snapshot:
    from vgpumon.collect.base import SamplerConfig
    from vgpumon.collect.sampler import Sampler

    sampler = Sampler(session_from_args(args), SamplerConfig())
    try:
        snapshot = await sampler.cycle()
        if window > 0 and not snapshot.health.wedged:
            await asyncio.sleep(window)
            snapshot = await sampler.cycle()
        return snapshot
    finally:
        sampler.close()


async def _remote(args: argparse.Namespace) -> Snapshot:
    from vgpumon.sources.remote import ExporterClient, RemoteTarget

    client = ExporterClient(RemoteTarget(args.url), connection_from_args(args))
    try:
        return await client.snapshot()
    finally:
        await client.close()


def node_snapshot(args: argparse.Namespace) -> Snapshot:
    """The snapshot the flags name; a bad flag or a failed read raises a VgpumonError."""
    window = _window(args)  # checked first: a typo costs no NVML start
    if args.url:
        if args.sim or args.nvml_module:
            from vgpumon.errors import ConfigError

            raise ConfigError("--url reads an exporter: it does not go with --sim/--nvml-module")
        return asyncio.run(_remote(args))
    return asyncio.run(_local(args, window))
