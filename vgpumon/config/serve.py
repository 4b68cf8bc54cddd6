"""Settings of ``vgpumon serve``: defaults, a YAML config file, ``VGPUMON_*`` variables, flags.

Each setting is a row of :mod:`vgpumon.config.table`; later layers win (flag > environment >
file > default).

The file holds the same settings as the flags, so a fleet can ship one file and a host can still
override a value on its command line. A key this version does not know is an error that names the
key: a typo (``web.max_request``) must not silently leave the default in force.

Example::

    listen: ["0.0.0.0:9839", "[::]:9839"]
    interval: 1          # seconds between sampling cycles
    deadline: 5          # a cycle still running after this is abandoned (sampler wedged)
    dispatch: auto       # GPUs read serially while short, else in parallel (or: serial, parallel)
    collectors: {pcie: false}
    process_series: true # per-process series (opt-in), at most process_series_max processes
    process_series_max: 100
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
      telemetry_path: /metrics
      max_requests: 40
      render_ahead: auto     # always: render every snapshot before a scrape asks
      shutdown_timeout: 5
      max_connections: 128   # at the cap, an idle or unfinished connection makes room
      header_timeout: 10     # seconds to finish the TLS handshake and send a request head
      idle_timeout: 65       # a kept-alive connection with no request for this long is closed
      write_timeout: 30      # a client that stops reading is dropped after this
    log: {level: info, format: logfmt}
    libvirt:
      uri: qemu:///system    # VM names for vGPUs (needs the libvirt extra)
    kubernetes:
      socket: /var/lib/kubelet/pod-resources/kubelet.sock   # pods of GPUs (kubernetes extra)
      resources: ["nvidia.com/*"]
      pod_series: false      # per-pod value series (opt-in)
      api: false             # KubeVirt VM names from the API server (in a pod only)
    metering:
      enabled: true          # usage counters per vGPU, MIG instance, process and pod
      idle_ratio: 5%         # a licensed, running vGPU under this SM use counts as idle
    fields:                  # NVML fields of your own, exported per GPU (vgpumon.config.fields)
      - {id: 95, name: vgpumon_gpu_pcie_replay_rollovers_total, type: counter, help: Rollovers.}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vgpumon.config.checks import check_bool
from vgpumon.config.fields import parse_fields
from vgpumon.config.flags import deprecated
from vgpumon.config.table import BY_KEY, BY_NAME, DEFAULT_PORT, SETTINGS
from vgpumon.errors import ConfigError
from vgpumon.export.address import ListenAddress, parse_listen
from vgpumon.export.limits import ServerLimits
from vgpumon.metrics.extra_fields import ExtraField

if TYPE_CHECKING:
    import yaml

__all__ = ["DEFAULT_PORT", "ListenAddress", "ServeSettings", "load_file", "merge", "parse_listen"]


def _default(name: str) -> Any:
    return BY_NAME[name].default


@dataclass(frozen=True)
class ServeSettings:
    """Every serve setting, typed; defaults, flags, keys and help are the table's rows."""

    listen: tuple[ListenAddress, ...] = _default("listen")
    interval_seconds: float = _default("interval_seconds")
    deadline_seconds: float = _default("deadline_seconds")
    dispatch: str = _default("dispatch")
    # Collector name -> on/off, over each collector's default (file first, then flags).
    collectors: tuple[tuple[str, bool], ...] = ()
    disable_default_collectors: bool = _default("disable_default_collectors")
    process_series: bool = _default("process_series")
    process_series_max: int = _default("process_series_max")
    pcie_throughput: bool = _default("pcie_throughput")
    # Usage counters (docs/metering.md) and what counts as an idle vGPU.
    metering: bool = _default("metering")
    metering_idle_ratio: float = _default("metering_idle_ratio")
    # Expensive values at their own cadence (seconds; 0 = every cycle). Between reads the
    # exposition keeps the last value read.
    energy_interval_seconds: float = _default("energy_interval_seconds")
    pcie_throughput_interval_seconds: float = _default("pcie_throughput_interval_seconds")
    processes_interval_seconds: float = _default("processes_interval_seconds")
    gpm_interval_seconds: float = _default("gpm_interval_seconds")
    bar1_interval_seconds: float = _default("bar1_interval_seconds")
    license_interval_seconds: float = _default("license_interval_seconds")
    pcie_replay_interval_seconds: float = _default("pcie_replay_interval_seconds")
    nvlink_interval_seconds: float = _default("nvlink_interval_seconds")
    telemetry_path: str = _default("telemetry_path")
    web_config_file: str | None = _default("web_config_file")
    max_requests: int = _default("max_requests")
    # auto: snapshots are rendered ahead of scrapes only where a render is slow enough to show
    # in scrape latency; always: every snapshot (vgpumon/export/publisher.py says why).
    render_ahead: str = _default("render_ahead")
    shutdown_timeout_seconds: float = _default("shutdown_timeout_seconds")
    max_connections: int = _default("max_connections")
    header_timeout_seconds: float = _default("header_timeout_seconds")
    idle_timeout_seconds: float = _default("idle_timeout_seconds")
    write_timeout_seconds: float = _default("write_timeout_seconds")
    sim: str | None = _default("sim")
    nvml_module: str | None = _default("nvml_module")
    log_level: str = _default("log_level")
    log_format: str = _default("log_format")
    # Enrichers (names from outside NVML); None / () leave them off / at their defaults.
    libvirt_uri: str | None = _default("libvirt_uri")
    kubelet_socket: str | None = _default("kubelet_socket")
    kubernetes_resources: tuple[str, ...] = _default("kubernetes_resources")
    kubernetes_pod_series: bool = _default("kubernetes_pod_series")
    kubernetes_api: bool = _default("kubernetes_api")
    # node-feature-discovery local feature file kept current from each snapshot (None: off).
    nfd_features_file: str | None = _default("nfd_features_file")
    # Agentless hosts (nvidia-smi over SSH, vgpumon.sources.ssh); None: that module's default.
    ssh_targets: tuple[str, ...] = _default("ssh_targets")
    ssh_targets_file: str | None = _default("ssh_targets_file")
    ssh_user: str | None = _default("ssh_user")
    ssh_identity_files: tuple[str, ...] = _default("ssh_identity_files")
    ssh_known_hosts: str | None = _default("ssh_known_hosts")
    ssh_timeout_seconds: float | None = _default("ssh_timeout_seconds")
    ssh_interval_seconds: float | None = _default("ssh_interval_seconds")
    ssh_max_sessions: int | None = _default("ssh_max_sessions")
    ssh_nvidia_smi: str | None = _default("ssh_nvidia_smi")
    # NVML fields declared in the file (``fields``), exported as families of their own.
    fields: tuple[ExtraField, ...] = ()
    config_file: str | None = field(default=None, compare=False)

    def enabled_collectors(self, names: Iterable[tuple[str, bool]]) -> frozenset[str]:
        """``names`` is (collector, enabled by default) for every collector the registry has;
        with ``disable_default_collectors`` only those turned on by name run."""
        enabled = set() if self.disable_default_collectors else {n for n, on in names if on}
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


