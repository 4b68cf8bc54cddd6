"""The exporter's web application: requests, responses, routes and middleware, without a server.

``serve`` needs five GET endpoints, basic auth and a few headers, not a web framework: this module
holds the little that is (a request, a response, a route table and middleware around it), and
:mod:`vgpumon.export.connections` speaks HTTP/1.1 for it. aiohttp's server did this before, and
importing it cost 15 MB of resident memory in a process that runs on every GPU host forever
(docs/exporter.md, "Memory"); the protocol itself is h11's, a maintained HTTP/1.1 state machine.

Header names in :attr:`Request.headers` are lower case; a header sent several times is joined
with ", " as RFC 9110 allows for list-valued fields.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

Body = Sequence[bytes]  # a body as parts, sent in order (an exposition is hundreds of them)


@dataclass(slots=True)
class Request:
    """One request as a handler sees it."""

    method: str  # upper case, as sent
    path: str  # the target up to "?", undecoded
    headers: Mapping[str, str]  # lower-case names
    remote: str = ""  # the peer's address, "" when unknown
    transport: asyncio.BaseTransport | None = None

    def peercert(self) -> Any:
        """The client certificate the TLS layer verified, or None."""
        if self.transport is None:
            return None
        return self.transport.get_extra_info("peercert")


@dataclass(slots=True)
class Response:
    """A response: status, headers, and a body as parts (see :data:`Body`)."""

    status: int = 200
    body: Body = ()
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False  # close the connection after sending (the answer to a malformed request)

    @property
    def length(self) -> int:
        return sum(len(part) for part in self.body)

    @property
    def reason(self) -> str:
        try:
            return HTTPStatus(self.status).phrase
        except ValueError:
            return ""


def text(body: str, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A ``text/plain`` response."""
    out = {"Content-Type": "text/plain; charset=utf-8", **(headers or {})}
    return Response(status, (body.encode(),), out)


def html_page(body: str) -> Response:
    return Response(200, (body.encode(),), {"Content-Type": "text/html; charset=utf-8"})


def json_response(value: Any, status: int = 200) -> Response:
    headers = {"Content-Type": "application/json; charset=utf-8"}
    return Response(status, (json.dumps(value).encode(),), headers)


Handler = Callable[[Request], Awaitable[Response]]
Middleware = Callable[[Request, Handler], Awaitable[Response]]


@dataclass
class App:
    """Routes (GET, and HEAD for each) plus middleware around all of them, 404s and 405s included.

    Middleware runs outermost first, for every request, so one that refuses (basic auth) guards
    unknown paths too, as the exporter toolkit does. ``response_hooks`` see every response
    before it is sent, errors from the server itself included (the web config's headers).
    """

    routes: dict[str, Handler] = field(default_factory=dict)
    middlewares: list[Middleware] = field(default_factory=list)
    response_hooks: list[Callable[[Response], None]] = field(default_factory=list)
    _chain: tuple[tuple[Middleware, ...], Handler] | None = field(default=None, repr=False)

    def add_get(self, path: str, handler: Handler) -> None:
        self.routes[path] = handler

    async def handle(self, request: Request) -> Response:
        """The response to ``request``, through every middleware."""
        middlewares = tuple(self.middlewares)
        if self._chain is None or self._chain[0] != middlewares:  # built once, again if changed
            handler: Handler = self._route
            for middleware in reversed(middlewares):
                handler = _wrap(middleware, handler)
            self._chain = (middlewares, handler)
        return await self._chain[1](request)

    async def _route(self, request: Request) -> Response:
        handler = self.routes.get(request.path)
        if handler is None:
            return text("404: Not Found\n", 404)
        if request.method not in ("GET", "HEAD"):
            return text("405: Method Not Allowed\n", 405, {"Allow": "GET, HEAD"})
        return await handler(request)

    def finish(self, response: Response) -> Response:
        for hook in self.response_hooks:
            hook(response)
        return response


def _wrap(middleware: Middleware, inner: Handler) -> Handler:
    async def handler(request: Request) -> Response:
        return await middleware(request, inner)

    return handler
