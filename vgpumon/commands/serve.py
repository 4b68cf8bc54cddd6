"""Run the Prometheus exporter.

A background sampler reads NVML once per interval into an immutable snapshot; /metrics,
/api/v1/snapshot, /-/healthy and /-/ready serve that snapshot without ever calling NVML.
Settings come from defaults, then --config FILE (YAML), then VGPUMON_* environment variables, then
flags; flags win.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from vgpumon.commands.ssh_args import ssh_settings_from
from vgpumon.config.flags import (
    add_collector_flags,
    add_flags,
    collector_flag_values,
    env_collectors,
    env_values,
    flag_values,
)
from vgpumon.config.serve import ServeSettings, load_file, merge
from vgpumon.config.table import CADENCES, CONFIG_ENV, rows_for
from vgpumon.errors import ConfigError

if TYPE_CHECKING:
    from vgpumon.collect.base import SamplerConfig
    from vgpumon.collect.recipe import SamplerRecipe
    from vgpumon.export.server import Reloaded
    from vgpumon.model import Snapshot
    from vgpumon.sources.ssh_targets import SshSettings

SERVE_ROWS = rows_for("serve")


def _one_line_error(message: str) -> NoReturn:
    raise ConfigError(f"serve: {message} (see 'vgpumon serve --help')")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from vgpumon.collect.registry import all_readers

    # A bad flag is one line, like every other user error, not a page of usage.
    parser.error = _one_line_error  # type: ignore[method-assign]
    parser.add_argument(
        "--config",
        metavar="FILE",
        help=f"YAML file with the same settings; variables and flags win (also ${CONFIG_ENV})",
    )
    # Every setting's flag comes from its row (vgpumon.config.table); the collectors' switches
    # come from the registry, so a new reader gets its flags.
    groups = add_flags(parser, SERVE_ROWS)
    readers = [(reader.name, reader.default_enabled) for reader in all_readers()]
    add_collector_flags(groups["collectors"], readers, env=True)


def sampler_recipe(settings: ServeSettings) -> SamplerRecipe:
    """What builds the sampler in the sampler process: the settings' values it needs.

    Metering runs last, once VM and pod names are merged (the recipe's enrichers). It reads the
    host's /proc (pods of processes, dead holders) only with per-process series on, the setting
    whose deployment joins the host PID namespace, and never for the simulator, whose PIDs are
    not the host's.
    """
    from vgpumon.collect.metering import MeteringConfig
    from vgpumon.collect.recipe import SamplerRecipe

    metering = None
    if settings.metering:
        host_processes = settings.process_series and settings.sim is None
        metering = MeteringConfig(
            interval_seconds=settings.interval_seconds,
            idle_ratio=settings.metering_idle_ratio,
            proc="/proc" if host_processes else None,
        )
    return SamplerRecipe(
        config=sampler_config(settings),
        sim=settings.sim,
        nvml_module=settings.nvml_module,
        libvirt_uri=settings.libvirt_uri,
        kubelet_socket=settings.kubelet_socket,
        kubernetes_resources=tuple(settings.kubernetes_resources),
        kubernetes_api=bool(settings.kubernetes_api),
        metering=metering,
        log_level=settings.log_level,
        log_format=settings.log_format,
        warning=root_warning(settings, agentless=False),
    )


def settings_from_args(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> ServeSettings:
    """Defaults < config file < ``VGPUMON_*`` variables < flags (docs/exporter.md)."""
    from vgpumon.collect.registry import collector_names

    environ = os.environ if environ is None else environ
    flags = flag_values(args, SERVE_ROWS)
    toggles = collector_flag_values(args)
    if toggles:
        flags["collectors"] = toggles
    config = getattr(args, "config", None) or environ.get(CONFIG_ENV) or None
    file_values = load_file(config, collector_names()) if config else {}
    from_env = env_values(environ, SERVE_ROWS)
    env_toggles = env_collectors(environ, collector_names())
    if env_toggles:
        from_env["collectors"] = env_toggles
    return merge(file_values, flags, env_values=from_env, config_file=config)


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
        "telemetry_path": settings.telemetry_path,
        "web_config_file": settings.web_config_file,
        "bcrypt_max_cost": settings.bcrypt_max_cost,
        "shutdown_timeout_seconds": settings.shutdown_timeout_seconds,
        "limits": settings.server_limits(),
        "reload": reload,
        "in_force": in_force,
    }


def run_agentless(settings: ServeSettings, ssh: SshSettings, args: argparse.Namespace) -> int:
    """Export agentless hosts (no NVML in this process)."""
    from vgpumon.export.server import serve
    from vgpumon.metrics.hosts import HOST_FAMILIES
    from vgpumon.sources.agentless import AgentlessFeed
    from vgpumon.sources.ssh import SshFleet

    if settings.fields:
        logging.getLogger("vgpumon.serve").warning(
            "fields: ignored for agentless hosts (nvidia-smi reports no NVML field values)"
        )

    async def main() -> int:
        feed = AgentlessFeed(SshFleet(ssh))
        return await serve(feed, families=HOST_FAMILIES, **serve_arguments(settings, args))

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
        cadences={str(row.cadence): getattr(settings, row.name) for row in CADENCES},
        extra_fields=field_keys(settings),
    )


def field_keys(settings: ServeSettings) -> tuple[int | tuple[int, int], ...]:
    """The NVML fields the sampler reads for the config's ``fields`` (id, or id and scope)."""
    return tuple(f.key for f in settings.fields)


# Settings that only a restart applies (a new listener, sampler or NVML module); a reload that
# changes one says so. The rows say which (``reloadable``); the collectors map is the file's.
RESTART_ONLY = (*(row.name for row in SERVE_ROWS if not row.reloadable), "collectors")


def reloaded(settings: ServeSettings) -> Reloaded:
    """The part of the settings ``serve`` applies on SIGHUP, and the part it only names."""
    from vgpumon.export.server import Reloaded
    from vgpumon.metrics.extra_fields import field_families
    from vgpumon.metrics.table import ExportOptions

    return Reloaded(
        options=ExportOptions(
            processes=settings.process_series,
            processes_max=settings.process_series_max,
            pod_series=settings.kubernetes_pod_series,
            families=field_families(settings.fields),
        ),
        max_requests=settings.max_requests,
        write_timeout_seconds=settings.write_timeout_seconds,
        log_level=settings.log_level,
        restart_only=tuple((name, getattr(settings, name)) for name in RESTART_ONLY),
    )


def root_warning(settings: ServeSettings, *, agentless: bool) -> str | None:
    """Running as root where it buys nothing: NVML opens the device files, which need only read
    access. The simulator and agentless hosts open no device here, so they say nothing."""
    if agentless or settings.sim is not None:
        return None
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    return (
        "running as root: the exporter needs only read access to the NVIDIA device files; "
        "run it as an unprivileged user"
    )


class NfdListener:
    """Rewrites the NFD features file from each snapshot whose values differ from the file's.

    Only from snapshots of a working NVML: a cycle without the driver would label the node as
    having no GPUs. Called on the event loop, it only computes the text; the write (a temporary
    file, fsync, rename) runs on a thread of its own (:class:`FeatureFileUpdater`), so a slow
    disk never holds a scrape. A failed write is logged once per distinct error, not every cycle.
    """

    def __init__(self, path: str) -> None:
        from vgpumon.nodefeatures import FeatureFileUpdater, FeatureFileWriter

        writer = FeatureFileWriter(path)
        if not writer.path.parent.is_dir():
            raise ConfigError(
                f"kubernetes.nfd_features_file: no directory {str(writer.path.parent)!r}"
            )
        self.path = path
        self._log = logging.getLogger("vgpumon.serve")
        self._last_error: str | None = None
        self.updater = FeatureFileUpdater(writer, written=self._written, failed=self._failed)

    def __call__(self, snapshot: Snapshot) -> None:
        from vgpumon.nodefeatures import node_features, render

        if not snapshot.health.up or snapshot.health.wedged:
            return
        self.updater.offer(render(node_features(snapshot)))

    def _written(self) -> None:
        self._log.info("wrote node features to %s", self.path)
        self._last_error = None

    def _failed(self, err: OSError) -> None:
        message = str(err)
        if self._last_error != message:
            self._log.warning("cannot write node features to %s: %s", self.path, message)
            self._last_error = message


def nfd_listener(path: str) -> NfdListener:
    """The listener that keeps ``path`` (``kubernetes.nfd_features_file``) current."""
    return NfdListener(path)


def run(args: argparse.Namespace) -> int:
    from vgpumon import allocator, logs
    from vgpumon.collect.placement import PlacedSampler
    from vgpumon.export.listener import refuse_duplicate_listen

    allocator.tune()  # before any thread starts, as in the sampler process
    settings = settings_from_args(args)
    refuse_duplicate_listen(settings.listen)  # before NVML is opened: a typo costs nothing
    ssh = ssh_settings_from(settings, "serve")  # flags over the config file's ssh section
    logs.configure(settings.log_level, settings.log_format)
    if ssh is not None:
        return run_agentless(settings, ssh, args)
    nfd = nfd_listener(settings.nfd_features_file) if settings.nfd_features_file else None
    # In this process on a small host, in a process of its own on a large one, from its first
    # cycle (vgpumon.collect.placement says why). Errors building the sampler (no NVML module)
    # end the command here, as one line.
    sampler = PlacedSampler(sampler_recipe(settings), deadline_seconds=settings.deadline_seconds)
    sampler.start()
    if nfd is not None:
        sampler.on_snapshot(nfd)
    try:
        # imported now: a large host's sampler process starts meanwhile
        from vgpumon.export.server import serve

        # A reload's fields reach the sampler (which ids it reads) and, through the export
        # options, the renderer (which families it writes).
        def on_reload(new: ServeSettings) -> None:
            sampler.set_extra_fields(field_keys(new))

        return asyncio.run(serve(sampler, **serve_arguments(settings, args, on_reload)))
    finally:
        # Bounded: the cycle in flight, then the sampler's own close; a wedged driver does not
        # keep the process alive.
        sampler.close()
