"""Flags and set-up shared by the commands: reading NVML here, or exporters over HTTP."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vgpumon.config.flags import add_flags
from vgpumon.config.table import rows_for
from vgpumon.errors import ConfigError
from vgpumon.nvml.loader import open_session
from vgpumon.nvml.session import NvmlSession

if TYPE_CHECKING:  # the HTTP client (aiohttp) is imported only by commands that use it
    from vgpumon.sources.remote import Connection


def add_nvml_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """``--sim`` and ``--nvml-module``, the rows of the settings table every NVML command reads
    (the loader reads ``$VGPUMON_NVML_MODULE`` in every command)."""
    add_flags(parser, rows_for(command, "NVML source"), env=("nvml_module",))


def session_from_args(args: argparse.Namespace, *, init_attempts: int = 1) -> NvmlSession:
    return open_session(
        sim=getattr(args, "sim", None),
        module_name=getattr(args, "nvml_module", None),
        init_attempts=init_attempts,
    )


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """TLS and basic-auth flags for commands that read exporters over HTTP.

    A password is only ever read from a file or an environment variable: a flag value would sit
    in the process list for every local user to read.
    """
    group = parser.add_argument_group("exporter connection (with --url)")
    group.add_argument(
        "--ca-file",
        metavar="FILE",
        help="PEM file of the CA that signed the exporter's certificate",
    )
    group.add_argument(
        "--insecure",
        action="store_true",
        help="do not verify the exporter's TLS certificate (test set-ups only)",
    )
    group.add_argument("--username", metavar="USER", help="basic-auth user name")
    secret = group.add_mutually_exclusive_group()
    secret.add_argument(
        "--password-file", metavar="FILE", help="read the basic-auth password from FILE"
    )
    secret.add_argument(
        "--password-env", metavar="VAR", help="read the basic-auth password from $VAR"
    )


def connection_from_args(args: argparse.Namespace) -> Connection:
    """The :class:`Connection` the flags of :func:`add_connection_arguments` describe."""
    from vgpumon.sources.remote import Connection
    from vgpumon.sources.targets import password_from

    password = password_from(args.password_file, args.password_env)
    if args.insecure and args.ca_file is not None:
        raise ConfigError("--insecure skips certificate checks: it does not go with --ca-file")
    return Connection(
        ca_file=args.ca_file,
        insecure=args.insecure,
        username=args.username,
        password=password,
    )
