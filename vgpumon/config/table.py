"""The one table of ``vgpumon serve`` settings.

Each :class:`Setting` row declares a setting once: its field on
:class:`~vgpumon.config.serve.ServeSettings`, its flag(s), its config file key, its ``VGPUMON_*``
environment variable (from the key), its check, default, help and whether SIGHUP applies it. From
the rows come the argparse flags (:mod:`vgpumon.config.flags`), the file's keys and the
environment's variables (:mod:`vgpumon.config.serve`), the settings table of docs/exporter.md
(:mod:`vgpumon.config.docs_gen`), what a reload applies and what it only names
(``vgpumon.commands.serve.reloaded``), and the sampler's cadences. A new setting is a new row and
a field; tests/config/test_settings_table.py keeps the two in step.

Old spellings (``old_flags``, ``old_keys``) keep working and say once, on stderr, that they are
deprecated and what replaced them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from vgpumon.collect.enrich import (
    DEFAULT_KUBELET_SOCKET,
    DEFAULT_KUBERNETES_RESOURCES,
    DEFAULT_LIBVIRT_URI,
)
from vgpumon.config.checks import (
    Check,
    check_bool,
    check_cadence,
    check_count,
    check_dispatch,
    check_interval,
    check_listen,
    check_log_format,
    check_log_level,
    check_patterns,
    check_ratio,
    check_render_ahead,
    check_telemetry_path,
    check_text,
    check_texts,
    check_timeout,
)
from vgpumon.export.address import DEFAULT_TELEMETRY_PATH, ListenAddress
from vgpumon.export.limits import ServerLimits

# Prometheus' exporter range 9100-9999; see docs/exporter.md for how this number was chosen.
DEFAULT_PORT = 9839
ENV_PREFIX = "VGPUMON_"

# value: one value; list: repeatable flag, YAML list, comma-separated variable; switch: --x and
# --no-x (or only --x where ``negatable`` is off), true/false in the file and the variable.
Kind = Literal["value", "list", "switch"]


@dataclass(frozen=True)
class Setting:
    name: str  # the ServeSettings field
    key: str  # config file key; "web.max_requests" is max_requests in the web section
    flags: tuple[str, ...]  # the first is the one help and docs name; the others are synonyms
    check: Check
    default: Any
    help: str
    group: str  # the flags' group in --help
    kind: Kind = "value"
    metavar: str | None = None
    reloadable: bool = False  # SIGHUP applies it while serving; otherwise it takes a restart
    const: Any = None  # the value of a flag given without one (--libvirt-uri)
    negatable: bool = True  # a switch has --no-x too
    old_flags: tuple[str, ...] = ()  # deprecated spellings of flags[0]
    old_keys: tuple[str, ...] = ()  # deprecated spellings of key
    more: str = ""  # docs/exporter.md only: what does not fit a --help line
    # Where the default lives elsewhere (None here: the module using the setting decides).
    shown_default: Callable[[], str] | None = None
    cadence: str | None = None  # the sampler's cadence this interval sets
    exclusive: str | None = None  # rows with the same tag cannot be given together as flags

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.upper().replace(".", "_")


def env_name(row: Setting) -> str:
    return row.env


def shown_default(row: Setting) -> str:
    """The default as help and docs show it."""
    if row.shown_default is not None:
        return row.shown_default()
    value = row.default
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == ():
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return " ".join(str(item) for item in value)
    return str(value)


def _ssh_default(name: str) -> Callable[[], str]:
    """The agentless module's default (imported when shown: serve loads it only with --ssh)."""

    def shown() -> str:
        from vgpumon.sources import ssh_targets

        value = getattr(ssh_targets, name)
        return f"{value:g}" if isinstance(value, float) else str(value)

    return shown


def _cadence(cadence: str, what: str, default: float, more: str = "") -> Setting:
    flag_name = cadence.replace("_", "-")
    return Setting(
        f"{cadence}_interval_seconds",
        f"intervals.{cadence}",
        (f"--interval.{flag_name}",),
        check_cadence,
        default,
        f"read {what} at most this often, keeping the last value between reads; 0: every cycle",
        "sampling",
        metavar="DURATION",
        more=more,
        cadence=cadence,
    )


