"""Settings of ``vgpumon serve``: defaults, a YAML config file, ``VGPUMON_*`` variables, flags.

Each setting is a row of :mod:`vgpumon.config.table`; later layers win (flag > environment >
file > default).

The file holds the same settings as the flags, so a fleet can ship one file and a host can still
override a value on its command line. A key this version does not know is an error that names the
key: a typo (``web.max_request``) must not silently leave the default in force.

Example::

    interval: 1          # seconds between sampling cycles
    deadline: 5          # a cycle still running after this is abandoned (sampler wedged)
    dispatch: auto       # GPUs read serially while short, else in parallel (or: serial, parallel)
    collector: {pcie: false, disable_defaults: false}
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
      nvlink: 30         # NVLink per-link state and counters (many calls per link on HGX)
      migration: 10      # each vGPU's live-migration payload size (one call per vGPU)
    web:
      listen_address: ["0.0.0.0:9839", "[::]:9839"]
      config: {file: web.yml}   # TLS and basic auth (Prometheus web-config format)
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
from vgpumon.config.table import (
    BY_KEY,
    BY_NAME,
    COLLECTOR_SECTION,
    DEFAULT_PORT,
    OLD_COLLECTORS_KEY,
    SERVE_SETTINGS,
    collector_key,
)
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
    migration_interval_seconds: float = _default("migration_interval_seconds")
    telemetry_path: str = _default("telemetry_path")
    web_config_file: str | None = _default("web_config_file")
    max_requests: int = _default("max_requests")
    bcrypt_max_cost: int = _default("bcrypt_max_cost")
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


FIELDS_KEY = "fields"  # a list of entries, each checked with its own line (config/fields.py)
# Every spelling the file takes (old ones too) -> the row's key.
_SPELLINGS = {key: row.key for row in SERVE_SETTINGS for key in (row.key, *row.old_keys)}


def _allowed_under(prefix: str, collectors: Iterable[str]) -> list[str]:
    """The keys a mapping at ``prefix`` ("" for the top, "web." for the web section) may hold:
    settings, sections of settings, and the collectors' section and old map."""
    paths = [*_SPELLINGS, *(collector_key(name) for name in collectors)]
    if not prefix:
        paths += [OLD_COLLECTORS_KEY, FIELDS_KEY]
    return sorted({p[len(prefix) :].split(".")[0] for p in paths if p.startswith(prefix)})


def load_file(path: str, collector_names: Iterable[str]) -> dict[str, Any]:
    """Settings fields from a YAML config file; relative paths in it are relative to the file.

    Read through :mod:`vgpumon.yamlfile` (regular files only, size and depth caps, duplicate keys
    refused); every error names the file, the line and the key (``web.max_requests``).
    """
    # YAML is loaded only when there is a file to read: a serve without --config never imports
    # it, since every module imported stays resident (docs/exporter.md "Memory").
    import yaml

    from vgpumon import yamlfile

    label = f"config file {path}"
    root = yamlfile.load_node(path, "config file")
    if root is None or yamlfile.is_null(root):
        return {}
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"{label}: expected a mapping of settings at the top")
    reader = _FileReader(label, Path(path).parent, list(collector_names))
    reader.section(root, "")
    return reader.values


class _FileReader:
    """Walks the file's mappings: a key is a setting, a section of settings, the collectors'
    section, the old collectors map, or ``fields``."""

    def __init__(self, label: str, here: Path, collectors: list[str]) -> None:
        self.label, self.here, self.collectors = label, here, collectors
        self.values: dict[str, Any] = {}
        self.toggles: list[tuple[str, bool]] = []

    def where(self, node: yaml.Node) -> str:
        from vgpumon import yamlfile

        return f"{self.label} line {yamlfile.line(node)}"

    def section(self, node: yaml.Node, prefix: str) -> None:
        import yaml

        from vgpumon import yamlfile

        allowed = _allowed_under(prefix, self.collectors)
        what = prefix.rstrip(".") or "the config file"
        for key, (_key_node, value) in yamlfile.mapping(node, self.label, what, allowed).items():
            spelling = prefix + key
            if spelling in _SPELLINGS:
                self.setting(spelling, value)
            elif prefix == f"{COLLECTOR_SECTION}.":
                self.toggle(key, value, f"{self.where(value)}: {spelling}")
            elif not prefix and key == OLD_COLLECTORS_KEY:
                deprecated(key, COLLECTOR_SECTION, self.where(value))
                self.old_collector_map(value)
            elif not prefix and key == FIELDS_KEY:
                self.values["fields"] = parse_fields(value, self.label)
            else:
                if not yamlfile.is_null(value) and not isinstance(value, yaml.MappingNode):
                    raise ConfigError(f"{self.where(value)}: {spelling!r} must be a mapping")
                self.section(value, spelling + ".")
        if self.toggles:
            self.values["collectors"] = tuple(self.toggles)

    def setting(self, spelling: str, node: yaml.Node) -> None:
        from vgpumon import yamlfile

        row = BY_KEY[_SPELLINGS[spelling]]
        where = self.where(node)
        if spelling != row.key:
            deprecated(spelling, row.key, where)
        if row.name in self.values:
            raise ConfigError(
                f"{where}: {row.key} given twice (as {spelling} and its other spelling)"
            )
        raw = yamlfile.to_python(node, self.label)
        if row.path:  # relative to the file, and so checked (a readable key, a directory)
            raw = self.relative(raw)
        self.values[row.name] = row.check(raw, f"{where}: {spelling}")

    def relative(self, raw: Any) -> Any:
        if isinstance(raw, str) and raw:
            return str(self.here / raw)
        if isinstance(raw, list):
            return [self.relative(item) for item in raw]
        return raw

    def toggle(self, name: str, node: yaml.Node, where: str) -> None:
        from vgpumon import yamlfile

        self.toggles.append((name, check_bool(yamlfile.to_python(node, self.label), where)))

    def old_collector_map(self, node: yaml.Node) -> None:
        from vgpumon import yamlfile

        where = f"{self.where(node)}: {OLD_COLLECTORS_KEY}"
        raw = yamlfile.to_python(node, self.label)
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: expected a mapping of collector name to true/false")
        for name, on in raw.items():
            if name not in self.collectors:
                raise ConfigError(
                    f"{where}: unknown collector {name!r} "
                    f"(known: {', '.join(sorted(self.collectors))})"
                )
            self.toggles.append((name, check_bool(on, f"{where}.{name}")))


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
