"""Which exporters to read: a targets file, and a password that never sits in a flag.

Two file formats, so a fleet can be named in whatever the site already keeps:

* a plain list: one exporter per line, as a URL (``https://gpu1:9400``) or ``HOST:PORT``
  (plain HTTP); blank lines and ``#`` comments are skipped;
* Prometheus' ``file_sd`` format (JSON or YAML): ``[{"targets": [...], "labels": {...}}]``. The
  same file Prometheus scrapes the exporters from then drives ``vgpumon top``: ``__scheme__``
  picks http or https, and a ``host`` or ``instance`` label names the host.

A ``HOST`` without a port is refused rather than guessed: Prometheus would use 80/443, a person
would expect the exporter's port, and a wrong guess shows only later as "connection refused".
A password comes from a file or an environment variable, never from a command-line value, which
any local user can read in the process list.
"""

from __future__ import annotations

import os
from typing import Any

from yarl import URL

from vgpumon import yamlfile
from vgpumon.errors import ConfigError
from vgpumon.sources.remote import RemoteTarget

NAME_LABELS = ("host", "instance")
SCHEMES = ("http", "https")


def _target(text: str, scheme: str, name: str | None, where: str) -> RemoteTarget:
    entry = text.strip()
    if not entry.startswith(("http://", "https://")):
        if "/" in entry:
            raise ConfigError(f"{where}: {entry!r} is neither HOST:PORT nor an http(s) URL")
        entry = f"{scheme}://{entry}"
        try:
            port = URL(entry).explicit_port
        except ValueError:
            port = None
        if port is None:
            raise ConfigError(f"{where}: {text.strip()!r} has no port: give HOST:PORT")
    try:
        return RemoteTarget(entry, name)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _plain(path: str, text: str) -> list[RemoteTarget]:
    targets = []
    for number, line in enumerate(text.splitlines(), start=1):
        entry = line.split("#", 1)[0].strip()
        if entry:
            targets.append(_target(entry, "http", None, f"{path}: line {number}"))
    return targets


def _file_sd(path: str, data: Any) -> list[RemoteTarget]:
    if not isinstance(data, list):
        raise ConfigError(f"{path}: a file_sd file is a list of {{targets, labels}} groups")
    targets: list[RemoteTarget] = []
    for index, group in enumerate(data, start=1):
        where = f"{path}: group {index}"
        if not isinstance(group, dict):
            raise ConfigError(f"{where}: expected a mapping with 'targets' (and 'labels')")
        unknown = sorted(set(group) - {"targets", "labels"})
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (only targets and labels)")
        entries = group.get("targets")
        labels = group.get("labels") or {}
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ConfigError(f"{where}: 'targets' must be a list of HOST:PORT strings")
        if not isinstance(labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise ConfigError(f"{where}: 'labels' must map names to strings")
        scheme = labels.get("__scheme__", "http")
        if scheme not in SCHEMES:
            raise ConfigError(f"{where}: __scheme__ must be http or https, got {scheme!r}")
        name = next((labels[k] for k in NAME_LABELS if labels.get(k)), None)
        if name is not None and len(entries) > 1:
            raise ConfigError(
                f"{where}: label {name!r} would name {len(entries)} targets alike: "
                "put each named target in its own group"
            )
        targets.extend(_target(e, scheme, name, where) for e in entries)
    return targets


def _structured(text: str) -> bool:
    """A file_sd file (JSON or YAML list) rather than a plain list of lines."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            structured = ("[", "{", "- ", "-\t", "targets:", "labels:")
            return stripped.startswith(structured) or stripped == "-"
    return False


def load_targets(path: str) -> list[RemoteTarget]:
    """The exporters named in ``path`` (plain list or file_sd); a bad file is one ConfigError.

    Read through the hardened loader (:mod:`vgpumon.yamlfile`): a regular file only, of bounded
    size, UTF-8; a file_sd file's YAML within its depth and size limits, duplicate keys refused.
    """
    text = yamlfile.read_text(path, "targets file")
    if _structured(text):
        node = yamlfile.compose(text, path)
        targets = _file_sd(path, yamlfile.to_python(node, path) if node is not None else None)
    else:
        targets = _plain(path, text)
    if not targets:
        raise ConfigError(f"{path}: names no targets")
    seen: dict[str, RemoteTarget] = {}
    for target in targets:
        if target.host in seen:
            raise ConfigError(f"{path}: host {target.host!r} is named twice")
        seen[target.host] = target
    return targets


def password_from(file: str | None, env: str | None) -> str | None:
    """The password from a file (first line) or an environment variable; None without either."""
    if file is not None and env is not None:
        raise ConfigError("give the password from a file or from the environment, not both")
    if file is not None:
        try:
            with open(file, encoding="utf-8") as handle:
                lines = handle.read().splitlines()
        except OSError as exc:
            raise ConfigError(f"cannot read password file {file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"password file {file}: not UTF-8 text") from None
        if not lines or not lines[0]:
            raise ConfigError(f"password file {file} is empty")
        return lines[0]
    if env is not None:
        value = os.environ.get(env)
        if value is None:
            raise ConfigError(f"environment variable {env} (the password) is not set")
        return value
    return None
