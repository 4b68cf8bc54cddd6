"""Connection-level limits of the exporter's HTTP server: what aiohttp leaves unbounded.

Measured before these limits: 500 idle TLS connections (no credentials needed) took resident
memory from 107 to 245 MB and were never closed; a client that connects and sends nothing, or sends
headers one byte a minute, kept its connection for an hour (aiohttp's keep-alive default). Here:

* **connection cap**: at most ``max_connections`` connections are served at once; one more is
  closed as soon as it is accepted (a TLS one before any TLS state is made), so memory is
  bounded by the cap, not by the number of clients;
* **TLS handshake timeout** and **header-read timeout**: a connection must finish its handshake
  and send a complete request head within ``header_timeout_seconds`` of being accepted;
* **idle keep-alive timeout**: a kept-alive connection with no new request for
  ``idle_timeout_seconds`` is closed (aiohttp's own keep-alive timer, given this value);
* **write timeout**: enforced where bodies are sent (:func:`vgpumon.export.server.send_body`);
* **client errors** (malformed requests) are logged at debug level in one line, without a
  traceback: anyone can send them, so at ERROR they would flood the log.

The pieces hook into aiohttp's ``RequestHandler`` (subclassed) and ``TCPSite`` (its ``start``
passes our protocol factory and handshake timeout to ``loop.create_server``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import weakref
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from vgpumon.export.limits import ServerLimits

__all__ = ["ConnectionGuard", "GuardedHandler", "GuardedSite", "ServerLimits"]

log = logging.getLogger(__name__)
_QUIET = logging.Logger("vgpumon.export.connections.quiet")  # not registered: drops everything
_QUIET.disabled = True


class ConnectionGuard:
    """Counts live connections and builds the protocol for each accepted one."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self._live: set[int] = set()
        self._ids = itertools.count()
        self.refused = 0  # connections closed at once because the cap was reached
        self.header_timeouts = 0  # connections closed for not sending a request head in time

    @property
    def open(self) -> int:
        """Connections accepted and not yet closed (handshakes in progress included)."""
        return len(self._live)

    def factory(self, server: web.Server, tls: bool = False) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for ``loop.create_server``, serving through ``server``.

        Over the cap, a plain connection gets a protocol that closes it at once. A TLS one must
        not even start its handshake: asyncio allocates a 256 KiB buffer per TLS connection
        before the handshake (500 refused-but-handshaking clients took 100 MB) and the handshake
        costs CPU. So the factory raises instead: asyncio then drops the accepted socket, which
        closes it, without creating any TLS state.
        """
        kwargs: dict[str, Any] = dict(getattr(server, "_kwargs", {}))
        kwargs["keepalive_timeout"] = self.limits.idle_timeout_seconds

        def make() -> asyncio.Protocol:
            if len(self._live) >= self.limits.max_connections:
                self.refused += 1
                if tls:
                    raise ConnectionRefusedError("vgpumon: connection cap reached")
                return _Refused()
            token = next(self._ids)
            self._live.add(token)
            handler = GuardedHandler(
                server, guard=self, token=token, loop=asyncio.get_running_loop(), **kwargs
            )
            # A TLS connection whose handshake fails never reaches connection_made/lost: its slot
            # is freed when the handler object goes.
            weakref.finalize(handler, self._live.discard, token)
            return handler

        return make

    def release(self, token: int) -> None:
        self._live.discard(token)


class _Refused(asyncio.Protocol):
    """The protocol of a connection over the cap: closed the moment it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort() if isinstance(transport, asyncio.Transport) else transport.close()


class GuardedHandler(RequestHandler):
    """aiohttp's request handler plus the header-read timeout, the slot and quiet client errors."""

    def __init__(self, manager: web.Server, *, guard: ConnectionGuard, token: int, **kw: Any):
        super().__init__(manager, **kw)
        self._guard = guard
        self._token = token
        self._header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._header_timer = asyncio.get_running_loop().call_later(
            self._guard.limits.header_timeout_seconds, self._head_too_slow
        )

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._header_timer is not None and self._request_count > 0:
            self._header_timer.cancel()
            self._header_timer = None

    def _head_too_slow(self) -> None:
        self._header_timer = None
        if self._request_count == 0:
            self._guard.header_timeouts += 1
            log.debug("closing a connection that sent no complete request head in time")
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        self._guard.release(self._token)
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A malformed request: one debug line, no traceback (aiohttp logs those at ERROR)."""
        if not (isinstance(exc, HttpProcessingError) and 400 <= status < 500):
            return super().handle_error(request, status, exc, message)
        text = " ".join(str(exc.message or message or "").split())
        log.debug("bad request from %s: %s %s", request.remote, status, text)
        saved = self.logger
        self.logger = _QUIET
        try:
            return super().handle_error(request, status, exc, message)
        finally:
            self.logger = saved


class GuardedSite(web.TCPSite):
    """``TCPSite`` whose connections go through a :class:`ConnectionGuard`."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int,
        *,
        guard: ConnectionGuard,
        ssl_context: Any = None,
    ) -> None:
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        if server is None:
            raise RuntimeError("the runner is not set up")
        loop = asyncio.get_running_loop()
        extra: dict[str, Any] = {}
        if self._ssl_context is not None:
            extra["ssl_handshake_timeout"] = self._guard.limits.header_timeout_seconds
        self._server = await loop.create_server(
            self._guard.factory(server, tls=self._ssl_context is not None),
            self._host,
            self._port,
            ssl=self._ssl_context,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
            **extra,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port
