"""Live terminal view of this host's GPUs (NVML, --sim, --nvml-module), of remote exporters
(--url, repeatable, or --targets FILE: a plain list or Prometheus file_sd JSON/YAML), of hosts
vgpumon cannot run on (--ssh.targets HOST: their nvidia-smi over SSH, docs/agentless.md), or of
every host a Prometheus server scrapes (--prometheus URL alone, docs/fleet.md).

Keys: arrows/hjkl move and expand, Enter drills in, Escape goes back, / filters, s/S sort,
p pauses, t toggles the tree, 1-6 switch screens (6: capacity), ? shows every key,
q quits.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vgpumon.commands.common import add_nvml_arguments
from vgpumon.commands.prometheus_args import (
    PrometheusSettings,
    add_prometheus_arguments,
    prometheus_settings,
)
from vgpumon.commands.ssh_args import add_ssh_arguments, ssh_settings_from
from vgpumon.errors import ConfigError
from vgpumon.units import UnitError, parse_duration

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher
    from vgpumon.feed import Fleet, SnapshotFeed
    from vgpumon.sources.remote import Connection


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # No abbreviations: "--password VALUE" must be refused, not taken as --password-file.
    parser.allow_abbrev = False
    add_nvml_arguments(parser, "top")
    from vgpumon.commands import names

    names.add_arguments(parser, "top")  # VM and pod names for this host, as ``serve`` has them
    remote = parser.add_argument_group("remote exporters (instead of this host)")
    remote.add_argument(
        "--url",
        action="append",
        metavar="URL",
        help="an exporter's base URL, http(s)://HOST:PORT (repeatable)",
    )
    remote.add_argument(
        "--targets",
        metavar="FILE",
        help="exporters from a file: one URL per line, or Prometheus file_sd JSON/YAML",
    )
    remote.add_argument("--ca-file", metavar="FILE", help="CA bundle that signed the exporters")
    remote.add_argument(
        "--insecure", action="store_true", help="do not verify the exporters' certificates"
    )
    remote.add_argument("--username", metavar="USER", help="basic-auth user name")
    secret = remote.add_mutually_exclusive_group()
    secret.add_argument("--password-file", metavar="FILE", help="basic-auth password: first line")
    secret.add_argument("--password-env", metavar="VAR", help="basic-auth password: this variable")
    add_ssh_arguments(parser)
    parser.add_argument(
        "--interval",
        default="1",
        metavar="DURATION",
        help="time between readings, e.g. 1, 500ms, 2s (default 1)",
    )
    parser.add_argument(
        "--history",
        default="10m",
        metavar="DURATION",
        help="how far back the graphs reach, e.g. 10m, 1h (default 10m; memory: 16 bytes per "
        "point of each graphed series, docs/tui.md)",
    )
    add_prometheus_arguments(parser, "top")
    parser.add_argument(
        "--theme",
        metavar="NAME",
        help="a Textual theme, e.g. textual-dark, nord, vgpumon-mono (monochrome; the default "
        "under NO_COLOR and on a monochrome TERM such as dumb or xterm-mono)",
    )


def _interval(value: object) -> float:
    """A duration in the one units grammar (``1``, ``500ms``), above zero."""
    try:
        seconds = parse_duration(value, lo=0.0)
    except UnitError as err:
        raise ConfigError(f"top: --interval: {err}") from None
    if not seconds > 0:
        raise ConfigError(f"top: --interval must be a positive duration, got {value!r}")
    return seconds


MAX_HISTORY_POINTS = 86_400  # a day at 1 s: beyond this the memory is no longer "small"


def history_points(value: str, interval: float) -> int:
    """Points per series that ``--history`` asks for at this refresh interval."""
    try:
        seconds = parse_duration(value, lo=1.0)
    except UnitError as exc:
        raise ConfigError(f"top: --history: {exc}") from None
    points = math.ceil(seconds / interval)
    if points > MAX_HISTORY_POINTS:
        raise ConfigError(
            f"top: --history {value} at --interval {interval:g} is {points} points per series; "
            f"at most {MAX_HISTORY_POINTS}"
        )
    return max(2, points)


def metering_stage(args: argparse.Namespace) -> Enricher:
    """Usage counters, idle holders and contention for this host, as ``serve`` meters them (the
    usage screen, the idle badge, the scheduler screen's contention). The host's /proc (pods of
    processes, dead holders) only through the real NVML: a simulator's PIDs are not the host's."""
    from vgpumon.collect.metering import MeteringConfig, MeteringStage

    real = not getattr(args, "sim", None)
    return MeteringStage(
        MeteringConfig(interval_seconds=args.interval, proc="/proc" if real else None)
    )


# How long quitting gives NVML to shut down (after the terminal is given back): a wedged driver
# does not keep the process alive (``Sampler.close``).
NVML_CLOSE_SECONDS = 0.4


# Per query, from top: a screen waits on nothing, but a refresh should not outlast a few.
TOP_PROMETHEUS_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class TopFeed:
    """What ``top`` shows (one feed of every host it reads), whether its process ids are this
    machine's (this host through the real NVML: ``/proc`` facts and signals), and the
    Prometheus server it also reads, if any."""

    feed: SnapshotFeed[Fleet]
    this_host: bool = False
    # Readings of a host before printing it (``top`` piped): this host's sampler needs two, as
    # ``snapshot`` takes two cycles (rates and GPM activity come from the second).
    readings: int = 1
    prometheus: PrometheusSettings | None = None


def _sources_given(args: argparse.Namespace) -> bool:
    """A source of hosts other than Prometheus: exporters, agentless hosts, an NVML module."""
    return bool(
        args.url
        or args.targets
        or args.ssh_targets
        or args.ssh_targets_file
        or args.sim
        or args.nvml_module
    )


def feed_from_args(args: argparse.Namespace) -> TopFeed:
    """The feed the flags describe; every mistake is one ConfigError line."""
    interval = args.interval = _interval(args.interval)
    prometheus = prometheus_settings(args, "top")
    if prometheus is not None and not _sources_given(args):
        return TopFeed(_prometheus_fleet(args, prometheus), prometheus=prometheus)
    if prometheus is not None and prometheus.group_by:
        raise ConfigError(
            "top: --prometheus.group-by names the hosts Prometheus scrapes; with another source "
            "Prometheus only fills the graphs"
        )
    top = _host_feed(args, interval)
    return TopFeed(top.feed, this_host=top.this_host, prometheus=prometheus)


def _prometheus_fleet(
    args: argparse.Namespace, settings: PrometheusSettings
) -> SnapshotFeed[Fleet]:
    """Every host the server scrapes; the exporter flags say how to open one live."""
    from vgpumon.sources.prometheus_fleet import PrometheusFleet

    local_only = ("libvirt_uri", "kubelet_socket")
    if any(getattr(args, n, None) is not None for n in local_only):
        raise ConfigError(
            "top: --libvirt.uri/--kubernetes.socket name this host's VMs and pods; the hosts "
            "Prometheus scrapes bring their own names"
        )
    client = settings.client(TOP_PROMETHEUS_TIMEOUT_SECONDS)
    client.connection.ssl_context()  # a bad CA file is a start-up error
    return PrometheusFleet(
        client, group_by=settings.group_by, live_connection=_exporter_connection(args, 1.0)
    )


def _exporter_connection(args: argparse.Namespace, interval: float) -> Connection:
    """TLS and credentials for exporters (``--url``, or a host opened live from Prometheus)."""
    from vgpumon.sources.remote import Connection
    from vgpumon.sources.targets import password_from

    password = password_from(args.password_file, args.password_env)
    if password is not None and args.username is None:
        raise ConfigError("top: a password needs --username")
    connection = Connection(
        ca_file=args.ca_file,
        insecure=args.insecure,
        username=args.username,
        password=password,
        timeout_seconds=max(1.0, min(5.0, interval * 3)),
    )
    connection.ssl_context()  # a bad CA file is a start-up error, not a screen of red hosts
    return connection


def _host_feed(args: argparse.Namespace, interval: float) -> TopFeed:
    remote = bool(args.url or args.targets)
    if args.ssh_targets or args.ssh_targets_file:
        if remote:
            raise ConfigError("top: --ssh.targets reads hosts over SSH; drop --url/--targets")
        # Agentless hosts: one nvidia-smi poll per --ssh.interval (default 15 s), not --interval.
        settings = ssh_settings_from(args, "top")
        if settings is not None:
            from vgpumon.sources.ssh import SshFleet

            return TopFeed(SshFleet(settings))
    if remote and (args.sim or args.nvml_module):
        raise ConfigError("top: --url/--targets read remote exporters; drop --sim/--nvml-module")
    local_only = ("libvirt_uri", "kubelet_socket")
    if remote and any(getattr(args, n, None) is not None for n in local_only):
        raise ConfigError(
            "top: --libvirt.uri/--kubernetes.socket name this host's VMs and pods; remote "
            "exporters bring their own names"
        )
    remote_only = ("ca_file", "username", "password_file", "password_env")
    if not remote and (args.insecure or any(getattr(args, n) for n in remote_only)):
        raise ConfigError("top: TLS and auth flags need --url or --targets")
    if not remote:
        import asyncio

        from vgpumon.collect import Sampler
        from vgpumon.collect.base import SamplerConfig
        from vgpumon.commands.common import session_from_args
        from vgpumon.commands.names import from_args as enrichers_from_args
        from vgpumon.sources.fleet import this_host

        enrichers = [*enrichers_from_args(args), metering_stage(args)]
        session = session_from_args(args)
        # The sampler as ``serve`` runs it (enrichers and metering included), the one host.
        sampler = Sampler(session, SamplerConfig(interval_seconds=interval), enrichers=enrichers)
        # NVML shutdown may block: off the feed's loop, and bounded.
        feed = this_host(
            sampler, closers=[lambda: asyncio.to_thread(sampler.close, NVML_CLOSE_SECONDS)]
        )
        return TopFeed(feed, this_host=not session.source.startswith("sim:"), readings=2)

    from vgpumon.sources.remote import RemoteTarget, remote_fleet
    from vgpumon.sources.targets import load_targets

    targets = [RemoteTarget(url) for url in args.url or ()]
    if args.targets:
        targets += load_targets(args.targets)
    seen: set[str] = set()
    for target in targets:
        if target.host in seen:
            raise ConfigError(f"top: host {target.host} is given twice")
        seen.add(target.host)
    connection = _exporter_connection(args, interval)
    return TopFeed(remote_fleet(targets, connection, interval_seconds=interval))


def _stdout_is_terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed or replaced by something that is no file
        return False


def run(args: argparse.Namespace) -> int:
    top = feed_from_args(args)  # also turns --interval into seconds
    points = history_points(args.history, args.interval)
    from vgpumon.sources.history import History
    from vgpumon.tui.app import create_app
    from vgpumon.tui.lifeline import Lifeline

    backfill = usage = None
    if top.prometheus is not None:
        from vgpumon.sources.prometheus import PrometheusBackfill
        from vgpumon.sources.usage import UsageClient

        # One client per reader: each runs on its own loop (the feed's thread, the UI's).
        client = top.prometheus.client(TOP_PROMETHEUS_TIMEOUT_SECONDS)
        usage = UsageClient(client)  # the usage screen's last hour and day
        # The same window as the graphs: --history.
        backfill = PrometheusBackfill(
            client, window_seconds=points * args.interval, step_seconds=args.interval
        )
    app = create_app(
        top.feed,
        this_host=top.this_host,
        history=History(points),
        interval=args.interval,
        theme=args.theme,
        backfill=backfill,
        usage=usage,
        lifeline=(lifeline := Lifeline()),
    )
    if not _stdout_is_terminal():
        # Piped or redirected: one reading as text, then exit (every flag was checked above).
        import asyncio

        from vgpumon.commands.top_print import first_reading, print_reading

        return print_reading(asyncio.run(first_reading(top.feed, readings=top.readings)))
    # From here SIGHUP, SIGTERM and the terminal's loss end ``top`` within a second.
    lifeline.install()
    app.run()
    app.stop_feed()  # the terminal is back; the feed frees what it holds, bounded
    # Nothing is left to do: end the process here. The interpreter's own teardown would free
    # every object of the session one by one first (a second and more on a large host, after
    # the terminal was already given back), which is what quitting must not wait for. The
    # status: 128 + the signal's number when a signal or the terminal's loss ended it.
    logging.shutdown()
    with contextlib.suppress(OSError):  # stdout may be the terminal that went
        sys.stdout.flush()
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(lifeline.code or app.return_code or 0)
