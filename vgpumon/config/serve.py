"""Settings of ``vgpumon serve``: defaults, then a YAML config file, then flags (flags win).

The file holds the same settings as the flags, so a fleet can ship one file and a host can still
override a value on its command line. A key this version does not know is an error that names the
key: a typo (``web.max_request``) must not silently leave the default in force.

Example::

    listen: ["0.0.0.0:9839", "[::]:9839"]
    interval: 1          # seconds between sampling cycles
    deadline: 5          # a cycle still running after this is abandoned (sampler wedged)
    collectors: {pcie: false}
    processes: true      # per-process series (opt-in), at most processes_max processes
    processes_max: 100
    pcie_throughput: false
    intervals:           # expensive values at their own cadence (0: every cycle)
      energy: 10
      pcie_throughput: 10
      processes: 5
    web:
      config_file: web.yml   # TLS and basic auth (Prometheus web-config format)
      max_requests: 40
      shutdown_timeout: 5
    log_level: info
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from vgpumon.collect.base import SamplerConfig
from vgpumon.errors import ConfigError
from vgpumon.export.metrics import ExportOptions

# Prometheus' exporter range 9100-9999; see docs/exporter.md for how this number was chosen.
DEFAULT_PORT = 9839
LOG_LEVELS = ("debug", "info", "warning", "error")


class ListenAddress(NamedTuple):
    host: str | None  # None: every interface, IPv4 and IPv6
    port: int

    def __str__(self) -> str:
        if self.host is None:
            return f":{self.port}"
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


def parse_listen(text: str) -> ListenAddress:
    """``0.0.0.0:9839``, ``[::]:9839``, ``host:9839`` or ``:9839`` (every interface)."""
    value = text.strip()
    if value.startswith("["):
        host, sep, port = value[1:].partition("]:")
        if not sep:
            raise ConfigError(f"listen address {text!r}: expected [IPv6]:PORT, e.g. [::]:9839")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"listen address {text!r}: {host!r} is not an IPv6 address") from None
    else:
        host, sep, port = value.rpartition(":")
        if not sep:
            raise ConfigError(
                f"listen address {text!r}: expected HOST:PORT, [IPv6]:PORT or :PORT (e.g. :9839)"
            )
        if ":" in host:
            raise ConfigError(f"listen address {text!r}: write IPv6 addresses in brackets, [::1]:N")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"listen address {text!r}: port must be a number from 0 to 65535")
    return ListenAddress(host or None, int(port))


@dataclass(frozen=True)
class ServeSettings:
    listen: tuple[ListenAddress, ...] = (ListenAddress(None, DEFAULT_PORT),)
    interval_seconds: float = 1.0
    deadline_seconds: float = 5.0
    # Collector name -> on/off, over each collector's default (file first, then flags).
    collectors: tuple[tuple[str, bool], ...] = ()
    processes: bool = False
    processes_max: int = 100
    pcie_throughput: bool = False
    # Expensive values at their own cadence (seconds; 0 = every cycle). Between reads the
    # exposition keeps the last value read. Defaults: energy is a counter read for rate()s over
    # minutes, and its call takes about 3 ms per GPU; PCIe throughput blocks 20 ms per direction;
    # process lists are several calls per GPU and processes live for seconds or longer.
    energy_interval_seconds: float = 10.0
    pcie_throughput_interval_seconds: float = 10.0
    processes_interval_seconds: float = 5.0
    web_config_file: str | None = None
    max_requests: int = 40
    shutdown_timeout_seconds: float = 5.0
    sim: str | None = None
    nvml_module: str | None = None
    log_level: str = "info"
    config_file: str | None = field(default=None, compare=False)

    def enabled_collectors(self, names: Iterable[tuple[str, bool]]) -> frozenset[str]:
        """``names`` is (collector, enabled by default) for every collector the registry has."""
        enabled = {name for name, default in names if default}
        for name, on in self.collectors:
            (enabled.add if on else enabled.discard)(name)
        return frozenset(enabled)

    def sampler_config(self) -> SamplerConfig:
        from vgpumon.collect.registry import all_readers

        known = [(r.name, r.default_enabled) for r in all_readers()]
        return SamplerConfig(
            interval_seconds=self.interval_seconds,
            deadline_seconds=self.deadline_seconds,
            collectors=self.enabled_collectors(known),
            pcie_throughput=self.pcie_throughput,
            cadences={
                "energy": self.energy_interval_seconds,
                "pcie_throughput": self.pcie_throughput_interval_seconds,
                "processes": self.processes_interval_seconds,
            },
        )

    def export_options(self) -> ExportOptions:
        return ExportOptions(processes=self.processes, processes_max=self.processes_max)


# --------------------------------------------------------------------------- value checks

Check = Callable[[Any, str], Any]


def _positive_float(value: Any, where: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise ConfigError(f"{where}: expected a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}: expected a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: must be a positive number, got {value!r}")
    return float(value)


def _seconds_or_zero(value: Any, where: str) -> float:
    """A cadence: 0 (every cycle) or a positive number of seconds."""
    if value in (0, "0"):
        return 0.0
    return _positive_float(value, where)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    if value < 1:
        raise ConfigError(f"{where}: must be at least 1, got {value}")
    return value


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _log_level(value: Any, where: str) -> str:
    level = _text(value, where).lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{where}: expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return level


def _listen(value: Any, where: str) -> tuple[ListenAddress, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
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


# Config file key -> (settings field, check). Flags use the same fields and checks.
FILE_KEYS: dict[str, tuple[str, Check]] = {
    "listen": ("listen", _listen),
    "interval": ("interval_seconds", _positive_float),
    "deadline": ("deadline_seconds", _positive_float),
    "processes": ("processes", _bool),
    "processes_max": ("processes_max", _positive_int),
    "pcie_throughput": ("pcie_throughput", _bool),
    "intervals.energy": ("energy_interval_seconds", _seconds_or_zero),
    "intervals.pcie_throughput": ("pcie_throughput_interval_seconds", _seconds_or_zero),
    "intervals.processes": ("processes_interval_seconds", _seconds_or_zero),
    "web.config_file": ("web_config_file", _text),
    "web.max_requests": ("max_requests", _positive_int),
    "web.shutdown_timeout": ("shutdown_timeout_seconds", _positive_float),
    "sim": ("sim", _text),
    "nvml_module": ("nvml_module", _text),
    "log_level": ("log_level", _log_level),
}
COLLECTORS_KEY = "collectors"
_SECTIONS = {key.split(".")[0] for key in FILE_KEYS if "." in key}


def _flatten(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: keys must be strings, got {key!r}")
        if key in _SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {key!r} must be a mapping")
            for sub, sub_value in value.items():
                flat[f"{key}.{sub}"] = sub_value
        else:
            flat[key] = value
    return flat


def load_file(path: str, collector_names: Iterable[str]) -> dict[str, Any]:
    """Settings fields from a YAML config file; relative paths in it are relative to the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise ConfigError(f"config file {path}: not valid YAML{at}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings at the top")
    known_collectors = set(collector_names)
    values: dict[str, Any] = {}
    for key, raw in _flatten(data, f"config file {path}").items():
        where = f"config file {path}: {key}"
        if key == COLLECTORS_KEY:
            values["collectors"] = _collector_map(raw, where, known_collectors)
            continue
        if key not in FILE_KEYS:
            raise ConfigError(f"config file {path}: unknown key {key!r}")
        name, check = FILE_KEYS[key]
        values[name] = check(raw, where)
    if "web_config_file" in values:
        values["web_config_file"] = str(Path(path).parent / values["web_config_file"])
    return values


