"""Run the Prometheus exporter.

A background sampler reads NVML once per interval into an immutable snapshot; /metrics,
/api/v1/snapshot, /-/healthy and /-/ready serve that snapshot without ever calling NVML.
Settings come from defaults, then --config FILE (YAML), then flags; flags win.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from vgpumon.commands import names
from vgpumon.commands.common import add_nvml_arguments
from vgpumon.commands.ssh_args import add_ssh_arguments, ssh_flag_values, ssh_settings_from
from vgpumon.config.serve import (
    DEFAULT_PORT,
    ServeSettings,
    check_bool,
    check_cadence,
    check_count,
    check_dispatch,
    check_interval,
    check_listen,
    check_log_level,
    check_patterns,
    check_render_ahead,
    check_text,
    check_timeout,
    load_file,
    merge,
)
from vgpumon.errors import ConfigError

if TYPE_CHECKING:
    from vgpumon.collect.base import SamplerConfig
    from vgpumon.collect.enrich.base import Enricher
    from vgpumon.export.server import Reloaded
    from vgpumon.sources.ssh_targets import SshSettings

COLLECTOR_DEST = "collector:"

# settings field -> (flag, check); the checks are the config file's, so both say the same thing.
FLAGS: dict[str, tuple[str, Any]] = {
    "listen": ("--listen", check_listen),
    "interval_seconds": ("--interval", check_interval),
    "deadline_seconds": ("--deadline", check_timeout),
    "dispatch": ("--dispatch", check_dispatch),
    "processes": ("--processes", check_bool),
    "processes_max": ("--processes-max", check_count),
    "pcie_throughput": ("--pcie-throughput", check_bool),
    "energy_interval_seconds": ("--interval.energy", check_cadence),
    "pcie_throughput_interval_seconds": ("--interval.pcie-throughput", check_cadence),
    "processes_interval_seconds": ("--interval.processes", check_cadence),
    "gpm_interval_seconds": ("--interval.gpm", check_cadence),
    "bar1_interval_seconds": ("--interval.bar1", check_cadence),
    "license_interval_seconds": ("--interval.license", check_cadence),
    "pcie_replay_interval_seconds": ("--interval.pcie-replay", check_cadence),
    "nvlink_interval_seconds": ("--interval.nvlink", check_cadence),
    "web_config_file": ("--web.config.file", check_text),
    "max_requests": ("--web.max-requests", check_count),
    "render_ahead": ("--web.render-ahead", check_render_ahead),
    "shutdown_timeout_seconds": ("--web.shutdown-timeout", check_timeout),
    "max_connections": ("--web.max-connections", check_count),
    "header_timeout_seconds": ("--web.header-timeout", check_timeout),
    "idle_timeout_seconds": ("--web.idle-timeout", check_timeout),
    "write_timeout_seconds": ("--web.write-timeout", check_timeout),
    "sim": ("--sim", check_text),
    "nvml_module": ("--nvml-module", check_text),
    "log_level": ("--log-level", check_log_level),
    "libvirt_uri": ("--libvirt-uri", check_text),
    "kubelet_socket": ("--kubelet-socket", check_text),
    "kubernetes_resources": ("--kubernetes-resource", check_patterns),
    "kubernetes_pod_series": ("--kubernetes-pod-series", check_bool),
    "kubernetes_api": ("--kubernetes-api", check_bool),
}


def _one_line_error(message: str) -> NoReturn:
    raise ConfigError(f"serve: {message} (see 'vgpumon serve --help')")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpumon.collect.registry import all_readers

    # A bad flag is one line, like every other user error, not a page of usage.
    parser.error = _one_line_error  # type: ignore[method-assign]
    defaults = ServeSettings()
    parser.add_argument(
        "--config", metavar="FILE", help="YAML file with the same settings (flags win)"
    )
    add_nvml_arguments(parser)
    web = parser.add_argument_group("web")
    web.add_argument(
        "--listen",
        "--web.listen-address",  # node_exporter's spelling, so fleet tooling can pass either
        dest="listen",
        action="append",
        metavar="ADDR",
        help=f"address to serve on, repeatable: 0.0.0.0:PORT, [::]:PORT or :PORT "
        f"(all interfaces; default :{DEFAULT_PORT})",
    )
    web.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="FILE",
        help="TLS and basic-auth settings in Prometheus' web-config format",
    )
    web.add_argument(
        "--web.max-requests",
        dest="max_requests",
        metavar="N",
        help=f"requests served at once; more get 503 at once (default {defaults.max_requests})",
    )
    web.add_argument(
        "--web.render-ahead",
        dest="render_ahead",
        metavar="WHEN",
        help="auto: render a new snapshot before a scrape asks only where rendering is slow "
        "(a small host's cheap render waits for the scrape); always: every snapshot "
        f"(default {defaults.render_ahead})",
    )
    web.add_argument(
        "--web.shutdown-timeout",
        dest="shutdown_timeout_seconds",
        metavar="DURATION",
        help="on SIGTERM/SIGINT, wait at most this long for requests and a running cycle "
        f"(default {defaults.shutdown_timeout_seconds:g})",
    )
    web.add_argument(
        "--web.max-connections",
        dest="max_connections",
        metavar="N",
        help="connections served at once; at the cap an idle or unfinished one makes room, and "
        f"a new one is refused only when all are answering (default {defaults.max_connections})",
    )
    web.add_argument(
        "--web.header-timeout",
        dest="header_timeout_seconds",
        metavar="SECONDS",
        help="a connection must finish its TLS handshake and send a request head within this "
        f"(default {defaults.header_timeout_seconds:g})",
    )
    web.add_argument(
        "--web.idle-timeout",
        dest="idle_timeout_seconds",
        metavar="SECONDS",
        help="a kept-alive connection with no new request for this long is closed "
        f"(default {defaults.idle_timeout_seconds:g})",
    )
    web.add_argument(
        "--web.write-timeout",
        dest="write_timeout_seconds",
        metavar="SECONDS",
        help="a client that does not take a response within this is dropped "
        f"(default {defaults.write_timeout_seconds:g})",
    )
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument(
        "--interval",
        dest="interval_seconds",
        metavar="DURATION",
        help=f"time between sampling cycles (default {defaults.interval_seconds:g})",
    )
    sampling.add_argument(
        "--deadline",
        dest="deadline_seconds",
        metavar="DURATION",
        help="a cycle still running after this is abandoned and the sampler reported wedged "
        f"(default {defaults.deadline_seconds:g})",
    )
    sampling.add_argument(
        "--dispatch",
        dest="dispatch",
        metavar="MODE",
        help="read the GPUs one after another (serial), all at once (parallel), or serially "
        f"while their reads are short (auto; default {defaults.dispatch})",
    )
    sampling.add_argument(
        "--processes",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="export per-process series (opt-in: pids churn the TSDB)",
    )
    sampling.add_argument(
        "--processes-max",
        dest="processes_max",
        metavar="N",
        help="at most this many processes get series; vgpumon_process_series_truncated says "
        f"when more were left out (default {defaults.processes_max})",
    )
    sampling.add_argument(
        "--pcie-throughput",
        dest="pcie_throughput",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read PCIe throughput (the NVML call blocks about 20 ms per direction and GPU)",
    )
    for dest, flag, what in (
        ("energy_interval_seconds", "--interval.energy", "the energy counter"),
        ("pcie_throughput_interval_seconds", "--interval.pcie-throughput", "PCIe throughput"),
        ("processes_interval_seconds", "--interval.processes", "process lists"),
        (
            "gpm_interval_seconds",
            "--interval.gpm",
            "GPM activity (the average since the last read)",
        ),
        ("bar1_interval_seconds", "--interval.bar1", "BAR1 memory"),
        ("license_interval_seconds", "--interval.license", "license state"),
        ("pcie_replay_interval_seconds", "--interval.pcie-replay", "the PCIe replay counter"),
        ("nvlink_interval_seconds", "--interval.nvlink", "NVLink per-link state and counters"),
    ):
        sampling.add_argument(
            flag,
            dest=dest,
            metavar="SECONDS",
            help=f"read {what} at most this often, keeping the last value between reads; "
            f"0: every cycle (default {getattr(defaults, dest):g})",
        )
    sampling.add_argument(
        "--log-level",
        dest="log_level",
        metavar="LEVEL",
        help="debug, info, warning or error (default info)",
    )
    names.add_arguments(parser)
    add_ssh_arguments(parser)
    collectors = parser.add_argument_group(
        "collectors", "turn single NVML areas on or off (names as in vgpumon_scrape_collector_*)"
    )
    for reader in all_readers():
        state = "on" if reader.default_enabled else "off"
        collectors.add_argument(
            f"--collector.{reader.name}",
            dest=COLLECTOR_DEST + reader.name,
            action="store_const",
            const=True,
            default=None,
            help=f"enable the {reader.name} collector (default {state})",
        )
        collectors.add_argument(
            f"--no-collector.{reader.name}",
            dest=COLLECTOR_DEST + reader.name,
            action="store_const",
            const=False,
            help=argparse.SUPPRESS,
        )


def build_enrichers(settings: ServeSettings) -> list[Enricher]:
    """The enrichers the settings ask for (:func:`vgpumon.commands.names.build`)."""
    return names.build(
        libvirt_uri=settings.libvirt_uri,
        kubelet_socket=settings.kubelet_socket,
        resources=settings.kubernetes_resources,
        kubernetes_api=settings.kubernetes_api,
    )


def settings_from_args(args: argparse.Namespace) -> ServeSettings:
    from vgpumon.collect.registry import collector_names

    flag_values: dict[str, Any] = {}
    for field_name, (flag, check) in FLAGS.items():
        value = getattr(args, field_name, None)
        if value is not None:
            flag_values[field_name] = check(value, flag)
    toggles = tuple(
        (dest[len(COLLECTOR_DEST) :], bool(value))
        for dest, value in vars(args).items()
        if dest.startswith(COLLECTOR_DEST) and value is not None
    )
    if toggles:
        flag_values["collectors"] = toggles
    flag_values.update(ssh_flag_values(args))
    config = getattr(args, "config", None)
    file_values = load_file(config, collector_names()) if config else {}
    return merge(file_values, flag_values, config_file=config)


def serve_arguments(
    settings: ServeSettings,
    args: argparse.Namespace,
    on_reload: Callable[[ServeSettings], None] | None = None,
) -> dict[str, Any]:
    """What ``vgpumon.export.server.serve`` takes besides the sampler (or agentless exporter).

    ``on_reload`` gets the settings of every reload that loaded, before the server applies its
    part: the sampler's share of a reload (the configured fields) goes there.
    """
    in_force = reloaded(settings)

    async def reload() -> Reloaded:
        # SIGHUP: the same files and flags as at start, read off the event loop (a config on a
        # slow or hung file system must not stop scrapes).
        new = await asyncio.to_thread(settings_from_args, args)
        result = reloaded(new)
        if on_reload is not None:
            on_reload(new)
        return result

    return {
        "listen": settings.listen,
        "options": in_force.options,
        "max_requests": settings.max_requests,
        "render_ahead": settings.render_ahead == "always",
        "web_config_file": settings.web_config_file,
        "shutdown_timeout_seconds": settings.shutdown_timeout_seconds,
        "limits": settings.server_limits(),
        "reload": reload,
        "in_force": in_force,
    }


def run_agentless(settings: ServeSettings, ssh: SshSettings, args: argparse.Namespace) -> int:
    """Export agentless hosts (no NVML in this process)."""
    from vgpumon.export.hosts import AgentlessExporter
    from vgpumon.export.server import serve
    from vgpumon.sources.ssh import SshSource

    if settings.fields:
        logging.getLogger("vgpumon.serve").warning(
            "fields: ignored for agentless hosts (nvidia-smi reports no NVML field values)"
        )

    async def main() -> int:
        return await serve(AgentlessExporter(SshSource(ssh)), **serve_arguments(settings, args))

    return asyncio.run(main())


def sampler_config(settings: ServeSettings) -> SamplerConfig:
    """What the sampler needs from the settings (built here: ``export`` never imports collect)."""
    from vgpumon.collect.base import SamplerConfig
    from vgpumon.collect.registry import all_readers

    known = [(r.name, r.default_enabled) for r in all_readers()]
    return SamplerConfig(
        interval_seconds=settings.interval_seconds,
        deadline_seconds=settings.deadline_seconds,
        dispatch=settings.dispatch,
        collectors=settings.enabled_collectors(known),
        pcie_throughput=settings.pcie_throughput,
        cadences={
            "energy": settings.energy_interval_seconds,
            "pcie_throughput": settings.pcie_throughput_interval_seconds,
            "processes": settings.processes_interval_seconds,
            "gpm": settings.gpm_interval_seconds,
            "bar1": settings.bar1_interval_seconds,
            "license": settings.license_interval_seconds,
            "pcie_replay": settings.pcie_replay_interval_seconds,
            "nvlink": settings.nvlink_interval_seconds,
        },
        extra_fields=field_keys(settings),
    )


def field_keys(settings: ServeSettings) -> tuple[int | tuple[int, int], ...]:
    """The NVML fields the sampler reads for the config's ``fields`` (id, or id and scope)."""
    return tuple(f.key for f in settings.fields)


