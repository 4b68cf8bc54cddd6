"""HTTP/1.1 connections of the exporter, and the limits that keep abusive clients cheap.

Each accepted connection is a :class:`Connection`: an asyncio protocol that feeds the bytes to an
h11 state machine, hands each complete request to the :class:`~vgpumon.export.app.App`, and
writes the response in chunks under flow control. The limits (the attacks each answers, and what
they cost a server without it, are in docs/reliability.md):

* **connection cap**: at most ``max_connections`` connections hold a slot at once, from accept
  to close, TLS handshakes included (:class:`ConnectionGuard`, :class:`TlsFront`). At the cap
  the connection waiting longest without being answered (idle kept-alive first, then one still
  in its handshake or head) is closed to make room; a new one is refused only when every slot
  is answering a request. So memory is bounded by the cap, and no set of idle, half-open or
  probing clients keeps a scraper out;
* **TLS handshake timeout** and **header timeout**: a TLS connection must finish its handshake
  within ``header_timeout_seconds`` of being accepted; a connection must send a complete request
  head within that time of being ready (accepted, or handshake done), and a later request on a
  kept-alive connection within that time of its first byte;
* **idle keep-alive timeout**: a kept-alive connection with no new request for
  ``idle_timeout_seconds`` is closed;
* **write timeout**: a response not taken by the client within ``write_timeout_seconds`` is
  abandoned and the connection dropped; at most one chunk of it is buffered at a time;
* **one request at a time**: while a response is being made, reading stops, so a client that
  pipelines cannot make the server buffer its requests;
* **pipelining bound**: a connection gets at most :data:`MAX_PIPELINED` answers to requests it
  sent before reading the answers to earlier ones; the last of them says ``Connection: close``
  and the connection is closed after it. A client that pipelines without reading could otherwise
  make the server answer without end, each answer queued in the kernel for a client that never
  takes it;
* **stalled and closing connections make room**: at the cap, a connection whose client stopped
  taking its answer (the transport paused writing) or that is closed with answers still unsent
  gives up its slot like an idle one, so connections that do not read cannot hold every slot
  until their write timeout, and renew the lock-out without credentials;
* **client errors** (malformed requests, control bytes in a header, heads over 16 KiB, an
  HTTP/0.9 line, unknown versions or expectations) get a 400, 431, 505 or 417 and a close, as
  Go's servers answer, and one debug log line without a traceback: anyone can send them, so at
  ERROR they would flood the log. A client that leaves while being answered is one debug line
  too, and no further write is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import re
import ssl
import time
from asyncio import sslproto
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import h11

from vgpumon.export.app import App, Body, Request, Response, text
from vgpumon.export.limits import ServerLimits

__all__ = [
    "CHUNK_BYTES",
    "Connection",
    "ConnectionGuard",
    "ServerLimits",
    "ServerStats",
    "TlsFront",
    "chunks",
]

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024  # what one connection may have queued in its transport at a time
MAX_HEAD_BYTES = 16 * 1024  # a request head larger than this is refused (431)
# Answers one connection gets to requests sent ahead of reading earlier answers (pipelining);
# Prometheus and browsers never pipeline, so only a client that queues answers reaches it.
MAX_PIPELINED = 16


class ServerStats:
    """What the server did, counted for its own ``/metrics`` families (vgpumon.export.serverstats).

    Plain integers and dicts, written only on the event loop.
    """

    def __init__(self) -> None:
        self.accepted = 0  # connections given a slot
        self.refused = 0  # closed at once: the cap was reached and every slot was answering
        self.evicted = dict.fromkeys(EVICTABLE, 0)  # closed to make room, by what they were doing
        self.timeouts = dict.fromkeys(("header", "tls_handshake", "write", "idle"), 0)
        self.requests: dict[int, int] = {}  # answers sent, by status code


class Slot(Protocol):
    """What holds a connection slot: a plain connection, or a TLS one from its first byte."""

    token: int

    @property
    def state(self) -> str: ...  # "handshake", "head", "idle", "busy", "stalled" or "closing"

    @property
    def since(self) -> float: ...  # loop time it entered its state (accepted, last response)

    def close_when_idle(self) -> None: ...

    def abort(self) -> None: ...


# States whose slot is taken back at the cap: first those that hold it for nothing (closed with
# answers unsent, kept alive idle), then, oldest first, those not being answered (a head or a TLS
# handshake still coming in) or not reading their answer (stalled).
EVICTABLE = ("closing", "idle", "head", "handshake", "stalled")
_FIRST = ("closing", "idle")


class ConnectionGuard:
    """Gives and takes back connection slots, and builds the protocol for each accepted socket.

    A slot is held from the moment the kernel hands over the socket until asyncio reports it
    closed (``connection_lost``, which every transport calls once ``connection_made`` ran),
    whatever happened in between: a failed, reset or timed-out TLS handshake included. At the
    cap, the connection that has waited longest without being answered gives up its slot to the
    new one: an idle kept-alive connection first (oldest idle first), then one still in its TLS
    handshake or still sending its request head. Only when every slot is answering a request is
    a new connection refused. So no set of idle, half-open or probing clients keeps a new
    scraper out; docs/reliability.md has what each attack gets.
    """

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self.stats = ServerStats()
        self._live: dict[int, Slot] = {}
        self._ids = itertools.count()

    @property
    def open(self) -> int:
        """Connections holding a slot (TLS handshakes in progress included)."""
        return len(self._live)

    @property
    def refused(self) -> int:
        return self.stats.refused

    @property
    def header_timeouts(self) -> int:
        return self.stats.timeouts["header"]

    @property
    def write_timeouts(self) -> int:
        return self.stats.timeouts["write"]

    def connections(self) -> list[Slot]:
        return list(self._live.values())

    def factory(
        self, app: App, ssl_context: ssl.SSLContext | None = None
    ) -> Callable[[], asyncio.BaseProtocol]:
        """The protocol factory for ``loop.create_server`` (always plain TCP), serving ``app``.

        With ``ssl_context`` each connection starts as a :class:`TlsFront`, which owns the slot
        and starts TLS once the first byte shows a TLS record (no TLS state before that).
        """
        if ssl_context is None:
            return lambda: Connection(app, self)
        return lambda: TlsFront(app, self, ssl_context)

    def admit(self, slot: Slot) -> bool:
        """Give ``slot`` a slot, making room if needed; False when it must be refused."""
        if len(self._live) >= self.limits.max_connections and not self._make_room():
            self.stats.refused += 1
            return False
        slot.token = next(self._ids)
        self._live[slot.token] = slot
        self.stats.accepted += 1
        return True

    def _make_room(self) -> bool:
        victim: Slot | None = None
        best: tuple[int, float] | None = None
        for slot in self._live.values():
            state = slot.state
            if state not in EVICTABLE:
                continue
            rank = (0 if state in _FIRST else 1, slot.since)
            if best is None or rank < best:
                best, victim = rank, slot
        if victim is None:
            return False
        state = victim.state
        self.stats.evicted[state] += 1
        log.debug("closing a connection (%s) to make room for a new one", state)
        self.release(victim.token)
        victim.abort()
        return True

    def release(self, token: int) -> None:
        self._live.pop(token, None)


class _Gone(Exception):
    """The client closed or reset the connection while its response was being written."""


class TlsFront(asyncio.BufferedProtocol):
    """A TLS connection from its accepted socket on: holds the slot, bounds the handshake.

    asyncio's TLS server never tells the application about a handshake that fails, is reset or
    times out (``connection_made``/``connection_lost`` are only called after a successful one),
    so a slot taken for it could never be given back. Here the plain TCP connection is the
    protocol asyncio reports to, always; TLS (asyncio's own ``SSLProtocol``) runs inside it. The
    first byte decides: a TLS handshake record starts TLS, anything that looks like HTTP gets
    the plain 400 Go's servers answer, anything else is closed.
    """

    def __init__(self, app: App, guard: ConnectionGuard, context: ssl.SSLContext) -> None:
        self.token = -1
        self._app = app
        self._guard = guard
        self._context = context
        self._raw: asyncio.Transport | None = None
        self._tls: Any = None  # asyncio.sslproto.SSLProtocol (its stubs lag Python 3.11's)
        self.connection: Connection | None = None
        self._buffer = bytearray(16 * 1024)
        self._timer: asyncio.TimerHandle | None = None
        self._accepted = 0.0
        self._remote = ""

    @property
    def state(self) -> str:
        if self.connection is not None and self.connection.made:
            return self.connection.state
        return "handshake"

    @property
    def since(self) -> float:
        if self.connection is not None and self.connection.made:
            return self.connection.since
        return self._accepted

    @property
    def raw_closing(self) -> bool:
        return self._raw is None or self._raw.is_closing()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        self._remote = _peer(transport)
        if not self._guard.admit(self):
            transport.abort()
            return
        loop = asyncio.get_running_loop()
        self._accepted = loop.time()
        self._timer = loop.call_later(
            self._guard.limits.header_timeout_seconds, self._handshake_timed_out
        )

    def get_buffer(self, sizehint: int) -> Any:
        if self._tls is not None:
            return self._tls.get_buffer(sizehint)
        return memoryview(self._buffer)

    def buffer_updated(self, nbytes: int) -> None:
        if self._tls is not None:
            self._tls.buffer_updated(nbytes)
            return
        if self._raw is None or self._raw.is_closing():
            return
        first = bytes(self._buffer[:nbytes])
        if first[:1] == b"\x16":  # a TLS handshake record
            self._start_tls(first)
        elif first[:1].isalpha():  # a request line: plain HTTP sent to the TLS port
            log.debug("plain HTTP from %s on the TLS port: 400", self._remote or "?")
            self._guard.stats.requests[400] = self._guard.stats.requests.get(400, 0) + 1
            self._raw.write(PLAIN_HTTP_ON_TLS)
            self._raw.close()
        else:
            log.debug("closing a connection from %s: not a TLS handshake", self._remote or "?")
            self._raw.abort()

    def _start_tls(self, first: bytes) -> None:
        assert self._raw is not None
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        waiter.add_done_callback(self._handshake_done)
        self.connection = Connection(self._app, self._guard, front=self)
        limit = self._guard.limits.header_timeout_seconds
        protocol: Any = _SSLProtocol
        self._tls = protocol(
            loop,
            self.connection,
            self._context,
            waiter,
            server_side=True,
            # Our own timer bounds the handshake from the accept on; these are backstops.
            ssl_handshake_timeout=2 * limit,
            ssl_shutdown_timeout=limit,
        )
        self._tls.connection_made(self._raw)
        view = self._tls.get_buffer(len(first))
        view[: len(first)] = first
        self._tls.buffer_updated(len(first))

    def _handshake_done(self, waiter: asyncio.Future[None]) -> None:
        if waiter.cancelled():
            return
        error = waiter.exception()
        if self.connection is not None and self.connection.made:
            self._disarm()
        elif error is not None:
            log.debug("TLS handshake with %s failed: %s", self._remote or "?", _one_line(error))

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if self.connection is not None and self.connection.made:
            return
        self._guard.stats.timeouts["tls_handshake"] += 1
        log.debug("closing a connection from %s: TLS handshake not done in time", self._remote)
        self.abort()

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def eof_received(self) -> bool | None:
        if self._tls is not None:
            return bool(self._tls.eof_received())
        return None

    def pause_writing(self) -> None:
        if self._tls is not None:
            self._tls.pause_writing()

    def resume_writing(self) -> None:
        if self._tls is not None:
            self._tls.resume_writing()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._guard.release(self.token)
        tls, self._tls = self._tls, None
        self._raw = None
        if tls is not None:
            tls.connection_lost(exc)

    def close_when_idle(self) -> None:
        if self.connection is not None and self.connection.made:
            self.connection.close_when_idle()
        else:
            self.abort()

    def abort(self) -> None:
        if self._raw is not None:
            self._raw.abort()


class _SSLProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol with a 32 KiB read buffer instead of 256 KiB: a TLS record is at
    most 16 KiB, and a request head at most 16 KiB, so the rest only costs memory: 224 KiB per
    connection, 28 MB with every slot held (issue 33, the pipelining attack over TLS)."""

    max_size = 32 * 1024


# Go's net/http answer to plain HTTP on a TLS port (the bytes its servers send).
PLAIN_HTTP_ON_TLS = (
    b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
)


def _peer(transport: asyncio.BaseTransport) -> str:
    peer = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else ""


def _unsent(transport: asyncio.Transport) -> int:
    """Bytes written to ``transport`` and not yet taken by the kernel (0 once a TLS transport
    let go of its protocol, which it does as it closes)."""
    try:
        return transport.get_write_buffer_size()
    except (AttributeError, NotImplementedError, RuntimeError):
        return 0


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def chunks(body: Body, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The parts of ``body`` regrouped into pieces of ``size`` bytes (the last one shorter).

    An exposition comes as hundreds of parts, many of them a family's two header lines: sent
    one by one they would be hundreds of small writes. Only one piece is copied at a time.
    """
    pending: list[memoryview] = []
    room = size
    for part in body:
        view = memoryview(part)
        while len(view) >= room:
            pending.append(view[:room])
            yield b"".join(pending)
            view = view[room:]
            pending, room = [], size
        if view:
            pending.append(view)
            room -= len(view)
    if pending:
        yield b"".join(pending)


_date_cache: tuple[int, bytes] = (0, b"")


def _http_date() -> bytes:
    """The Date header's value, formatted once a second."""
    global _date_cache
    now = int(time.time())
    if _date_cache[0] != now:
        _date_cache = (now, time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)).encode())
    return _date_cache[1]


