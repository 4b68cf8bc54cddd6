"""The one table of settings: each setting has one name, spelled three ways.

Each :class:`Setting` row declares a setting once: its field on
:class:`~vgpumon.config.serve.ServeSettings`, its name, its check, default, help, the commands that
read it and whether SIGHUP applies it. The name ``a.b_c`` is the config file key (``b_c`` in the
``a`` section); the flag is ``--a.b-c`` and the environment variable ``VGPUMON_A_B_C``, both
derived from it by :func:`flag_of` and :func:`env_of`, never written by hand. From the rows come
the argparse flags of every command (:mod:`vgpumon.config.flags`), the file's keys and the
environment's variables (:mod:`vgpumon.config.serve`), the settings table of docs/exporter.md
(:mod:`vgpumon.config.docs_gen`), what a reload applies and what it only names
(``vgpumon.commands.serve.reloaded``), and the sampler's cadences. A new setting is a new row and
a field; tests/config/test_settings_table.py and tests/config/test_one_name_per_setting.py keep
them in step.

Old spellings (``old_flags``, ``old_keys`` and the variables of the old keys) keep working and
say once, on stderr, that they are deprecated and what replaced them.
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
from vgpumon.collect.registry import default_cadences
from vgpumon.config.checks import (
    Check,
    check_bcrypt_cost,
    check_bool,
    check_cadence,
    check_count,
    check_dispatch,
    check_interval,
    check_label_names,
    check_listen,
    check_log_format,
    check_log_level,
    check_new_file,
    check_patterns,
    check_prometheus_url,
    check_ratio,
    check_readable_file,
    check_readable_files,
    check_render_ahead,
    check_selector,
    check_ssh_targets,
    check_telemetry_path,
    check_text,
    check_timeout,
)
from vgpumon.export.address import DEFAULT_TELEMETRY_PATH, ListenAddress
from vgpumon.export.limits import DEFAULT_BCRYPT_MAX_COST, ServerLimits

# Prometheus' exporter range 9100-9999; see docs/exporter.md for how this number was chosen.
DEFAULT_PORT = 9839
ENV_PREFIX = "VGPUMON_"

# value: one value; list: repeatable flag, YAML list, comma-separated variable; switch: --x and
# --no-x (or only --x where ``negatable`` is off), true/false in the file and the variable.
Kind = Literal["value", "list", "switch"]

# The commands that read a row (a flag a command does not read is refused, not ignored).
SERVE = ("serve",)
# Commands that sample NVML in this process, naming VMs and pods as serve does.
SAMPLING = ("serve", "top", "snapshot", "record")
# Commands that read NVML here at all (--sim, --nvml-module).
NVML = (*SAMPLING, "node-features", "check", "validate")
# Commands that read agentless hosts.
AGENTLESS = ("serve", "top")
# Commands that query a Prometheus server (not serve: an exporter is scraped, it never queries).
PROMETHEUS = ("top", "usage")


def flag_of(key: str) -> str:
    """The flag of a name: ``web.max_requests`` -> ``--web.max-requests``."""
    return "--" + key.replace("_", "-")


def env_of(key: str) -> str:
    """The environment variable of a name: ``web.max_requests`` -> ``VGPUMON_WEB_MAX_REQUESTS``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def no_flag(flag: str) -> str:
    """A switch's off form: ``--metering.enabled`` -> ``--no-metering.enabled``."""
    return "--no-" + flag.removeprefix("--")


@dataclass(frozen=True)
class Setting:
    name: str  # the ServeSettings field
    key: str  # the one name: config key, and from it the flag and the variable
    check: Check
    default: Any
    help: str
    group: str  # the flags' group in --help
    kind: Kind = "value"
    metavar: str | None = None
    reloadable: bool = False  # SIGHUP applies it while serving; otherwise it takes a restart
    const: Any = None  # the value of a flag given without one (--libvirt.uri)
    negatable: bool = True  # a switch has --no-x too
    commands: tuple[str, ...] = SERVE  # the commands that read it (and offer its flag)
    old_flags: tuple[str, ...] = ()  # deprecated flags (a switch's --no- forms follow)
    old_keys: tuple[str, ...] = ()  # deprecated keys (and their variables)
    path: bool = False  # a file: relative to the config file when given there
    more: str = ""  # docs/exporter.md only: what does not fit a --help line
    # Where the default lives elsewhere (None here: the module using the setting decides).
    shown_default: Callable[[], str] | None = None
    cadence: str | None = None  # the sampler's cadence this interval sets
    exclusive: str | None = None  # rows with the same tag cannot be given together as flags

    @property
    def flag(self) -> str:
        return flag_of(self.key)

    @property
    def env(self) -> str:
        return env_of(self.key)

    @property
    def old_envs(self) -> tuple[str, ...]:
        """The variables of the old keys (where they differ from the new one's)."""
        return tuple(dict.fromkeys(e for e in map(env_of, self.old_keys) if e != self.env))


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
    """The agentless module's default (imported when shown: serve loads it only with ssh)."""

    def shown() -> str:
        from vgpumon.sources import ssh_targets

        value = getattr(ssh_targets, name)
        return f"{value:g}" if isinstance(value, float) else str(value)

    return shown


