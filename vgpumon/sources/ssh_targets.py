"""Who to reach over SSH and how: targets from ``--ssh.targets HOST`` and
``--ssh.targets-file FILE`` (or the same settings in the config file and the environment).

A target is ``[user@]host[:port]`` (IPv6 literals in brackets: ``[fe80::1]:22``). The targets file
holds one target per line; blank lines and ``#`` comments are skipped. Authentication is by key only
(an identity file or the SSH agent) and every host key must be in a known_hosts file: a changed
or unknown host key is a failed host, never a prompt and never a silent accept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from vgpumon.errors import ConfigError

DEFAULT_NVIDIA_SMI = "nvidia-smi"
DEFAULT_TIMEOUT_SECONDS = 10.0
DEFAULT_MAX_SESSIONS = 8
# nvidia-smi takes a second or more on a large host and each poll is an SSH login (logged by the
# host): a Prometheus-like 15 s is the natural period, not the NVML sampler's 1 s.
DEFAULT_INTERVAL_SECONDS = 15.0
_TARGET = re.compile(
    r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?:\[(?P<v6>[0-9A-Fa-f:.%]+)\]|(?P<host>[A-Za-z0-9._-]+))"
    r"(?::(?P<port>\d{1,5}))?$"
)


@dataclass(frozen=True)
class SshTarget:
    host: str
    port: int = 22
    user: str | None = None

    @property
    def name(self) -> str:
        """The ``host`` label value: the target as written, without the user."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == 22 else f"{host}:{self.port}"


@dataclass(frozen=True)
class SshSettings:
    targets: tuple[SshTarget, ...]
    identity_files: tuple[str, ...] = ()  # empty: the SSH agent and ~/.ssh defaults
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS  # per host and poll, connect included
    max_sessions: int = DEFAULT_MAX_SESSIONS  # hosts polled at once
    nvidia_smi: str = DEFAULT_NVIDIA_SMI  # ESXi: /usr/bin/nvidia-smi (on the PATH)
    interval_seconds: float = DEFAULT_INTERVAL_SECONDS
    default_user: str | None = None


def parse_target(text: str, *, where: str = "ssh.targets") -> SshTarget:
    match = _TARGET.match(text.strip())
    if match is None:
        raise ConfigError(f"{where}: {text!r} is not [user@]host[:port]")
    port = int(match.group("port") or 22)
    if not 0 < port < 65536:
        raise ConfigError(f"{where}: port {port} of {text!r} is out of range")
    host = match.group("v6") or match.group("host")
    return SshTarget(host=host, port=port, user=match.group("user"))


def read_targets_file(path: str) -> tuple[SshTarget, ...]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as err:
        raise ConfigError(f"cannot read the targets file {path}: {err.strerror or err}") from None
    out = []
    for number, line in enumerate(lines, 1):
        text = line.split("#", 1)[0].strip()
        if text:
            out.append(parse_target(text, where=f"{path}:{number}"))
    return tuple(out)


def unique_targets(targets: list[SshTarget]) -> tuple[SshTarget, ...]:
    """Targets in order, a host named twice is a mistake (its series would collide)."""
    seen: dict[str, SshTarget] = {}
    for t in targets:
        if t.name in seen:
            raise ConfigError(f"agentless host {t.name} is given twice")
        seen[t.name] = t
    return tuple(seen.values())