# Settings that only a restart applies (a new listener, sampler or NVML module); a reload that
# changes one says so.
RESTART_ONLY = (
    "listen",
    "interval_seconds",
    "deadline_seconds",
    "dispatch",
    "collectors",
    "pcie_throughput",
    "energy_interval_seconds",
    "pcie_throughput_interval_seconds",
    "processes_interval_seconds",
    "gpm_interval_seconds",
    "bar1_interval_seconds",
    "license_interval_seconds",
    "pcie_replay_interval_seconds",
    "nvlink_interval_seconds",
    "sim",
    "nvml_module",
    "web_config_file",
    "max_connections",
    "header_timeout_seconds",
    "idle_timeout_seconds",
    "render_ahead",
    # The enrichers run with the sampler.
    "libvirt_uri",
    "kubelet_socket",
    "kubernetes_resources",
    "kubernetes_api",
    "ssh_targets",
    "ssh_targets_file",
    "ssh_user",
    "ssh_identity_files",
    "ssh_known_hosts",
    "ssh_timeout_seconds",
    "ssh_interval_seconds",
    "ssh_max_sessions",
    "ssh_nvidia_smi",
)


def reloaded(settings: ServeSettings) -> Reloaded:
    """The part of the settings ``serve`` applies on SIGHUP, and the part it only names."""
    from vgpumon.export.server import Reloaded
    from vgpumon.metrics.extra_fields import field_families
    from vgpumon.metrics.table import ExportOptions

    return Reloaded(
        options=ExportOptions(
            processes=settings.processes,
            processes_max=settings.processes_max,
            pod_series=settings.kubernetes_pod_series,
            families=field_families(settings.fields),
        ),
        max_requests=settings.max_requests,
        write_timeout_seconds=settings.write_timeout_seconds,
        log_level=settings.log_level,
        restart_only=tuple((name, getattr(settings, name)) for name in RESTART_ONLY),
    )


