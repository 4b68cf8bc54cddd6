"""The ``--ssh`` flags of the commands that read agentless hosts (``serve``, ``top``).

One definition, so every command names, checks and defaults them the same way. The flags' dests
are the serve settings' field names (``vgpumon.config.serve.ServeSettings.ssh_*``, also the
``ssh:`` section of the config file), so :func:`ssh_settings_from` reads either an argparse
namespace (``top``) or merged serve settings (file, then flags); the checks are the config
file's, one line per mistake.
"""

from __future__ import annotations

import argparse
from typing import Any

from vgpumon.config.serve import (
    check_count,
    check_interval,
    check_text,
    check_texts,
    check_timeout,
)
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

# settings field -> (flag, check): what serve merges with its config file.
SSH_FLAGS: dict[str, tuple[str, Any]] = {
    "ssh_targets": ("--ssh", check_texts),
    "ssh_targets_file": ("--ssh-targets", check_text),
    "ssh_user": ("--ssh-user", check_text),
    "ssh_identity_files": ("--ssh-identity", check_texts),
    "ssh_known_hosts": ("--ssh-known-hosts", check_text),
    "ssh_timeout_seconds": ("--ssh-timeout", check_timeout),
    "ssh_interval_seconds": ("--ssh-interval", check_interval),
    "ssh_max_sessions": ("--ssh-max-sessions", check_count),
    "ssh_nvidia_smi": ("--ssh-nvidia-smi", check_text),
}


def add_ssh_arguments(parser: argparse.ArgumentParser) -> None:
    """Agentless hosts: ``nvidia-smi`` over SSH instead of NVML in this process."""
    ssh = parser.add_argument_group(
        "agentless hosts (nvidia-smi over SSH; README: ESXi and other hosts you cannot install on)"
    )
    ssh.add_argument(
        "--ssh",
        dest="ssh_targets",
        action="append",
        metavar="[USER@]HOST[:PORT]",
        help="read this host's GPUs from its nvidia-smi over SSH (repeatable); "
        "every series gets host=HOST",
    )
    ssh.add_argument(
        "--ssh-targets", dest="ssh_targets_file", metavar="FILE", help="more targets, one per line"
    )
    ssh.add_argument(
        "--ssh-user",
        dest="ssh_user",
        metavar="USER",
        help="user for targets without USER@ (default, as for ssh: "
        "the User of ~/.ssh/config, else the local user)",
    )
    ssh.add_argument(
        "--ssh-identity",
        dest="ssh_identity_files",
        action="append",
        metavar="FILE",
        help="private key file (repeatable; default: the SSH agent and ~/.ssh keys)",
    )
    ssh.add_argument(
        "--ssh-known-hosts",
        dest="ssh_known_hosts",
        metavar="FILE",
        help="known_hosts file with every host's key (default ~/.ssh/known_hosts); "
        "unknown or changed keys fail the host",
    )
    ssh.add_argument(
        "--ssh-timeout",
        dest="ssh_timeout_seconds",
        metavar="SECONDS",
        help=f"per host and poll, connecting included (default {DEFAULT_TIMEOUT_SECONDS:g})",
    )
    ssh.add_argument(
        "--ssh-max-sessions",
        dest="ssh_max_sessions",
        metavar="N",
        help=f"hosts polled at once (default {DEFAULT_MAX_SESSIONS})",
    )
    ssh.add_argument(
        "--ssh-interval",
        dest="ssh_interval_seconds",
        metavar="SECONDS",
        help=f"time between polls of one host (default {DEFAULT_INTERVAL_SECONDS:g})",
    )
    ssh.add_argument(
        "--ssh-nvidia-smi",
        dest="ssh_nvidia_smi",
        metavar="PATH",
        help=f"nvidia-smi on the hosts (default {DEFAULT_NVIDIA_SMI}, found on the PATH)",
    )


def ssh_flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--ssh*`` flags given, checked, by settings field (serve merges them over its file)."""
    out: dict[str, Any] = {}
    for field_name, (flag, check) in SSH_FLAGS.items():
        value = getattr(args, field_name, None)
        if value is not None:
            out[field_name] = check(value, flag)
    return out


def ssh_settings_from(values: Any, command: str) -> SshSettings | None:
    """Agentless settings from anything with the ``ssh_*`` fields (namespace or serve settings);
    None when no target is given."""
    checked = ssh_flag_values(values) if isinstance(values, argparse.Namespace) else None

    def get(name: str) -> Any:
        return checked.get(name) if checked is not None else getattr(values, name, None)

    targets = [parse_target(t) for t in get("ssh_targets") or ()]
    if get("ssh_targets_file"):
        targets.extend(read_targets_file(get("ssh_targets_file")))
    if not targets:
        return None
    if getattr(values, "sim", None) or getattr(values, "nvml_module", None):
        raise ConfigError(
            f"{command}: --ssh reads remote nvidia-smi; it cannot be combined with --sim"
        )
    defaults = SshSettings(targets=())

    def pick(name: str, default: Any) -> Any:
        value = get(name)
        return default if value is None else value

    identity_files = tuple(get("ssh_identity_files") or ())
    for path in identity_files:
        _check_readable(path, SSH_FLAGS["ssh_identity_files"][0])
    if get("ssh_known_hosts") is not None:
        _check_readable(get("ssh_known_hosts"), SSH_FLAGS["ssh_known_hosts"][0])
    return SshSettings(
        targets=unique_targets(targets),
        identity_files=identity_files,
        known_hosts=get("ssh_known_hosts"),
        timeout_seconds=pick("ssh_timeout_seconds", defaults.timeout_seconds),
        max_sessions=pick("ssh_max_sessions", defaults.max_sessions),
        interval_seconds=pick("ssh_interval_seconds", defaults.interval_seconds),
        nvidia_smi=pick("ssh_nvidia_smi", defaults.nvidia_smi),
        default_user=get("ssh_user"),
    )


def _check_readable(path: str, flag: str) -> None:
    """A key or known_hosts file that cannot be read is a mistake to report at start (like
    ``--config``): otherwise every poll of every host fails without naming the file."""
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise ConfigError(f"{flag}: cannot read {path}: {err.strerror or err}") from None


def ssh_source_from_args(args: argparse.Namespace, command: str) -> SnapshotSource | None:
    """The agentless source the flags describe (``top --ssh``), or None without ``--ssh``."""
    settings = ssh_settings_from(args, command)
    if settings is None:
        return None
    from vgpumon.sources.ssh import SshSource

    return SshSource(settings)
