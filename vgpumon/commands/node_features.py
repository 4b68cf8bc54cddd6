"""Write this node's GPU facts as a node-feature-discovery local feature file.

nfd-worker turns each ``vgpumon.io/NAME=VALUE`` line into a node label: virtualization mode, GPU
model, license state (ok, unlicensed, expiring) and how many more instances of each vGPU type
and MIG profile fit now. Point --output into NFD's features.d directory
(/etc/kubernetes/node-feature-discovery/features.d/); the file is replaced atomically and only
when a value changed. ``vgpumon serve --kubernetes.nfd-features-file FILE`` keeps it current.
"""

from __future__ import annotations

import argparse
import sys

from vgpumon.commands import node_source
from vgpumon.errors import ConfigError, one_line
from vgpumon.nodefeatures import DEFAULT_EXPIRING_SECONDS, FeatureFileWriter, node_features, render
from vgpumon.units import for_flag, parse_duration

MAX_EXPIRING_SECONDS = 366 * 86400.0


def add_expiring_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--license-expiring-within",
        dest="license_expiring_within",
        default="168h",
        metavar="DURATION",
        help="a license that ends within this time counts as expiring (default 168h, a week)",
    )


def expiring_seconds(args: argparse.Namespace) -> float:
    text = getattr(args, "license_expiring_within", None)
    if text is None:
        return DEFAULT_EXPIRING_SECONDS
    return for_flag(
        "--license-expiring-within", parse_duration, str(text), lo=0.0, hi=MAX_EXPIRING_SECONDS
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--output",
        default="-",
        metavar="FILE",
        help="the features file to write (default '-': print to standard output)",
    )
    add_expiring_argument(parser)
    node_source.add_arguments(parser, "node-features", window_default="0")


def run(args: argparse.Namespace) -> int:
    expiring = expiring_seconds(args)
    if args.output != "-":
        writer = FeatureFileWriter(args.output)  # checked before NVML starts
        if not writer.path.parent.is_dir():
            raise ConfigError(f"--output: no directory {str(writer.path.parent)!r}")
    snapshot = node_source.node_snapshot(args)
    text = render(node_features(snapshot, expiring_seconds=expiring))
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        changed = writer.write(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.output!r}: {one_line(exc)}") from None
    print(f"{args.output}: {'written' if changed else 'unchanged'}")
    return 0