def _collector_map(raw: Any, where: str, known: set[str]) -> tuple[tuple[str, bool], ...]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of collector name to true/false")
    out = []
    for name, on in raw.items():
        if name not in known:
            raise ConfigError(
                f"{where}: unknown collector {name!r} (known: {', '.join(sorted(known))})"
            )
        out.append((name, _bool(on, f"{where}.{name}")))
    return tuple(out)


def merge(
    file_values: Mapping[str, Any],
    flag_values: Mapping[str, Any],
    *,
    config_file: str | None = None,
) -> ServeSettings:
    """Defaults < file < flags. ``flag_values`` holds only the flags given on the command line."""
    values: dict[str, Any] = dict(file_values)
    if "sim" in flag_values or "nvml_module" in flag_values:
        # The two choose the NVML module together: a module given on the command line replaces
        # whichever the file chose.
        values.pop("sim", None)
        values.pop("nvml_module", None)
    collectors = tuple(values.pop("collectors", ())) + tuple(flag_values.get("collectors", ()))
    values.update({k: v for k, v in flag_values.items() if k != "collectors"})
    known = {f.name for f in dataclasses.fields(ServeSettings)}
    unknown = set(values) - known
    if unknown:
        raise AssertionError(f"not settings fields: {sorted(unknown)}")
    return ServeSettings(**values, collectors=collectors, config_file=config_file)
