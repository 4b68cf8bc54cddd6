"""Binding the exporter's addresses, and shutting its connections down in order.

A :class:`Listener` owns the listening sockets of one :class:`~vgpumon.export.app.App` and, through
its :class:`~vgpumon.export.connections.ConnectionGuard`, every connection they accepted. Start-up
binds every address or fails with one line naming the one that could not be bound; shutdown
stops accepting, lets the requests being answered finish within a bound, and then drops what is
left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Protocol

from vgpumon.errors import ConfigError
from vgpumon.export.app import App
from vgpumon.export.connections import ConnectionGuard
from vgpumon.export.limits import ServerLimits

BACKLOG = 128


class ListenAt(Protocol):
    """An address to listen on (the settings' ``ListenAddress`` is one); prints as it is given."""

    @property
    def host(self) -> str | None:  # None: every interface, IPv4 and IPv6
        ...

    @property
    def port(self) -> int: ...


def authority(host: str, port: int) -> str:
    """``host:port``, an IPv6 host in brackets (a bound socket's address in a URL)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refuse_duplicate_listen(listen: Sequence[ListenAt]) -> None:
    """One line for an address given twice, instead of the kernel's "address already in use"."""
    seen: set[ListenAt] = set()
    for address in listen:
        if address in seen:
            raise ConfigError(f"listen address {address} is given twice")
        seen.add(address)


class Listener:
    """The listening sockets and live connections of one app."""

    def __init__(self, app: App, guard: ConnectionGuard | None = None) -> None:
        self.app = app
        self.guard = guard or ConnectionGuard(ServerLimits())
        self._servers: list[asyncio.Server] = []

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every bound socket: ``:PORT`` is one per address family, port 0 the
        port the kernel chose."""
        return [s.getsockname()[:2] for server in self._servers for s in server.sockets]

    async def start(self, listen: Sequence[ListenAt], ssl_context: Any = None) -> list[str]:
        """Bind every address; returns the URLs bound. A failure closes what was bound."""
        refuse_duplicate_listen(listen)
        loop = asyncio.get_running_loop()
        # Always a plain TCP server: TLS runs inside each connection's protocol, which then
        # sees every connection from its accept to its close (connections.TlsFront says why).
        factory = self.guard.factory(self.app, ssl_context)
        for i, address in enumerate(listen):
            try:
                server = await loop.create_server(
                    factory,
                    address.host,
                    address.port,
                    backlog=BACKLOG,
                    reuse_address=True,
                )
            except OSError as err:
                for server in self._servers:
                    server.close()
                self._servers.clear()
                raise ConfigError(
                    f"cannot listen on {address}: {_reason(err, listen[:i], address)}"
                ) from None
            self._servers.append(server)
        scheme = "https" if ssl_context is not None else "http"
        return [f"{scheme}://{authority(host, port)}" for host, port in self.addresses]

    async def close(self, timeout: float = 5.0) -> None:
        """Stop accepting; let requests being answered finish within ``timeout``; drop the rest.

        Idle kept-alive connections are closed at once, busy ones after their response.
        """
        deadline = time.monotonic() + timeout
        for server in self._servers:
            server.close()
        for connection in self.guard.connections():
            connection.close_when_idle()
        while self.guard.open and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for connection in self.guard.connections():
            connection.abort()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()


def _reason(err: OSError, earlier: Sequence[ListenAt], address: ListenAt) -> str:
    reason = err.strerror or str(err)
    overlap = next(
        (a for a in earlier if a.port == address.port and None in (a.host, address.host)), None
    )
    if overlap is not None:
        reason += f" (it overlaps {overlap}, given before: ':PORT' is every interface)"
    return reason
