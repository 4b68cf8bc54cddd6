"""Settings of ``vgpumon serve``: defaults, then a YAML config file, then flags (flags win).

The file holds the same settings as the flags, so a fleet can ship one file and a host can still
override a value on its command line. A key this version does not know is an error that names the
key: a typo (``web.max_request``) must not silently leave the default in force.

Example::

    listen: ["0.0.0.0:9839", "[::]:9839"]
    interval: 1          # seconds between sampling cycles
    deadline: 5          # a cycle still running after this is abandoned (sampler wedged)
    dispatch: auto       # GPUs read serially while short, else in parallel (or: serial, parallel)
    collectors: {pcie: false}
    processes: true      # per-process series (opt-in), at most processes_max processes
    processes_max: 100
    pcie_throughput: false
    intervals:           # expensive values at their own cadence (0: every cycle)
      energy: 10
      pcie_throughput: 10
      processes: 5
      gpm: 5             # GPM activity: the average over the last 5 s
      bar1: 10
      license: 10
      pcie_replay: 10
      nvlink: 30         # NVLink per-link state and counters (about 75 ms per HGX GPU a read)
    web:
      config_file: web.yml   # TLS and basic auth (Prometheus web-config format)
      max_requests: 40
      render_ahead: auto     # always: render every snapshot before a scrape asks
      shutdown_timeout: 5
      max_connections: 128   # at the cap, an idle or unfinished connection makes room
      header_timeout: 10     # seconds to finish the TLS handshake and send a request head
      idle_timeout: 65       # a kept-alive connection with no request for this long is closed
      write_timeout: 30      # a client that stops reading is dropped after this
    log_level: info
    libvirt:
      uri: qemu:///system    # VM names for vGPUs (needs the libvirt extra)
    kubernetes:
      socket: /var/lib/kubelet/pod-resources/kubelet.sock   # pods of GPUs (kubernetes extra)
      resources: ["nvidia.com/*"]
      pod_series: false      # per-pod value series (opt-in)
      api: false             # KubeVirt VM names from the API server (in a pod only)
    fields:                  # NVML fields of your own, exported per GPU (vgpumon.config.fields)
      - {id: 95, name: vgpumon_gpu_pcie_replay_rollovers_total, type: counter, help: Rollovers.}
"""

from __future__ import annotations

import dataclasses
import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from vgpumon.config.fields import parse_fields
from vgpumon.errors import ConfigError
from vgpumon.export.limits import ServerLimits
from vgpumon.metrics.extra_fields import ExtraField
from vgpumon.units import UnitError, parse_duration

if TYPE_CHECKING:
    import yaml

