"""Write this node's GPU facts as a node-feature-discovery local feature file.

nfd-worker turns each ``vgpumon.io/NAME=VALUE`` line into a node label: virtualization mode, GPU
model, license state (ok, unlicensed, expiring: a lease not renewed when due) and how many more
instances of each vGPU type and MIG profile fit now. Point --output into NFD's features.d directory
(/etc/kubernetes/node-feature-discovery/features.d/); the file is replaced atomically and only
when a value changed. ``vgpumon serve --kubernetes.nfd-features-file FILE`` keeps it current.
"""

from __future__ import annotations

import argparse
import sys

from vgpumon.commands import node_source
from vgpumon.errors import ConfigError, one_line
from vgpumon.nodefeatures import FeatureFileWriter, node_features, render

# A license's expiry is its lease's end, which a healthy guest renews: "expiring" is the
# collector's verdict, a lease not renewed when due (docs/licensing.md), not a time window.
RETIRED_EXPIRING = (
    "--license-expiring-within no longer applies and is ignored: a license is expiring when "
    "its lease was not renewed when due (docs/licensing.md)"
)


def add_expiring_argument(parser: argparse.ArgumentParser) -> None:
    """The retired flag: still accepted, so that a unit or a chart that passes it keeps
    working, and said to be ignored."""
    parser.add_argument(
        "--license-expiring-within",
        dest="license_expiring_within",
        default=None,
        metavar="DURATION",
        help=argparse.SUPPRESS,
    )


def warn_retired(args: argparse.Namespace) -> None:
    if getattr(args, "license_expiring_within", None) is not None:
        sys.stderr.write(f"vgpumon: warning: {RETIRED_EXPIRING}\n")


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
    warn_retired(args)
    if args.output != "-":
        writer = FeatureFileWriter(args.output)  # checked before NVML starts
        if not writer.path.parent.is_dir():
            raise ConfigError(f"--output: no directory {str(writer.path.parent)!r}")
    snapshot = node_source.node_snapshot(args)
    text = render(node_features(snapshot))
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        changed = writer.write(text)
    except OSError as exc:
        raise ConfigError(f"cannot write {args.output!r}: {one_line(exc)}") from None
    print(f"{args.output}: {'written' if changed else 'unchanged'}")
    return 0