class Connection(asyncio.Protocol):
    """One client connection: requests in (through h11), responses out, limits enforced.

    A plain connection holds its own slot; a TLS one is held by its :class:`TlsFront`.
    """

    def __init__(self, app: App, guard: ConnectionGuard, front: TlsFront | None = None) -> None:
        self.token = -1
        self._app = app
        self._guard = guard
        self._front = front
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._transport: asyncio.Transport | None = None
        self._remote = ""
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_for = "head"  # "head" (header timeout), "idle" (keep-alive) or "" (busy)
        self._task: asyncio.Task[None] | None = None
        self._writable: asyncio.Future[None] | None = None  # set while the transport is paused
        self._closing = False  # shutting down: close once the current response is sent
        self._tls = front is not None
        self._must_close = False  # this request asked for it (Content-Length with chunked)
        self._line = b""  # the request line so far, until it is complete and checked
        self._line_checked = False
        self._gone_logged = False
        self.made = False  # connection_made ran (for TLS: the handshake succeeded)
        self.since = 0.0  # loop time the connection entered its state
        self._pipelined = 0  # answers given to requests that were already waiting (pipelined)
        self._stalled_since: float | None = None  # writes paused: the client takes nothing
        self._closing_since: float | None = None  # closed by us with answers still unsent

    # -- the slot ---------------------------------------------------------------------------------

    @property
    def state(self) -> str:
        if self._closing_since is not None:
            return "closing"
        if self.busy:
            return "stalled" if self._stalled_since is not None else "busy"
        return "idle" if self._waiting_for == "idle" else "head"

    @property
    def since(self) -> float:
        """Loop time the connection entered its state (for the eviction order at the cap)."""
        if self._closing_since is not None:
            return self._closing_since
        if self.busy and self._stalled_since is not None:
            return self._stalled_since
        return self._since

    @since.setter
    def since(self, value: float) -> None:
        self._since = value

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.made = True
        self.since = asyncio.get_running_loop().time()
        self._remote = _peer(transport)
        if self._front is None and not self._guard.admit(self):
            transport.abort()
            return
        if self._tls:
            # asyncio lets a TLS connection hold 512 KiB of encrypted answer before it pauses
            # the writer (a plain one 64 KiB): for clients that do not read, with every slot
            # held, that is most of the server's memory. One chunk is what a response needs.
            transport.set_write_buffer_limits(high=CHUNK_BYTES)
        if self._closing:
            transport.close()
            return
        self._arm(self._guard.limits.header_timeout_seconds, "head")

    def data_received(self, data: bytes) -> None:
        if self._waiting_for == "idle":  # a new request began: its head must come in time
            self._arm(self._guard.limits.header_timeout_seconds, "head")
        if not self._line_checked and not self._request_line_ok(data):
            return
        self._h11.receive_data(data)
        self._next()

    def _request_line_ok(self, data: bytes) -> bool:
        """Check the request line as soon as it is complete (h11 waits for the whole head).

        An HTTP/0.9 line ("GET /") or garbage ending in a newline gets its 400 at once, as Go's
        servers answer, instead of holding a slot until the header timeout.
        """
        self._line = (self._line + data)[:MAX_HEAD_BYTES].lstrip(b"\r\n")
        end = self._line.find(b"\n")
        if end < 0:
            return True
        line, self._line = self._line[:end].rstrip(b"\r"), b""
        self._line_checked = True
        if _REQUEST_LINE.fullmatch(line):
            return True
        self._refuse_raw(400, "malformed request line")
        return False

    def eof_received(self) -> bool | None:
        self._h11.receive_data(b"")
        self._next()
        # Half-closed while answering: answer, then close. (Over TLS asyncio closes anyway, and
        # warns when asked not to, which anyone could then make it do in a loop.)
        return True if self.busy and not self._tls else None

    def pause_writing(self) -> None:
        if self._writable is None:
            loop = asyncio.get_running_loop()
            self._writable = loop.create_future()
            self._stalled_since = loop.time()

    def resume_writing(self) -> None:
        self._stalled_since = None
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        if self._front is None:
            self._guard.release(self.token)
        self.resume_writing()
        if self._task is not None and not self._task.done():
            self._went_away(exc or "connection closed")
            self._task.cancel()  # nobody to answer; what others share is shielded by its owner
        self._transport = None

    def _went_away(self, why: object) -> None:
        """One debug line per client that left while being answered (anyone can do it)."""
        if not self._gone_logged:
            self._gone_logged = True
            log.debug("client %s went away during a response: %s", self._remote or "?", why)

    # -- shutdown -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def close_when_idle(self) -> None:
        """Shutting down: close now if no request is being answered, else after its response."""
        self._closing = True
        if self._transport is None:
            if self._front is None:
                self._guard.release(self.token)
        elif not self.busy:
            self._close()

    def abort(self) -> None:
        if self._front is not None:
            self._front.abort()
        elif self._transport is not None:
            self._transport.abort()

    # -- requests -------------------------------------------------------------------------------

    def _next(self) -> None:
        """Act on what h11 has parsed: start a request, close, or wait for more bytes."""
        if self.busy or self._transport is None:
            return
        try:
            event = self._h11.next_event()
        except h11.RemoteProtocolError as err:
            self._refuse(err.error_status_hint, str(err))
            return
        if isinstance(event, h11.Request):
            if _head_bytes(event) > MAX_HEAD_BYTES:  # h11 checks only heads still incomplete
                self._refuse(431, "request head over 16 KiB")
                return
            problem = _unacceptable(event)
            if problem is not None:
                self._refuse(*problem)
                return
            names = {name for name, _value in event.headers}
            # RFC 9112 6.1: a request with both may be an attempt to smuggle a second one past
            # a proxy; answer it and close, so nothing behind it is read as a request.
            self._must_close = b"content-length" in names and b"transfer-encoding" in names
            self._disarm()
            self._transport.pause_reading()  # one request at a time: nothing buffered meanwhile
            self._task = asyncio.get_running_loop().create_task(self._answer_guarded(event))
        elif isinstance(event, h11.ConnectionClosed) or self._h11.their_state is h11.MUST_CLOSE:
            self._close()

    def _count(self, status: int) -> None:
        requests = self._guard.stats.requests
        requests[status] = requests.get(status, 0) + 1

    def _refuse(self, status: int, why: str) -> None:
        log.debug("bad request from %s: %s %s", self._remote or "?", status, " ".join(why.split()))
        self._count(status)
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            response = text(f"{status}: {Response(status).reason}\n", status)
            response.close = True
            try:
                self._write_head(self._app.finish(response), response.length)
                self._write_data(b"".join(response.body))
            except (h11.LocalProtocolError, _Gone):
                pass
        self._close()

    def _refuse_raw(self, status: int, why: str) -> None:
        """A refusal h11 cannot send (it has not seen a request yet), written as bytes."""
        log.debug("bad request from %s: %s %s", self._remote or "?", status, why)
        self._count(status)
        reason = Response(status).reason
        body = f"{status}: {reason}\n".encode()
        head = (
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(_Gone):
            self._write(head.encode() + body)
        self._close()

    async def _answer_guarded(self, event: h11.Request) -> None:
        """:meth:`_answer`, and a connection dropped with one debug line if the client left."""
        try:
            await self._answer(event)
        except (_Gone, ConnectionError) as err:
            self._went_away(_one_line(err) if str(err) else "connection closed")
            self.abort()
        except (h11.LocalProtocolError, RuntimeError) as err:
            log.warning("dropping a connection from %s: %s", self._remote or "?", err)
            self.abort()

    async def _answer(self, event: h11.Request) -> None:
        target = event.target.decode("latin-1")
        method = event.method.decode("latin-1")
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key = name.decode("latin-1")
            decoded = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {decoded}" if key in headers else decoded
        if method == "OPTIONS" and target == "*":  # the server itself: nothing to say (Go: 200)
            response = Response(200)
        else:
            if target.startswith(("http://", "https://")):  # absolute form (RFC 9112 3.2.2)
                target = "/" + target.split("://", 1)[1].partition("/")[2]
            path = target.partition("?")[0]  # no endpoint takes a query
            request = Request(method, path, headers, self._remote, self._transport)
            try:
                response = await self._app.handle(request)
            except Exception:
                log.exception("request %s %s failed", method, path)
                response = text("500: Internal Server Error\n", 500)
        self._app.finish(response)
        self._count(response.status)
        length = response.length
        self._write_head(response, length)
        if method != "HEAD" and length:
            if length <= CHUNK_BYTES:
                self._write_data(b"".join(response.body))
            else:
                await self._write_chunks(response.body)
        self._h11.send(h11.EndOfMessage())
        if self._writable is not None:
            # The client is not taking what it asked for: read its next request only once it
            # has, or a client pipelining small requests could pile up answers here unbounded.
            await self._until_writable()
        self._task = None
        self._done()

    async def _write_chunks(self, body: Body) -> None:
        """A large body, one chunk at a time, each written once the client took the last.

        The whole body must be taken within the write timeout, or the connection is dropped
        (which cancels this task): a client that stops reading holds one chunk, for a while.
        """
        with self._write_deadline():
            for chunk in chunks(body):
                self._write_data(chunk)
                await self._writable_again()

    async def _until_writable(self) -> None:
        """Wait until the transport takes writes again, at most the write timeout."""
        with self._write_deadline():
            await self._writable_again()

    @contextlib.contextmanager
    def _write_deadline(self) -> Iterator[None]:
        """Drop the connection if the block has not finished within the write timeout."""
        loop = asyncio.get_running_loop()
        timer = loop.call_later(self._guard.limits.write_timeout_seconds, self._write_timed_out)
        try:
            yield
        finally:
            timer.cancel()

    async def _writable_again(self) -> None:
        if self._writable is not None:
            await self._writable
        if self._gone():
            raise _Gone("connection closed")

    def _write_timed_out(self) -> None:
        self._guard.stats.timeouts["write"] += 1
        log.debug(
            "dropping %s: response not taken within %.0f s",
            self._remote or "?",
            self._guard.limits.write_timeout_seconds,
        )
        self._gone_logged = True  # this line says why; no "went away" after it
        self.abort()

    def _write_data(self, data: bytes) -> None:
        for piece in self._h11.send_with_data_passthrough(h11.Data(data=data)) or ():
            self._write(piece)

    def _write_head(self, response: Response, length: int) -> None:
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
        headers.append((b"Content-Length", str(length).encode()))
        headers.append((b"Date", _http_date()))
        if self._pipelined >= MAX_PIPELINED - 1:
            self._must_close = True  # the last answer this connection gets ahead of reading
        if response.close or self._closing or self._must_close:
            headers.append((b"Connection", b"close"))
        head = h11.Response(
            status_code=response.status, headers=headers, reason=response.reason.encode()
        )
        self._write(self._h11.send(head))

    def _gone(self) -> bool:
        """The client closed or reset the connection (asyncio may not have said so yet)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return True
        return self._front is not None and self._front.raw_closing

    def _write(self, data: bytes | None) -> None:
        if not data:
            return
        # Writing to a transport that failed makes asyncio log a warning per write: a client
        # that drops a large response would be dozens of lines. Stop at the first sign instead.
        if self._gone():
            raise _Gone("connection closed")
        assert self._transport is not None
        self._transport.write(data)

    def _done(self) -> None:
        """A response is out: keep the connection for the next request, or close it."""
        if self._transport is None:
            return
        self._skip_request_body()
        finished = self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE
        if self._closing or self._must_close or not finished:
            self._close()
            return
        self._h11.start_next_cycle()
        # A pipelined request already buffered in h11 was not seen by the line check.
        ahead = bool(self._h11.trailing_data[0])
        self._line_checked = ahead
        if ahead:  # the next request came before this answer was out: pipelining
            self._pipelined += 1
        self.since = asyncio.get_running_loop().time()
        self._arm(self._guard.limits.idle_timeout_seconds, "idle")
        self._transport.resume_reading()
        self._next()  # a pipelined request may already be buffered

    def _skip_request_body(self) -> None:
        """Consume the rest of the request (its end, or a body nobody reads) if it is here.

        No endpoint takes a body; one still on its way is not waited for (reading is paused), so
        its connection is then closed rather than kept.
        """
        while self._h11.their_state is h11.SEND_BODY:
            try:
                event = self._h11.next_event()
            except h11.RemoteProtocolError:
                return
            if event is h11.NEED_DATA or isinstance(event, h11.ConnectionClosed):
                return

    # -- timers and closing ---------------------------------------------------------------------

    def _arm(self, seconds: float, waiting_for: str) -> None:
        self._disarm()
        self._waiting_for = waiting_for
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _disarm(self) -> None:
        self._waiting_for = ""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self._waiting_for == "head":
            self._guard.stats.timeouts["header"] += 1
            log.debug("closing a connection that sent no complete request head in time")
        elif self._waiting_for == "idle":
            self._guard.stats.timeouts["idle"] += 1
        self._waiting_for = ""
        self.abort()

    def _close(self) -> None:
        self._disarm()
        transport = self._transport
        if transport is None:
            return
        transport.close()
        if _unsent(transport) and self._closing_since is None:
            # asyncio keeps the connection (and its slot) until the client takes what is left:
            # it may never. Its slot may go to a new connection, and it ends at the write timeout.
            loop = asyncio.get_running_loop()
            self._closing_since = loop.time()
            self._timer = loop.call_later(
                self._guard.limits.write_timeout_seconds, self._write_timed_out
            )


# method SP request-target SP HTTP-version (RFC 9112 3): anything else is refused at once.
_REQUEST_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+ [!-~]+ HTTP/[0-9]\.[0-9]")
# Control characters other than tab in a field value (RFC 9110 5.5); Go answers 400.
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def _unacceptable(event: h11.Request) -> tuple[int, str] | None:
    """(status, why) for a parsed request this server refuses, or None."""
    if event.http_version not in (b"1.0", b"1.1"):
        return 505, f"HTTP/{event.http_version.decode('latin-1')}"
    for name, value in event.headers:
        if _CONTROL.search(value):
            return 400, f"control character in {name.decode('latin-1')}"
        if name == b"expect" and value.lower() != b"100-continue":
            return 417, "unknown expectation"
    return None


def _head_bytes(event: h11.Request) -> int:
    return len(event.target) + sum(len(name) + len(value) + 4 for name, value in event.headers)