# Prometheus' exporter range 9100-9999; see docs/exporter.md for how this number was chosen.
DEFAULT_PORT = 9839
LOG_LEVELS = ("debug", "info", "warning", "error")
# How the sampler runs the GPUs' jobs (vgpumon.collect.base.DISPATCH_MODES, which a test keeps
# equal: config never imports collect).
DISPATCH_MODES = ("auto", "parallel", "serial")
# Sampling faster than 10 ms is a busy loop (one NVML sweep of a large host takes longer), and
# slower than a day is a typo: Prometheus marks series stale after 5 minutes.
MIN_INTERVAL_SECONDS = 0.01
MAX_SECONDS = 86400.0
# NVML's own limits are far below these; a larger count is a typo that would cost memory.
MAX_COUNT = 1_000_000


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
    dispatch: str = "auto"
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
    # GPM activity is the average between two reads, so 5 s still covers all the time at a
    # coarser grain (DCGM's exporter collects every 30 s); the metrics cost 1.8 ms of CPU per GPU
    # and GPU instance. BAR1 use and license state change rarely and cost 0.2-0.35 ms a read.
    gpm_interval_seconds: float = 5.0
    bar1_interval_seconds: float = 10.0
    license_interval_seconds: float = 10.0
    pcie_replay_interval_seconds: float = 10.0  # a counter: rate() absorbs 10 s
    # Counters and link states; the driver answers each of a GPU's 108 per-link fields on its
    # own (75 ms of CPU per HGX GPU and read). DCGM's exporter collects every 30 s too.
    nvlink_interval_seconds: float = 30.0
    web_config_file: str | None = None
    max_requests: int = 40
    # auto: snapshots are rendered ahead of scrapes only where a render is slow enough to show
    # in scrape latency; always: every snapshot (vgpumon/export/publisher.py says why).
    render_ahead: str = "auto"
    shutdown_timeout_seconds: float = 5.0
    max_connections: int = ServerLimits.max_connections
    header_timeout_seconds: float = ServerLimits.header_timeout_seconds
    idle_timeout_seconds: float = ServerLimits.idle_timeout_seconds
    write_timeout_seconds: float = ServerLimits.write_timeout_seconds
    sim: str | None = None
    nvml_module: str | None = None
    log_level: str = "info"
    # Enrichers (names from outside NVML); None / () leave them off / at their defaults.
    libvirt_uri: str | None = None
    kubelet_socket: str | None = None
    kubernetes_resources: tuple[str, ...] = ()
    kubernetes_pod_series: bool = False
    kubernetes_api: bool = False  # KubeVirt VM names from the API server (in-cluster)
    # Agentless hosts (nvidia-smi over SSH, vgpumon.sources.ssh); None: that module's default.
    ssh_targets: tuple[str, ...] = ()
    ssh_targets_file: str | None = None
    ssh_user: str | None = None
    ssh_identity_files: tuple[str, ...] = ()
    ssh_known_hosts: str | None = None
    ssh_timeout_seconds: float | None = None
    ssh_interval_seconds: float | None = None
    ssh_max_sessions: int | None = None
    ssh_nvidia_smi: str | None = None
    # NVML fields declared in the file (``fields``), exported as families of their own.
    fields: tuple[ExtraField, ...] = ()
    config_file: str | None = field(default=None, compare=False)

    def enabled_collectors(self, names: Iterable[tuple[str, bool]]) -> frozenset[str]:
        """``names`` is (collector, enabled by default) for every collector the registry has."""
        enabled = {name for name, default in names if default}
        for name, on in self.collectors:
            (enabled.add if on else enabled.discard)(name)
        return frozenset(enabled)

    def server_limits(self) -> ServerLimits:
        return ServerLimits(
            max_connections=self.max_connections,
            header_timeout_seconds=self.header_timeout_seconds,
            idle_timeout_seconds=self.idle_timeout_seconds,
            write_timeout_seconds=self.write_timeout_seconds,
        )


# --------------------------------------------------------------------------- value checks

Check = Callable[[Any, str], Any]
"""A value check shared by flags and the file: (raw value, where) -> checked value or ConfigError.

``where`` names the flag (``--interval``) or the file, line and key, so both say the same thing.
"""


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


def check_dispatch(value: Any, where: str) -> str:
    return _check_choice(value, where, DISPATCH_MODES)


RENDER_AHEAD = ("auto", "always")


def check_render_ahead(value: Any, where: str) -> str:
    return _check_choice(value, where, RENDER_AHEAD)


def check_patterns(value: Any, where: str) -> tuple[str, ...]:
    """One or more non-empty names or shell-style patterns (``nvidia.com/mig-*``)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: expected a name or a list of names")
    return tuple(check_text(item, where) for item in items)


def check_texts(value: Any, where: str) -> tuple[str, ...]:
    """One string or a list of them (repeatable flags, YAML lists)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ConfigError(f"{where}: expected a string or a list of strings")
    return tuple(check_text(item, where) for item in items)


