"""The ``--ssh`` flags of the commands that read agentless hosts (``serve``, ``top``).

One definition, so every command names, checks and defaults them the same way; the checks are the
serve config file's (one line per mistake).
"""

from __future__ import annotations

import argparse

from vgpumon.config.serve import check_count, check_interval, check_timeout
from vgpumon.errors import ConfigError
from vgpumon.sources.base import SnapshotSource
from vgpumon.sources.ssh_targets import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_NVIDIA_SMI,
    DEFAULT_TIMEOUT_SECONDS,
    SshSettings,
    parse_target,
    read_targets_file,
    unique_targets,
)


def add_ssh_arguments(parser: argparse.ArgumentParser) -> None:
    """Agentless hosts: ``nvidia-smi`` over SSH instead of NVML in this process."""
    ssh = parser.add_argument_group(
        "agentless hosts (nvidia-smi over SSH; README: ESXi and other hosts you cannot install on)"
    )
    ssh.add_argument(
        "--ssh",
        action="append",
        metavar="[USER@]HOST[:PORT]",
        help="export this host's GPUs from its nvidia-smi over SSH (repeatable); "
        "every series gets host=HOST",
    )
    ssh.add_argument("--ssh-targets", metavar="FILE", help="more targets, one per line")
    ssh.add_argument("--ssh-user", metavar="USER", help="user for targets without USER@")
    ssh.add_argument(
        "--ssh-identity",
        action="append",
        metavar="FILE",
        help="private key file (repeatable; default: the SSH agent and ~/.ssh keys)",
    )
    ssh.add_argument(
        "--ssh-known-hosts",
        metavar="FILE",
        help="known_hosts file with every host's key (default ~/.ssh/known_hosts); "
        "unknown or changed keys fail the host",
    )
    ssh.add_argument(
        "--ssh-timeout",
        metavar="SECONDS",
        help=f"per host and poll, connecting included (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    ssh.add_argument(
        "--ssh-max-sessions",
        metavar="N",
        help=f"hosts polled at once (default {DEFAULT_MAX_SESSIONS})",
    )
    ssh.add_argument(
        "--ssh-interval",
        metavar="SECONDS",
        help=f"time between polls of one host (default {DEFAULT_INTERVAL_SECONDS:g})",
    )
    ssh.add_argument(
        "--ssh-nvidia-smi",
        metavar="PATH",
        help=f"nvidia-smi on the hosts (default {DEFAULT_NVIDIA_SMI}, found on the PATH)",
    )


def ssh_settings_from_args(args: argparse.Namespace, command: str) -> SshSettings | None:
    """The agentless settings, or None when no --ssh/--ssh-targets was given."""
    targets = [parse_target(t) for t in getattr(args, "ssh", None) or ()]
    if getattr(args, "ssh_targets", None):
        targets.extend(read_targets_file(args.ssh_targets))
    if not targets:
        return None
    if getattr(args, "sim", None) or getattr(args, "nvml_module", None):
        raise ConfigError(
            f"{command}: --ssh reads remote nvidia-smi; it cannot be combined with --sim"
        )
    defaults = SshSettings(targets=())
    return SshSettings(
        targets=unique_targets(targets),
        identity_files=tuple(args.ssh_identity or ()),
        known_hosts=args.ssh_known_hosts,
        timeout_seconds=(
            check_timeout(args.ssh_timeout, "--ssh-timeout")
            if args.ssh_timeout is not None
            else defaults.timeout_seconds
        ),
        max_sessions=(
            check_count(args.ssh_max_sessions, "--ssh-max-sessions")
            if args.ssh_max_sessions is not None
            else defaults.max_sessions
        ),
        interval_seconds=(
            check_interval(args.ssh_interval, "--ssh-interval")
            if args.ssh_interval is not None
            else defaults.interval_seconds
        ),
        nvidia_smi=args.ssh_nvidia_smi or defaults.nvidia_smi,
        default_user=args.ssh_user,
    )


def ssh_source_from_args(args: argparse.Namespace, command: str) -> SnapshotSource | None:
    """The agentless source the flags describe (``top --ssh``), or None without ``--ssh``."""
    settings = ssh_settings_from_args(args, command)
    if settings is None:
        return None
    from vgpumon.sources.ssh import SshSource

    return SshSource(settings)
