"""The ``--ssh.*`` flags of the commands that read agentless hosts (``serve``, ``top``).

One definition (the rows of :mod:`vgpumon.config.table`), so every command names, checks and
defaults them the same way. The flags' dests are the serve settings' field names
(``vgpumon.config.serve.ServeSettings.ssh_*``, also the ``ssh:`` section of the config file), so
:func:`ssh_settings_from` reads either an argparse namespace (``top``) or merged serve settings
(file, environment, then flags); the checks are the config file's, one line per mistake.
"""

from __future__ import annotations

import argparse
from typing import Any

from vgpumon.config.flags import add_flags, flag_values
from vgpumon.config.table import rows_for
from vgpumon.errors import ConfigError
from vgpumon.sources.ssh_targets import (
    SshSettings,
    parse_target,
    read_targets_file,
    unique_targets,
)

# The rows of the serve settings table that describe agentless hosts (vgpumon.config.table).
SSH_ROWS = rows_for("top", "agentless hosts")


def add_ssh_arguments(parser: argparse.ArgumentParser) -> None:
    """Agentless hosts: ``nvidia-smi`` over SSH instead of NVML in this process (``top``; serve
    adds them with the rest of its table)."""
    add_flags(parser, SSH_ROWS, env=False)


def ssh_flag_values(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--ssh.*`` flags given, checked, by settings field."""
    return flag_values(args, SSH_ROWS)


def ssh_settings_from(values: Any, command: str) -> SshSettings | None:
    """Agentless settings from anything with the ``ssh_*`` fields (namespace or serve settings);
    None when no target is given."""
    checked = ssh_flag_values(values) if isinstance(values, argparse.Namespace) else None

    def get(name: str) -> Any:
        return checked.get(name) if checked is not None else getattr(values, name, None)

    # Each value was checked where it was given (flag, variable or file line), the files
    # included: readable now, or the start fails naming the flag, variable or line.
    targets = [parse_target(t) for t in get("ssh_targets") or ()]
    if get("ssh_targets_file"):
        targets.extend(read_targets_file(get("ssh_targets_file")))
    if not targets:
        return None
    if getattr(values, "sim", None) or getattr(values, "nvml_module", None):
        raise ConfigError(
            f"{command}: agentless hosts (ssh.targets) are read over SSH; they cannot be "
            "combined with an NVML source here (sim, nvml_module)"
        )
    defaults = SshSettings(targets=())

    def pick(name: str, default: Any) -> Any:
        value = get(name)
        return default if value is None else value

    return SshSettings(
        targets=unique_targets(targets),
        identity_files=tuple(get("ssh_identity_files") or ()),
        known_hosts=get("ssh_known_hosts"),
        timeout_seconds=pick("ssh_timeout_seconds", defaults.timeout_seconds),
        max_sessions=pick("ssh_max_sessions", defaults.max_sessions),
        interval_seconds=pick("ssh_interval_seconds", defaults.interval_seconds),
        nvidia_smi=pick("ssh_nvidia_smi", defaults.nvidia_smi),
        default_user=get("ssh_user"),
    )