def run(args: argparse.Namespace) -> int:
    from vgpumon import allocator

    # Before any thread starts (docs/exporter.md, "Memory"): large bodies go back to the system
    # when freed, and the per-GPU worker threads share two malloc arenas.
    allocator.tune()
    from vgpumon.collect.sampler import Sampler
    from vgpumon.export.listener import refuse_duplicate_listen
    from vgpumon.export.server import serve
    from vgpumon.nvml.loader import resolve_module
    from vgpumon.nvml.session import NvmlSession

    settings = settings_from_args(args)
    refuse_duplicate_listen(settings.listen)  # before NVML is opened: a typo costs nothing
    ssh = ssh_settings_from(settings, "serve")  # flags over the config file's ssh section
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if ssh is not None:
        return run_agentless(settings, ssh, args)
    # A module that cannot be imported is an installation error (exit 2); a driver that is not
    # loaded yet is not: serve starts, says up 0 and why, and keeps retrying nvmlInit.
    module, source = resolve_module(settings.sim, settings.nvml_module)
    session = NvmlSession(module, source)
    try:
        session.init()
        init_error = None
    except Exception as exc:  # noqa: BLE001 - any failure of nvmlInit is retried
        init_error = str(exc) or type(exc).__name__
    sampler = Sampler(session, sampler_config(settings), enrichers=build_enrichers(settings))
    if init_error is not None:
        logging.getLogger("vgpumon.serve").warning(
            "NVML could not be initialised from %s (%s); serving vgpumon_up 0 and retrying",
            source,
            init_error,
        )
        sampler.start_uninitialised(init_error)
    try:
        # A reload's fields reach the sampler (which ids it reads) and, through the export
        # options, the renderer (which families it writes).
        def on_reload(new: ServeSettings) -> None:
            sampler.set_extra_fields(field_keys(new))

        return asyncio.run(serve(sampler, **serve_arguments(settings, args, on_reload)))
    finally:
        # Bounded (CLOSE_TIMEOUT_SECONDS): a wedged driver does not keep the process alive.
        sampler.close()
