"""Value checks of the serve settings, shared by flags, environment variables and the file.

A check takes (raw value, where) and returns the checked value or raises a one-line
:class:`ConfigError`; ``where`` names the flag (``--interval``), the variable
(``VGPUMON_INTERVAL``) or the file, line and key, so every way in says the same thing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from vgpumon.errors import ConfigError
from vgpumon.export.address import ListenAddress, parse_listen, parse_telemetry_path
from vgpumon.units import UnitError, parse_duration, parse_ratio

Check = Callable[[Any, str], Any]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("logfmt", "json")
# How the sampler runs the GPUs' jobs (vgpumon.collect.base.DISPATCH_MODES, which a test keeps
# equal: config never imports collect).
DISPATCH_MODES = ("auto", "parallel", "serial")
RENDER_AHEAD = ("auto", "always")
# Sampling faster than 10 ms is a busy loop (one NVML sweep of a large host takes longer), and
# slower than a day is a typo: Prometheus marks series stale after 5 minutes.
MIN_INTERVAL_SECONDS = 0.01
MAX_SECONDS = 86400.0
# NVML's own limits are far below these; a larger count is a typo that would cost memory.
MAX_COUNT = 1_000_000


def check_seconds(
    value: Any, where: str, lo: float = MIN_INTERVAL_SECONDS, hi: float = MAX_SECONDS
) -> float:
    """A duration in the one units grammar (``1``, ``500ms``, ``2m``) within [lo, hi] seconds."""
    try:
        return parse_duration(value, lo=lo, hi=hi)
    except UnitError as err:
        raise ConfigError(f"{where}: {err}") from None


def check_interval(value: Any, where: str) -> float:
    """Sampling interval: [10 ms, 1 day] (``--interval 1e-9`` would be a busy loop)."""
    return check_seconds(value, where)


def check_timeout(value: Any, where: str) -> float:
    """A bound on waiting (deadline, shutdown): above zero, at most a day."""
    return check_seconds(value, where)


def check_cadence(value: Any, where: str) -> float:
    """How often an expensive value is read: 0 (every cycle) or a duration up to a day."""
    if value in (0, "0") and not isinstance(value, bool):
        return 0.0
    return check_seconds(value, where)


def check_bcrypt_cost(value: Any, where: str) -> int:
    """A bcrypt cost: a whole number from 4 to 31 (what a hash can carry)."""
    from vgpumon.export.limits import MAX_BCRYPT_COST, MIN_BCRYPT_COST

    cost = check_count(value, where)
    if not MIN_BCRYPT_COST <= cost <= MAX_BCRYPT_COST:
        raise ConfigError(
            f"{where}: a bcrypt cost is {MIN_BCRYPT_COST} to {MAX_BCRYPT_COST}, got {cost}"
        )
    return cost


def check_count(value: Any, where: str) -> int:
    """A whole number from 1 to :data:`MAX_COUNT`."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    if value < 1:
        raise ConfigError(f"{where}: must be at least 1, got {value}")
    if value > MAX_COUNT:
        raise ConfigError(f"{where}: must be at most {MAX_COUNT}, got {value}")
    return value


def check_bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def check_ratio(value: Any, where: str) -> float:
    """A ratio in [0, 1]: ``0.05`` or ``5%``."""
    try:
        return parse_ratio(value)
    except UnitError as err:
        raise ConfigError(f"{where}: {err}") from None


def check_text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    if "\0" in value:
        raise ConfigError(f"{where}: contains a NUL byte")
    return value


def _check_choice(value: Any, where: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``, any case (flags and file keys alike)."""
    choice = check_text(value, where).lower()
    if choice not in choices:
        raise ConfigError(f"{where}: expected one of {', '.join(choices)}, got {value!r}")
    return choice


def check_log_level(value: Any, where: str) -> str:
    return _check_choice(value, where, LOG_LEVELS)


def check_log_format(value: Any, where: str) -> str:
    return _check_choice(value, where, LOG_FORMATS)


def check_dispatch(value: Any, where: str) -> str:
    return _check_choice(value, where, DISPATCH_MODES)


def check_render_ahead(value: Any, where: str) -> str:
    return _check_choice(value, where, RENDER_AHEAD)


def check_patterns(value: Any, where: str) -> tuple[str, ...]:
    """One or more non-empty names or shell-style patterns (``nvidia.com/mig-*``)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: expected a name or a list of names")
    return tuple(check_text(item, where) for item in items)


def check_texts(value: Any, where: str) -> tuple[str, ...]:
    """One string or a list of them (repeatable flags, YAML lists)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: expected a string or a list of strings")
    return tuple(check_text(item, where) for item in items)


def check_prometheus_url(value: Any, where: str) -> str:
    """A Prometheus query API's base URL (``http://prom:9090``, Mimir's ``.../prometheus``)."""
    from vgpumon.sources.promapi import prometheus_url

    try:
        return prometheus_url(check_text(value, where))
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None


def check_selector(value: Any, where: str) -> str:
    """Label matchers that narrow every query: ``{cluster="eu-1",env=~"prod.*"}``."""
    from vgpumon.sources.promapi import parse_selector

    text = check_text(value, where)
    try:
        parse_selector(text)
    except ConfigError as err:
        raise ConfigError(f"{where}: {str(err).split(': ', 1)[-1]}") from None
    return text


def check_label_names(value: Any, where: str) -> tuple[str, ...]:
    """Prometheus label names (``cluster``, ``region``), one or a list."""
    names = check_texts(value, where)
    for name in names:
        if not name.replace("_", "a").isalnum() or name[0].isdigit() or not name.isascii():
            raise ConfigError(f"{where}: {name!r} is not a label name")
        if name == "instance":
            raise ConfigError(f"{where}: hosts are always told apart by instance; name others")
    return names


def check_readable_file(value: Any, where: str) -> str:
    """A file that can be read now (a key, a known_hosts or targets file): a mistake is said at
    start, naming where it was given, not by every poll of every host later."""
    path = check_text(value, where)
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise ConfigError(f"{where}: cannot read {path}: {err.strerror or err}") from None
    return path


def check_readable_files(value: Any, where: str) -> tuple[str, ...]:
    """One readable file or a list of them (repeatable flags, YAML lists)."""
    return tuple(check_readable_file(item, where) for item in check_texts(value, where))


def check_new_file(value: Any, where: str) -> str:
    """A file vgpumon writes: its directory must exist now (the file itself need not)."""
    path = check_text(value, where)
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"{where}: no directory {directory!r}")
    return path


def check_ssh_targets(value: Any, where: str) -> tuple[str, ...]:
    """Agentless hosts, each ``[user@]host[:port]`` (the grammar of vgpumon.sources.ssh_targets)."""
    from vgpumon.sources.ssh_targets import parse_target

    items = check_texts(value, where)
    for item in items:
        parse_target(item, where=where)
    return items


def check_listen(value: Any, where: str) -> tuple[ListenAddress, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: expected an address or a list of addresses")
    addresses = []
    for item in items:
        if not isinstance(item, str):
            raise ConfigError(f"{where}: expected an address string, got {item!r}")
        try:
            addresses.append(parse_listen(item))
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    return tuple(addresses)


def check_telemetry_path(value: Any, where: str) -> str:
    try:
        return parse_telemetry_path(check_text(value, where))
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