COLLECTORS_KEY = "collectors"
FIELDS_KEY = "fields"  # a list of entries, each checked with its own line (config/fields.py)
# Every spelling the file takes (old ones too) -> the row's key.
_SPELLINGS = {key: row.key for row in SETTINGS for key in (row.key, *row.old_keys)}
_SECTIONS = {key.split(".")[0] for key in _SPELLINGS if "." in key}
_TOP_KEYS = sorted({key.split(".")[0] for key in _SPELLINGS} | {COLLECTORS_KEY, FIELDS_KEY})
# Paths in the file are relative to the file.
_PATH_FIELDS = ("web_config_file", "ssh_targets_file", "ssh_known_hosts")


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
        if key == COLLECTORS_KEY:
            where = f"{label} line {yamlfile.line(value_node)}: {key}"
            raw = yamlfile.to_python(value_node, label)
            values["collectors"] = _collector_map(raw, where, known_collectors)
        elif key == FIELDS_KEY:
            values["fields"] = parse_fields(value_node, label)
        elif key in _SECTIONS and key not in _SPELLINGS:
            if not isinstance(value_node, yaml.MappingNode):
                raise ConfigError(
                    f"{label} line {yamlfile.line(value_node)}: {key!r} must be a mapping"
                )
            allowed = [k.partition(".")[2] for k in _SPELLINGS if k.startswith(key + ".")]
            for sub, (_sub_key, sub_value) in yamlfile.mapping(
                value_node, label, key, allowed
            ).items():
                _set(values, f"{key}.{sub}", sub_value, label)
        else:
            _set(values, key, value_node, label)
    here = Path(path).parent
    for name in _PATH_FIELDS:
        if name in values:
            values[name] = str(here / values[name])
    if "ssh_identity_files" in values:
        values["ssh_identity_files"] = tuple(str(here / p) for p in values["ssh_identity_files"])
    return values


def _set(values: dict[str, Any], spelling: str, node: yaml.Node, label: str) -> None:
    from vgpumon import yamlfile

    row = BY_KEY[_SPELLINGS[spelling]]
    where = f"{label} line {yamlfile.line(node)}"
    if spelling != row.key:
        deprecated(spelling, row.key, where)
    if row.name in values:
        raise ConfigError(f"{where}: {row.key} given twice (as {spelling} and its other spelling)")
    raw = yamlfile.to_python(node, label)
    values[row.name] = row.check(raw, f"{where}: {spelling}")


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


# The two choose the NVML module together: a layer that names one replaces both of a lower one.
_MODULE_FIELDS = ("sim", "nvml_module")


def merge(
    file_values: Mapping[str, Any],
    flag_values: Mapping[str, Any],
    *,
    env_values: Mapping[str, Any] | None = None,
    config_file: str | None = None,
) -> ServeSettings:
    """Defaults < file < environment < flags; each mapping holds only the values given there."""
    values: dict[str, Any] = {}
    collectors: tuple[tuple[str, bool], ...] = ()
    for layer in (file_values, env_values or {}, flag_values):
        if any(name in layer for name in _MODULE_FIELDS):
            for name in _MODULE_FIELDS:
                values.pop(name, None)
        collectors += tuple(layer.get("collectors", ()))
        values.update({k: v for k, v in layer.items() if k != "collectors"})
    known = {f.name for f in dataclasses.fields(ServeSettings)}
    unknown = set(values) - known
    if unknown:
        raise AssertionError(f"not settings fields: {sorted(unknown)}")
    return ServeSettings(**values, collectors=collectors, config_file=config_file)
