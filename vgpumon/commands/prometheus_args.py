"""The ``--prometheus*`` flags of the commands that query a Prometheus server (``top``, ``usage``).

One definition (the rows of :mod:`vgpumon.config.table`, group "Prometheus"), so each command
names, checks and defaults them the same way, and one client built from them
(:class:`~vgpumon.sources.promapi.PrometheusClient`): the fleet, the graphs' past and the usage
totals all query with the same selector, credentials and TLS. A secret is read from a file,
never from a flag (a flag sits in the process list for every local user to read).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from vgpumon.config.flags import add_flags, flag_values
from vgpumon.config.table import BY_NAME, rows_for
from vgpumon.errors import ConfigError

if TYPE_CHECKING:
    from vgpumon.sources.promapi import PrometheusClient


def rows(command: str) -> tuple[Any, ...]:
    return rows_for(command, "Prometheus")


def add_prometheus_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    add_flags(parser, rows(command), env=False)


@dataclass(frozen=True)
class PrometheusSettings:
    url: str
    selector: str | None = None
    group_by: tuple[str, ...] = ()
    username: str | None = None
    password_file: str | None = None
    bearer_token_file: str | None = None
    ca_file: str | None = None
    insecure: bool = False
    timeout_seconds: float | None = None

    def client(self, default_timeout: float) -> PrometheusClient:
        """The client these settings describe; a secret file that cannot be read, or
        credentials that do not go together, is one ConfigError line."""
        from vgpumon.sources.promapi import PrometheusClient
        from vgpumon.sources.remote import Connection
        from vgpumon.sources.targets import password_from

        if self.insecure and self.ca_file is not None:
            raise ConfigError(
                "--prometheus.insecure skips certificate checks: it does not go with "
                "--prometheus.ca-file"
            )
        password = password_from(self.password_file, None)
        if password is not None and self.username is None:
            raise ConfigError("--prometheus.password-file needs --prometheus.username")
        token = password_from(self.bearer_token_file, None)
        if token is not None and self.username is not None:
            raise ConfigError(
                "give --prometheus.bearer-token-file or --prometheus.username, not both"
            )
        connection = Connection(
            ca_file=self.ca_file,
            insecure=self.insecure,
            username=self.username,
            password=password,
            bearer_token=token,
            timeout_seconds=self.timeout_seconds or default_timeout,
        )
        return PrometheusClient(self.url, connection, selector=self.selector)


def prometheus_settings(args: argparse.Namespace, command: str) -> PrometheusSettings | None:
    """The ``--prometheus*`` flags given, checked; None without ``--prometheus``. Another
    ``--prometheus.*`` flag without it is an error, not ignored."""
    values = flag_values(args, rows(command))
    url = values.pop("prometheus_url", None)
    given = {k: v for k, v in values.items() if v not in (None, False, ())}
    if url is None:
        if given:
            flags = ", ".join(BY_NAME[name].flag for name in given)
            raise ConfigError(f"{command}: {flags} need --prometheus URL")
        return None
    return PrometheusSettings(
        url=url,
        selector=values.get("prometheus_selector"),
        group_by=tuple(values.get("prometheus_group_by") or ()),
        username=values.get("prometheus_username"),
        password_file=values.get("prometheus_password_file"),
        bearer_token_file=values.get("prometheus_bearer_token_file"),
        ca_file=values.get("prometheus_ca_file"),
        insecure=bool(values.get("prometheus_insecure")),
        timeout_seconds=values.get("prometheus_timeout_seconds"),
    )
