"""A real exporter server on loopback and an aiohttp client to it, for tests of the HTTP side.

It stands where aiohttp's ``TestClient(TestServer(app))`` stood when ``serve`` ran on aiohttp's
server: ``start_server``, ``get``, ``request``, ``close`` and ``app`` behave the same, and the
requests cross a real socket into :class:`vgpumon.export.listener.Listener`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web

from vgpumon.export.address import ListenAddress
from vgpumon.export.app import App
from vgpumon.export.connections import ConnectionGuard
from vgpumon.export.limits import ServerLimits
from vgpumon.export.listener import Listener

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class LiveClient:
    """Serves ``app`` on 127.0.0.1 (a free port) and sends requests to it."""

    def __init__(
        self,
        app: App,
        *,
        limits: ServerLimits | None = None,
        ssl_context: Any = None,
        **session_kwargs: Any,
    ) -> None:
        self.app = app
        self.listener = Listener(app, ConnectionGuard(limits or ServerLimits()))
        self._ssl_context = ssl_context
        self._session_kwargs = session_kwargs
        self.session: aiohttp.ClientSession | None = None
        self.port = 0

    async def start_server(self) -> None:
        await self.listener.start([ListenAddress("127.0.0.1", 0)], self._ssl_context)
        publisher = getattr(self.app, "publisher", None)
        if publisher is not None:  # as `serve` does: render the first snapshot at once
            publisher.kick()
        self.port = self.listener.addresses[0][1]
        self.session = aiohttp.ClientSession(**self._session_kwargs)

    def make_url(self, path: str) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def request(self, method: str, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        if self.session is None:
            await self.start_server()
        assert self.session is not None
        return await self.session.request(method, self.make_url(path), **kwargs)

    async def get(self, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
        return await self.request("GET", path, **kwargs)

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None
        await self.listener.close(1.0)
        publisher = getattr(self.app, "publisher", None)
        if publisher is not None:  # `serve` stops it; the listener does not
            await publisher.close()

    async def __aenter__(self) -> LiveClient:
        await self.start_server()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@contextlib.asynccontextmanager
async def loopback_get(path: str, handler: Handler) -> AsyncIterator[str]:
    """An aiohttp app on a free loopback port answering GET ``path`` with ``handler``; yields
    its base URL (``http://127.0.0.1:PORT``) and stops it afterwards."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