_LIMITS = ServerLimits()

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "listen",
        "listen",
        ("--listen", "--web.listen-address"),  # the second is node_exporter's spelling
        check_listen,
        (ListenAddress(None, DEFAULT_PORT),),
        "address to serve on, repeatable: 0.0.0.0:PORT, [::]:PORT, HOST:PORT or :PORT "
        "(every interface, IPv4 and IPv6)",
        "web",
        kind="list",
        metavar="ADDR",
        more="the second spelling is node_exporter's; an address given twice is an error",
    ),
    Setting(
        "telemetry_path",
        "web.telemetry_path",
        ("--web.telemetry-path",),
        check_telemetry_path,
        DEFAULT_TELEMETRY_PATH,
        "path under which the metrics are served",
        "web",
        metavar="PATH",
        more="the landing page links it; `/api/v1/snapshot` and `/-/*` stay where they are",
    ),
    Setting(
        "web_config_file",
        "web.config_file",
        ("--web.config.file",),
        check_text,
        None,
        "TLS and basic-auth settings in Prometheus' web-config format",
        "web",
        metavar="FILE",
        more="([web-config.md](web-config.md)); relative to the config file when given there; "
        "SIGHUP re-reads the file it names",
    ),
    Setting(
        "max_requests",
        "web.max_requests",
        ("--web.max-requests",),
        check_count,
        40,
        "requests served at once; more get 503 at once",
        "web",
        metavar="N",
        reloadable=True,
    ),
    Setting(
        "render_ahead",
        "web.render_ahead",
        ("--web.render-ahead",),
        check_render_ahead,
        "auto",
        "auto: render a new snapshot before a scrape asks only where rendering is slow and "
        "scrapes come at least as often as snapshots (otherwise the first scrape of a snapshot "
        "renders it); always: every snapshot",
        "web",
        metavar="WHEN",
        more="(auto renders ahead while a render takes 2 ms or more; see [Rendering](#rendering))",
    ),
    Setting(
        "max_connections",
        "web.max_connections",
        ("--web.max-connections",),
        check_count,
        _LIMITS.max_connections,
        "connections served at once; at the cap an idle or unfinished one makes room, and a "
        "new one is refused only when all are answering",
        "web",
        metavar="N",
        more="(TLS handshakes included; at the cap the connection waiting longest without being "
        "answered, idle first, is closed to make room)",
    ),
    Setting(
        "header_timeout_seconds",
        "web.header_timeout",
        ("--web.header-timeout",),
        check_timeout,
        _LIMITS.header_timeout_seconds,
        "a connection must finish its TLS handshake and send a request head within this",
        "web",
        metavar="DURATION",
    ),
    Setting(
        "idle_timeout_seconds",
        "web.idle_timeout",
        ("--web.idle-timeout",),
        check_timeout,
        _LIMITS.idle_timeout_seconds,
        "a kept-alive connection with no new request for this long is closed",
        "web",
        metavar="DURATION",
        more="(longer than the common 15 s to 1 min scrape intervals, so those keep their "
        "connections; at the connection cap idle ones are closed first to make room, "
        "[reliability.md](reliability.md))",
    ),
    Setting(
        "write_timeout_seconds",
        "web.write_timeout",
        ("--web.write-timeout",),
        check_timeout,
        _LIMITS.write_timeout_seconds,
        "a client that does not take a response within this is dropped",
        "web",
        metavar="DURATION",
        reloadable=True,
    ),
    Setting(
        "shutdown_timeout_seconds",
        "web.shutdown_timeout",
        ("--web.shutdown-timeout",),
        check_timeout,
        5.0,
        "on SIGTERM/SIGINT, wait at most this long for requests and a running cycle",
        "web",
        metavar="DURATION",
        more="(see [Shutdown](#shutdown))",
    ),
    Setting(
        "interval_seconds",
        "interval",
        ("--interval",),
        check_interval,
        1.0,
        "time between sampling cycles, 10 ms to 1 day",
        "sampling",
        metavar="DURATION",
    ),
    Setting(
        "deadline_seconds",
        "deadline",
        ("--deadline",),
        check_timeout,
        5.0,
        "a cycle still running after this is abandoned and the sampler reported wedged",
        "sampling",
        metavar="DURATION",
    ),
    Setting(
        "dispatch",
        "dispatch",
        ("--dispatch",),
        check_dispatch,
        "auto",
        "read the GPUs one after another (serial), all at once (parallel), or serially while "
        "their reads take a small part of the interval (auto)",
        "sampling",
        metavar="MODE",
        more="(see [GPU dispatch](#gpu-dispatch))",
    ),
    Setting(
        "disable_default_collectors",
        "disable_default_collectors",
        ("--collector.disable-defaults",),
        check_bool,
        False,
        "run only the collectors enabled by name (--collector.NAME, or collectors: in the file)",
        "collectors",
        kind="switch",
        negatable=False,
    ),
    Setting(
        "process_series",
        "process_series",
        ("--process-series",),
        check_bool,
        False,
        "export per-process series (opt-in: PIDs churn the TSDB); the processes collector "
        "reads the process lists either way",
        "sampling",
        kind="switch",
        reloadable=True,
        old_flags=("--processes",),
        old_keys=("processes",),
    ),
    Setting(
        "process_series_max",
        "process_series_max",
        ("--process-series-max",),
        check_count,
        100,
        "at most this many processes (host and vGPU guest together) get series; "
        "vgpumon_process_series_truncated says when more were left out",
        "sampling",
        metavar="N",
        reloadable=True,
        old_flags=("--processes-max",),
        old_keys=("processes_max",),
    ),
    Setting(
        "pcie_throughput",
        "pcie_throughput",
        ("--pcie-throughput",),
        check_bool,
        False,
        "read PCIe throughput (the NVML call blocks about 20 ms per direction and GPU)",
        "sampling",
        kind="switch",
    ),
    Setting(
        "metering",
        "metering.enabled",
        ("--metering",),
        check_bool,
        True,
        "usage counters per vGPU, MIG instance, process and pod (off only to compare what they "
        "cost)",
        "sampling",
        kind="switch",
        more="([metering.md](metering.md))",
    ),
    Setting(
        "metering_idle_ratio",
        "metering.idle_ratio",
        ("--metering.idle-ratio",),
        check_ratio,
        0.05,
        "a licensed, running vGPU under this SM utilization counts as idle "
        "(vgpumon_vgpu_idle_seconds); a ratio such as 0.05 (a percentage is read too)",
        "sampling",
        metavar="RATIO",
    ),
    _cadence("energy", "the energy counter", 10.0),
    _cadence("pcie_throughput", "PCIe throughput (when on)", 10.0),
    _cadence("processes", "process lists", 5.0),
    _cadence(
        "gpm",
        "GPM activity (the average since the last read)",
        5.0,
        "(the SM, tensor and DRAM activity exported is the average between the last two samples)",
    ),
    _cadence("bar1", "BAR1 memory", 10.0),
    _cadence(
        "license",
        "license state",
        10.0,
        "(GPU and each vGPU; a vGPU seen for the first time is read at once)",
    ),
    _cadence("pcie_replay", "the PCIe replay counter", 10.0),
    _cadence(
        "nvlink",
        "NVLink per-link state and counters",
        30.0,
        "(see [How often each value is read](#how-often-each-value-is-read))",
    ),
    Setting(
        "sim",
        "sim",
        ("--sim",),
        check_text,
        None,
        "use the simulated NVML with a built-in scenario name or a scenario file "
        "('vgpumon scenarios' lists them)",
        "NVML source",
        metavar="SCENARIO",
        exclusive="nvml",
        more="a module chosen by a higher layer (flag, variable) replaces the file's",
    ),
    Setting(
        "nvml_module",
        "nvml_module",
        ("--nvml-module",),
        check_text,
        None,
        "import this module instead of pynvml",
        "NVML source",
        metavar="NAME",
        exclusive="nvml",
        shown_default=lambda: "pynvml",
    ),
    Setting(
        "log_level",
        "log.level",
        ("--log.level",),
        check_log_level,
        "info",
        "debug, info, warning or error",
        "logging",
        metavar="LEVEL",
        reloadable=True,
        old_flags=("--log-level",),
        old_keys=("log_level",),
    ),
    Setting(
        "log_format",
        "log.format",
        ("--log.format",),
        check_log_format,
        "logfmt",
        "logfmt or json (one object per line: time, level, logger, message); times in UTC",
        "logging",
        metavar="FORMAT",
    ),
    Setting(
        "libvirt_uri",
        "libvirt.uri",
        ("--libvirt-uri",),
        check_text,
        None,
        f"name the VM of each vGPU from libvirt, read-only (URI {DEFAULT_LIBVIRT_URI} when the "
        "flag has none; needs the libvirt extra)",
        "names",
        metavar="URI",
        const=DEFAULT_LIBVIRT_URI,
        more="([names.md](names.md))",
    ),
    Setting(
        "kubelet_socket",
        "kubernetes.socket",
        ("--kubelet-socket",),
        check_text,
        None,
        f"attach pods to GPUs through the kubelet's pod-resources socket ({DEFAULT_KUBELET_SOCKET}"
        " when the flag has none; needs the kubernetes extra)",
        "names",
        metavar="PATH",
        const=DEFAULT_KUBELET_SOCKET,
    ),
    Setting(
        "kubernetes_resources",
        "kubernetes.resources",
        ("--kubernetes-resource",),
        check_patterns,
        (),
        "resource names to read, repeatable, shell patterns",
        "names",
        kind="list",
        metavar="PATTERN",
        shown_default=lambda: " ".join(DEFAULT_KUBERNETES_RESOURCES),
    ),
    Setting(
        "kubernetes_pod_series",
        "kubernetes.pod_series",
        ("--kubernetes-pod-series",),
        check_bool,
        False,
        "per-pod utilization and memory series (opt-in: pods churn the TSDB)",
        "names",
        kind="switch",
        reloadable=True,
    ),
    Setting(
        "kubernetes_api",
        "kubernetes.api",
        ("--kubernetes-api",),
        check_bool,
        False,
        "read KubeVirt VM names from the API server (in a pod, with 'get pods' rights)",
        "names",
        kind="switch",
    ),
    Setting(
        "nfd_features_file",
        "kubernetes.nfd_features_file",
        ("--nfd-features-file",),
        check_text,
        None,
        "keep FILE (in node-feature-discovery's features.d) current with this node's GPU "
        "facts; rewritten atomically when a value changes",
        "names",
        metavar="FILE",
        more="([kubernetes.md](kubernetes.md))",
    ),
    Setting(
        "ssh_targets",
        "ssh.targets",
        ("--ssh",),
        check_texts,
        (),
        "read this host's GPUs from its nvidia-smi over SSH (repeatable); every series gets "
        "host=HOST",
        "agentless hosts",
        kind="list",
        metavar="[USER@]HOST[:PORT]",
        more="instead of NVML here ([agentless.md](agentless.md))",
    ),
    Setting(
        "ssh_targets_file",
        "ssh.targets_file",
        ("--ssh-targets",),
        check_text,
        None,
        "more targets, one per line",
        "agentless hosts",
        metavar="FILE",
    ),
    Setting(
        "ssh_user",
        "ssh.user",
        ("--ssh-user",),
        check_text,
        None,
        "user for targets without USER@ (default, as for ssh: the User of ~/.ssh/config, else "
        "the local user)",
        "agentless hosts",
        metavar="USER",
    ),
    Setting(
        "ssh_identity_files",
        "ssh.identity",
        ("--ssh-identity",),
        check_texts,
        (),
        "private key file, repeatable (otherwise the SSH agent and ~/.ssh keys)",
        "agentless hosts",
        kind="list",
        metavar="FILE",
        more="key authentication only",
    ),
    Setting(
        "ssh_known_hosts",
        "ssh.known_hosts",
        ("--ssh-known-hosts",),
        check_text,
        None,
        "known_hosts file with every host's key; unknown or changed keys fail the host",
        "agentless hosts",
        metavar="FILE",
        shown_default=lambda: "~/.ssh/known_hosts",
    ),
    Setting(
        "ssh_timeout_seconds",
        "ssh.timeout",
        ("--ssh-timeout",),
        check_timeout,
        None,
        "per host and poll, connecting included",
        "agentless hosts",
        metavar="DURATION",
        shown_default=_ssh_default("DEFAULT_TIMEOUT_SECONDS"),
    ),
    Setting(
        "ssh_interval_seconds",
        "ssh.interval",
        ("--ssh-interval",),
        check_interval,
        None,
        "time between polls of one host",
        "agentless hosts",
        metavar="DURATION",
        shown_default=_ssh_default("DEFAULT_INTERVAL_SECONDS"),
    ),
    Setting(
        "ssh_max_sessions",
        "ssh.max_sessions",
        ("--ssh-max-sessions",),
        check_count,
        None,
        "hosts polled at once",
        "agentless hosts",
        metavar="N",
        shown_default=_ssh_default("DEFAULT_MAX_SESSIONS"),
    ),
    Setting(
        "ssh_nvidia_smi",
        "ssh.nvidia_smi",
        ("--ssh-nvidia-smi",),
        check_text,
        None,
        "nvidia-smi on the hosts (found on the PATH)",
        "agentless hosts",
        metavar="PATH",
        shown_default=_ssh_default("DEFAULT_NVIDIA_SMI"),
    ),
)

# Titles of the flag groups in --help, with a line under the title where one helps.
GROUP_HELP = {
    "collectors": "turn single NVML areas on or off (names as in vgpumon_scrape_collector_*)",
    "names": "who holds each GPU: VMs from libvirt, pods from the kubelet (off by default)",
    "agentless hosts": "nvidia-smi over SSH instead of NVML here (README: ESXi and other hosts "
    "you cannot install on)",
}

BY_NAME = {row.name: row for row in SETTINGS}
BY_KEY = {row.key: row for row in SETTINGS}
CADENCES = tuple(row for row in SETTINGS if row.cadence is not None)
CONFIG_ENV = ENV_PREFIX + "CONFIG"  # the config file itself (--config)
COLLECTORS_ENV = ENV_PREFIX + "COLLECTORS"  # the file's collectors map: NAME=true,NAME=false


def rows_in(*groups: str) -> tuple[Setting, ...]:
    """The rows of these flag groups, in table order (``top`` offers the ssh and names ones)."""
    return tuple(row for row in SETTINGS if row.group in groups)
