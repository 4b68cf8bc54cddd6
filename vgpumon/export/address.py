"""Where the exporter is reached: its listen addresses and the URL path of its metrics.

A module of its own, free of the HTTP server, so the serve settings (``vgpumon.config``) can parse
and check these values without loading the HTTP stack; ``export`` never imports ``config``.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple

from vgpumon.errors import ConfigError

DEFAULT_TELEMETRY_PATH = "/metrics"
# The exporter's other endpoints (vgpumon.export.server.ENDPOINTS, which a test keeps equal): the
# metrics cannot take one of their paths.
FIXED_PATHS = {
    "/": "the landing page",
    "/api/v1/snapshot": "the snapshot API",
    "/-/healthy": "the health endpoint",
    "/-/ready": "the readiness endpoint",
}


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


def parse_telemetry_path(text: str) -> str:
    """A path such as ``/metrics``: starts with ``/``, plain characters, none of the fixed paths."""
    if not text.startswith("/"):
        raise ConfigError(f"{text!r} must start with /")
    if any(c.isspace() or c in "?#%" or not c.isprintable() for c in text):
        raise ConfigError(f"{text!r} must not contain spaces, control characters, ?, # or %")
    if text in FIXED_PATHS:
        raise ConfigError(f"{text} is {FIXED_PATHS[text]}")
    return text