def _cadence(cadence: str, what: str, more: str = "", *, old_flag: bool = True) -> Setting:
    """A cadence row: its default is the collector's own (every command samples as serve does).
    ``old_flag``: the row also answers to its old ``--interval.*`` spelling (a row added since the
    flags were renamed never had one)."""
    return Setting(
        f"{cadence}_interval_seconds",
        f"intervals.{cadence}",
        check_cadence,
        default_cadences()[cadence],
        f"read {what} at most this often, keeping the last value between reads; 0: every cycle",
        "sampling",
        metavar="DURATION",
        old_flags=(f"--interval.{cadence.replace('_', '-')}",) if old_flag else (),
        more=more,
        cadence=cadence,
    )


_LIMITS = ServerLimits()

SETTINGS: tuple[Setting, ...] = (
    Setting(
        "listen",
        "web.listen_address",
        check_listen,
        (ListenAddress(None, DEFAULT_PORT),),
        "address to serve on, repeatable: 0.0.0.0:PORT, [::]:PORT, HOST:PORT or :PORT "
        "(every interface, IPv4 and IPv6)",
        "web",
        kind="list",
        metavar="ADDR",
        old_flags=("--listen",),
        old_keys=("listen",),
        more="node_exporter's name; an address given twice is an error",
    ),
    Setting(
        "telemetry_path",
        "web.telemetry_path",
        check_telemetry_path,
        DEFAULT_TELEMETRY_PATH,
        "path under which the metrics are served",
        "web",
        metavar="PATH",
        more="the landing page links it; `/api/v1/snapshot` and `/-/*` stay where they are",
    ),
    Setting(
        "web_config_file",
        "web.config.file",
        check_text,
        None,
        "TLS and basic-auth settings in Prometheus' web-config format",
        "web",
        metavar="FILE",
        old_keys=("web.config_file",),
        path=True,
        more="([web-config.md](web-config.md)); relative to the config file when given there; "
        "SIGHUP re-reads the file it names",
    ),
    Setting(
        "max_requests",
        "web.max_requests",
        check_count,
        40,
        "requests for the metrics and the snapshot served at once; more get 503 at once",
        "web",
        metavar="N",
        reloadable=True,
        more="(node_exporter's meaning: `/-/healthy` and `/-/ready` are never refused for load)",
    ),
    Setting(
        "bcrypt_max_cost",
        "web.bcrypt_max_cost",
        check_bcrypt_cost,
        DEFAULT_BCRYPT_MAX_COST,
        "the most a basic-auth password check may cost (bcrypt cost); a user whose hash costs "
        "more is refused without a check, with a warning",
        "web",
        metavar="COST",
        more="(each step doubles a check's time: 14 is about a second of one core; an unknown "
        "user always costs 10, [web-config.md](web-config.md))",
    ),
    Setting(
        "render_ahead",
        "web.render_ahead",
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
        check_timeout,
        _LIMITS.header_timeout_seconds,
        "a connection must finish its TLS handshake and send a request head within this",
        "web",
        metavar="DURATION",
    ),
    Setting(
        "idle_timeout_seconds",
        "web.idle_timeout",
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
        check_interval,
        1.0,
        "time between sampling cycles, 10 ms to 1 day",
        "sampling",
        metavar="DURATION",
    ),
    Setting(
        "deadline_seconds",
        "deadline",
        check_timeout,
        5.0,
        "a cycle still running after this is abandoned and the sampler reported wedged",
        "sampling",
        metavar="DURATION",
    ),
    Setting(
        "dispatch",
        "dispatch",
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
        "collector.disable_defaults",
        check_bool,
        False,
        "run only the collectors turned on by name (--collector.NAME, collector.NAME: true)",
        "collectors",
        kind="switch",
        negatable=False,
        old_keys=("disable_default_collectors",),
    ),
    Setting(
        "process_series",
        "process_series",
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
        check_bool,
        False,
        "read PCIe throughput (the NVML call blocks about 20 ms per direction and GPU)",
        "sampling",
        kind="switch",
    ),
    Setting(
        "metering",
        "metering.enabled",
        check_bool,
        True,
        "usage counters per vGPU, MIG instance, process and pod (off only to compare what they "
        "cost)",
        "sampling",
        kind="switch",
        old_flags=("--metering",),
        more="([metering.md](metering.md))",
    ),
    Setting(
        "metering_idle_ratio",
        "metering.idle_ratio",
        check_ratio,
        0.05,
        "a licensed, running vGPU under this SM utilization counts as idle "
        "(vgpumon_vgpu_idle_seconds); a ratio such as 0.05 (a percentage is read too)",
        "sampling",
        metavar="RATIO",
    ),
    _cadence("energy", "the energy counter"),
    _cadence("pcie_throughput", "PCIe throughput (when on)"),
    _cadence("processes", "process lists"),
    _cadence(
        "gpm",
        "GPM activity (the average since the last read)",
        "(the SM, tensor and DRAM activity exported is the average between the last two samples)",
    ),
    _cadence("bar1", "BAR1 memory"),
    _cadence(
        "license",
        "license state",
        "(GPU and each vGPU; a vGPU seen for the first time is read at once)",
    ),
    _cadence("pcie_replay", "the PCIe replay counter"),
    _cadence(
        "migration",
        "each vGPU's live-migration payload size",
        "(a vGPU seen for the first time is read at once)",
        old_flag=False,
    ),
    _cadence(
        "nvlink",
        "NVLink per-link state and counters",
        "(see [How often each value is read](#how-often-each-value-is-read))",
    ),
    Setting(
        "sim",
        "sim",
        check_text,
        None,
        "use the simulated NVML with a built-in scenario name or a scenario file "
        "('vgpumon scenarios' lists them)",
        "NVML source",
        metavar="SCENARIO",
        commands=NVML,
        exclusive="nvml",
        more="a module chosen by a higher layer (flag, variable) replaces the file's",
    ),
    Setting(
        "nvml_module",
        "nvml_module",
        check_text,
        None,
        "import this module instead of pynvml (any module with pynvml's functions)",
        "NVML source",
        metavar="NAME",
        commands=NVML,
        exclusive="nvml",
        shown_default=lambda: "pynvml",
    ),
    Setting(
        "log_level",
        "log.level",
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
        check_log_format,
        "logfmt",
        "logfmt or json (one object per line: time, level, logger, message); times in UTC",
        "logging",
        metavar="FORMAT",
    ),
    Setting(
        "libvirt_uri",
        "libvirt.uri",
        check_text,
        None,
        f"name the VM of each vGPU from libvirt, read-only (URI {DEFAULT_LIBVIRT_URI} when the "
        "flag has none; needs the libvirt extra)",
        "names",
        metavar="URI",
        const=DEFAULT_LIBVIRT_URI,
        commands=SAMPLING,
        old_flags=("--libvirt-uri",),
        more="([names.md](names.md))",
    ),
    Setting(
        "kubelet_socket",
        "kubernetes.socket",
        check_text,
        None,
        f"attach pods to GPUs through the kubelet's pod-resources socket ({DEFAULT_KUBELET_SOCKET}"
        " when the flag has none; needs the kubernetes extra)",
        "names",
        metavar="PATH",
        const=DEFAULT_KUBELET_SOCKET,
        commands=SAMPLING,
        old_flags=("--kubelet-socket",),
    ),
    Setting(
        "kubernetes_resources",
        "kubernetes.resources",
        check_patterns,
        (),
        "resource names to read, repeatable, shell patterns",
        "names",
        kind="list",
        metavar="PATTERN",
        commands=SAMPLING,
        old_flags=("--kubernetes-resource",),
        shown_default=lambda: " ".join(DEFAULT_KUBERNETES_RESOURCES),
    ),
    Setting(
        "kubernetes_pod_series",
        "kubernetes.pod_series",
        check_bool,
        False,
        "per-pod utilization and memory series (opt-in: pods churn the TSDB)",
        "names",
        kind="switch",
        reloadable=True,
        old_flags=("--kubernetes-pod-series",),
    ),
    Setting(
        "kubernetes_api",
        "kubernetes.api",
        check_bool,
        False,
        "read KubeVirt VM names from the API server (in a pod, with 'get pods' rights)",
        "names",
        kind="switch",
        commands=SAMPLING,
        old_flags=("--kubernetes-api",),
    ),
    Setting(
        "nfd_features_file",
        "kubernetes.nfd_features_file",
        check_new_file,
        None,
        "keep FILE (in node-feature-discovery's features.d) current with this node's GPU "
        "facts; rewritten atomically when a value changes",
        "names",
        metavar="FILE",
        old_flags=("--nfd-features-file",),
        path=True,
        more="([kubernetes.md](kubernetes.md))",
    ),
    Setting(
        "ssh_targets",
        "ssh.targets",
        check_ssh_targets,
        (),
        "read this host's GPUs from its nvidia-smi over SSH (repeatable); every series gets "
        "host=HOST",
        "agentless hosts",
        kind="list",
        metavar="[USER@]HOST[:PORT]",
        commands=AGENTLESS,
        old_flags=("--ssh",),
        more="instead of NVML here ([agentless.md](agentless.md))",
    ),
    Setting(
        "ssh_targets_file",
        "ssh.targets_file",
        check_readable_file,
        None,
        "more targets, one [USER@]HOST[:PORT] per line (# comments)",
        "agentless hosts",
        metavar="FILE",
        commands=AGENTLESS,
        old_flags=("--ssh-targets",),
        path=True,
    ),
    Setting(
        "ssh_user",
        "ssh.user",
        check_text,
        None,
        "user for targets without USER@ (default, as for ssh: the User of ~/.ssh/config, else "
        "the local user)",
        "agentless hosts",
        metavar="USER",
        commands=AGENTLESS,
        old_flags=("--ssh-user",),
    ),
    Setting(
        "ssh_identity_files",
        "ssh.identity",
        check_readable_files,
        (),
        "private key file, repeatable (otherwise the SSH agent and ~/.ssh keys)",
        "agentless hosts",
        kind="list",
        metavar="FILE",
        commands=AGENTLESS,
        old_flags=("--ssh-identity",),
        path=True,
        more="key authentication only",
    ),
    Setting(
        "ssh_known_hosts",
        "ssh.known_hosts",
        check_readable_file,
        None,
        "known_hosts file with every host's key; unknown or changed keys fail the host",
        "agentless hosts",
        metavar="FILE",
        commands=AGENTLESS,
        old_flags=("--ssh-known-hosts",),
        path=True,
        shown_default=lambda: "~/.ssh/known_hosts",
    ),
    Setting(
        "ssh_timeout_seconds",
        "ssh.timeout",
        check_timeout,
        None,
        "per host and poll, connecting included",
        "agentless hosts",
        metavar="DURATION",
        commands=AGENTLESS,
        old_flags=("--ssh-timeout",),
        shown_default=_ssh_default("DEFAULT_TIMEOUT_SECONDS"),
    ),
    Setting(
        "ssh_interval_seconds",
        "ssh.interval",
        check_interval,
        None,
        "time between polls of one host",
        "agentless hosts",
        metavar="DURATION",
        commands=AGENTLESS,
        old_flags=("--ssh-interval",),
        shown_default=_ssh_default("DEFAULT_INTERVAL_SECONDS"),
    ),
    Setting(
        "ssh_max_sessions",
        "ssh.max_sessions",
        check_count,
        None,
        "hosts polled at once",
        "agentless hosts",
        metavar="N",
        commands=AGENTLESS,
        old_flags=("--ssh-max-sessions",),
        shown_default=_ssh_default("DEFAULT_MAX_SESSIONS"),
    ),
    Setting(
        "ssh_nvidia_smi",
        "ssh.nvidia_smi",
        check_text,
        None,
        "nvidia-smi on the hosts (found on the PATH)",
        "agentless hosts",
        metavar="PATH",
        commands=AGENTLESS,
        old_flags=("--ssh-nvidia-smi",),
        shown_default=_ssh_default("DEFAULT_NVIDIA_SMI"),
    ),
    # ---- Prometheus (top, usage; docs/fleet.md)
    Setting(
        "prometheus_url",
        "prometheus",
        check_prometheus_url,
        None,
        "a Prometheus (Thanos Query, Mimir, VictoriaMetrics) query API: with no other source, "
        "top shows every host it scrapes; with one, the graphs' past and the usage screen's hours "
        "come from it; usage reads its totals there",
        "Prometheus",
        metavar="URL",
        commands=PROMETHEUS,
    ),
    Setting(
        "prometheus_selector",
        "prometheus.selector",
        check_selector,
        None,
        'label matchers added to every query, e.g. {cluster="eu-1"}',
        "Prometheus",
        metavar="MATCHERS",
        commands=PROMETHEUS,
    ),
    Setting(
        "prometheus_group_by",
        "prometheus.group_by",
        check_label_names,
        (),
        "target labels that group and name hosts before their instance, e.g. cluster (repeatable)",
        "Prometheus",
        kind="list",
        metavar="LABEL",
        commands=("top",),
    ),
    Setting(
        "prometheus_username",
        "prometheus.username",
        check_text,
        None,
        "basic-auth user name",
        "Prometheus",
        metavar="USER",
        commands=PROMETHEUS,
    ),
    Setting(
        "prometheus_password_file",
        "prometheus.password_file",
        check_readable_file,
        None,
        "basic-auth password: the file's first line",
        "Prometheus",
        metavar="FILE",
        commands=PROMETHEUS,
        exclusive="prometheus-secret",
    ),
    Setting(
        "prometheus_bearer_token_file",
        "prometheus.bearer_token_file",
        check_readable_file,
        None,
        "a bearer token (Authorization: Bearer): the file's first line",
        "Prometheus",
        metavar="FILE",
        commands=PROMETHEUS,
        exclusive="prometheus-secret",
    ),
    Setting(
        "prometheus_ca_file",
        "prometheus.ca_file",
        check_readable_file,
        None,
        "CA bundle that signed the server's certificate",
        "Prometheus",
        metavar="FILE",
        commands=PROMETHEUS,
    ),
    Setting(
        "prometheus_insecure",
        "prometheus.insecure",
        check_bool,
        False,
        "do not verify the server's certificate",
        "Prometheus",
        kind="switch",
        negatable=False,
        commands=PROMETHEUS,
    ),
    Setting(
        "prometheus_timeout_seconds",
        "prometheus.timeout",
        check_timeout,
        None,
        "per query",
        "Prometheus",
        metavar="DURATION",
        commands=PROMETHEUS,
        old_flags=("--timeout",),
        shown_default=lambda: "10s in top, 30s in usage",
    ),
)

