"""The HTTP server's connection limits and their defaults, in one place.

A module of its own, free of the HTTP server, so the serve settings (``vgpumon.config.serve``)
can take their defaults from here without loading the HTTP stack.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """Connection limits; the defaults suit a Prometheus pair scraping every 1 s to 5 min."""

    max_connections: int = 128
    header_timeout_seconds: float = 10.0  # accept -> TLS handshake -> complete request head
    idle_timeout_seconds: float = 330.0  # longer than a 5 min scrape interval: connections reused
    write_timeout_seconds: float = 30.0  # a client that stops reading is dropped after this
