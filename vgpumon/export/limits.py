"""The HTTP server's connection limits and their defaults, in one place.

A module of its own, free of the HTTP server, so the serve settings (``vgpumon.config.serve``)
can take their defaults from here without loading the HTTP stack. docs/reliability.md has the
table of limits and what each attack gets with them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """Connection limits; the defaults suit a Prometheus pair scraping every 1 s to 5 min."""

    # At the cap, a connection that is not answering a request is closed to make room (idle
    # kept-alive ones first, oldest first); only when every one is answering is a new one refused.
    max_connections: int = 128
    header_timeout_seconds: float = 10.0  # accept -> TLS handshake; then -> complete request head
    # Longer than the common 15 s..1 min scrape intervals, so those reuse their connection; a
    # longer interval reconnects, which costs a scraper one handshake per scrape.
    idle_timeout_seconds: float = 65.0
    write_timeout_seconds: float = 30.0  # a client that stops reading is dropped after this


# bcrypt costs (each step doubles a check's work): what a hash can carry, and the most a basic-auth
# check may cost before its user is refused without a check (about a second of one current core).
MIN_BCRYPT_COST, MAX_BCRYPT_COST = 4, 31
DEFAULT_BCRYPT_MAX_COST = 14