def check_listen(value: Any, where: str) -> tuple[ListenAddress, ...]:
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
    "listen": ("listen", check_listen),
    "interval": ("interval_seconds", check_interval),
    "deadline": ("deadline_seconds", check_timeout),
    "dispatch": ("dispatch", check_dispatch),
    "processes": ("processes", check_bool),
    "processes_max": ("processes_max", check_count),
    "pcie_throughput": ("pcie_throughput", check_bool),
    "intervals.energy": ("energy_interval_seconds", check_cadence),
    "intervals.pcie_throughput": ("pcie_throughput_interval_seconds", check_cadence),
    "intervals.processes": ("processes_interval_seconds", check_cadence),
    "intervals.gpm": ("gpm_interval_seconds", check_cadence),
    "intervals.bar1": ("bar1_interval_seconds", check_cadence),
    "intervals.license": ("license_interval_seconds", check_cadence),
    "intervals.pcie_replay": ("pcie_replay_interval_seconds", check_cadence),
    "intervals.nvlink": ("nvlink_interval_seconds", check_cadence),
    "web.config_file": ("web_config_file", check_text),
    "web.max_requests": ("max_requests", check_count),
    "web.render_ahead": ("render_ahead", check_render_ahead),
    "web.shutdown_timeout": ("shutdown_timeout_seconds", check_timeout),
    "web.max_connections": ("max_connections", check_count),
    "web.header_timeout": ("header_timeout_seconds", check_timeout),
    "web.idle_timeout": ("idle_timeout_seconds", check_timeout),
    "web.write_timeout": ("write_timeout_seconds", check_timeout),
    "sim": ("sim", check_text),
    "nvml_module": ("nvml_module", check_text),
    "log_level": ("log_level", check_log_level),
    "libvirt.uri": ("libvirt_uri", check_text),
    "kubernetes.socket": ("kubelet_socket", check_text),
    "kubernetes.resources": ("kubernetes_resources", check_patterns),
    "kubernetes.pod_series": ("kubernetes_pod_series", check_bool),
    "kubernetes.api": ("kubernetes_api", check_bool),
    "ssh.targets": ("ssh_targets", check_texts),
    "ssh.targets_file": ("ssh_targets_file", check_text),
    "ssh.user": ("ssh_user", check_text),
    "ssh.identity": ("ssh_identity_files", check_texts),
    "ssh.known_hosts": ("ssh_known_hosts", check_text),
    "ssh.timeout": ("ssh_timeout_seconds", check_timeout),
    "ssh.interval": ("ssh_interval_seconds", check_interval),
    "ssh.max_sessions": ("ssh_max_sessions", check_count),
    "ssh.nvidia_smi": ("ssh_nvidia_smi", check_text),
}
COLLECTORS_KEY = "collectors"
FIELDS_KEY = "fields"  # a list of entries, each checked with its own line (config/fields.py)
_SECTIONS = {key.split(".")[0] for key in FILE_KEYS if "." in key}
_TOP_KEYS = sorted({key.split(".")[0] for key in FILE_KEYS} | {COLLECTORS_KEY, FIELDS_KEY})


def load_file(path: str, collector_names: Iterable[str]) -> dict[str, Any]:
    """Settings fields from a YAML config file; relative paths in it are relative to the file.

    Read through :mod:`vgpumon.yamlfile` (regular files only, size and depth caps, duplicate keys
    refused); every error names the file, the line and the key.
    """
    # YAML is loaded only when there is a file to read: a serve without --config never imports
    # it (about 0.9 MB resident, docs/exporter.md "Memory").
    import yaml

    from vgpumon import yamlfile

    label = f"config file {path}"
    root = yamlfile.load_node(path, "config file")
    if root is None or yamlfile.is_null(root):
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{label}: expected a mapping of settings at the top")
    known_collectors = set(collector_names)
    values: dict[str, Any] = {}
    top = yamlfile.mapping(root, label, "the config file", _TOP_KEYS)
    for key, (_key_node, value_node) in top.items():
        if key in _SECTIONS:
            if not isinstance(value_node, yaml.MappingNode):
                raise ConfigError(
                    f"{label} line {yamlfile.line(value_node)}: {key!r} must be a mapping"
                )
            allowed = [k.partition(".")[2] for k in FILE_KEYS if k.startswith(key + ".")]
            for sub, (_sub_key, sub_value) in yamlfile.mapping(
                value_node, label, key, allowed
            ).items():
                _set(values, f"{key}.{sub}", sub_value, label)
        elif key == COLLECTORS_KEY:
            where = f"{label} line {yamlfile.line(value_node)}: {key}"
            raw = yamlfile.to_python(value_node, label)
            values["collectors"] = _collector_map(raw, where, known_collectors)
        elif key == FIELDS_KEY:
            values["fields"] = parse_fields(value_node, label)
        else:
            _set(values, key, value_node, label)
    here = Path(path).parent
    for key in ("web_config_file", "ssh_targets_file", "ssh_known_hosts"):
        if key in values:
            values[key] = str(here / values[key])
    if "ssh_identity_files" in values:
        values["ssh_identity_files"] = tuple(str(here / p) for p in values["ssh_identity_files"])
    return values


def _set(values: dict[str, Any], key: str, node: yaml.Node, label: str) -> None:
    from vgpumon import yamlfile

    field_name, check = FILE_KEYS[key]
    raw = yamlfile.to_python(node, label)
    values[field_name] = check(raw, f"{label} line {yamlfile.line(node)}: {key}")


def _collector_map(raw: Any, where: str, known: set[str]) -> tuple[tuple[str, bool], ...]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping of collector name to true/false")
    out = []
    for name, on in raw.items():
        if name not in known:
            raise ConfigError(
                f"{where}: unknown collector {name!r} (known: {', '.join(sorted(known))})"
            )
        out.append((name, check_bool(on, f"{where}.{name}")))
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