# Titles of the flag groups in --help, with a line under the title where one helps.
GROUP_HELP = {
    "collectors": "turn single NVML areas on or off (names as in vgpumon_scrape_collector_*)",
    "names": "who holds each GPU: VMs from libvirt, pods from the kubelet (off by default)",
    "agentless hosts": "nvidia-smi over SSH instead of NVML here (README: ESXi and other hosts "
    "you cannot install on)",
    "Prometheus": "the metrics store that scrapes the exporters (docs/fleet.md)",
}

BY_NAME = {row.name: row for row in SETTINGS}
# The rows serve reads: its fields (vgpumon.config.serve.ServeSettings), file keys and variables.
SERVE_SETTINGS = tuple(row for row in SETTINGS if "serve" in row.commands)
BY_KEY = {row.key: row for row in SETTINGS}
CADENCES = tuple(row for row in SETTINGS if row.cadence is not None)
CONFIG_ENV = ENV_PREFIX + "CONFIG"  # the config file itself (--config)

# The collectors' switches come from the collector registry (a new reader gets them): each
# collector NAME is the setting ``collector.NAME`` (``--collector.NAME`` / ``--no-collector.NAME``,
# ``collector: {NAME: bool}`` in the file, ``VGPUMON_COLLECTOR_NAME``), beside
# ``collector.disable_defaults``. The old spellings: the file's ``collectors`` map and
# ``VGPUMON_COLLECTORS=NAME=true,NAME=false``.
COLLECTOR_SECTION = "collector"
OLD_COLLECTORS_KEY = "collectors"
OLD_COLLECTORS_ENV = env_of(OLD_COLLECTORS_KEY)


def collector_key(name: str) -> str:
    return f"{COLLECTOR_SECTION}.{name}"


def rows_for(command: str, *groups: str) -> tuple[Setting, ...]:
    """The rows ``command`` reads, in table order, of these flag groups (all without any)."""
    return tuple(
        row for row in SETTINGS if command in row.commands and (not groups or row.group in groups)
    )
