"""HTTP/1.1 connections of the exporter, and the limits that keep abusive clients cheap.

Each accepted connection is a :class:`Connection`: an asyncio protocol that feeds the bytes to an
h11 state machine, hands each complete request to the :class:`~vgpumon.export.app.App`, and
writes the response in chunks under flow control. The limits (measured reasons in
docs/reliability.md; an HTTP server left to its defaults kept 500 idle TLS connections, 245 MB,
for an hour):

* **connection cap**: at most ``max_connections`` connections are served at once; one more is
  closed as soon as it is accepted (a TLS one before any TLS state is made), so memory is
  bounded by the cap, not by the number of clients;
* **TLS handshake timeout** and **header timeout**: a connection must finish its handshake and
  send a complete request head within ``header_timeout_seconds`` of being accepted, and a later
  request on a kept-alive connection within that time of its first byte;
* **idle keep-alive timeout**: a kept-alive connection with no new request for
  ``idle_timeout_seconds`` is closed;
* **write timeout**: a response not taken by the client within ``write_timeout_seconds`` is
  abandoned and the connection dropped; at most one chunk of it is buffered at a time;
* **one request at a time**: while a response is being made, reading stops, so a client that
  pipelines cannot make the server buffer its requests;
* **client errors** (malformed requests, heads over 16 KiB) get a 400 or 431 and a close, and
  one debug log line without a traceback: anyone can send them, so at ERROR they would flood
  the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import weakref
from collections.abc import Callable, Iterator

import h11

from vgpumon.export.app import App, Body, Request, Response, text
from vgpumon.export.limits import ServerLimits

__all__ = ["CHUNK_BYTES", "Connection", "ConnectionGuard", "ServerLimits", "chunks"]

log = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024  # what one connection may have queued in its transport at a time
MAX_HEAD_BYTES = 16 * 1024  # a request head larger than this is refused (431)


class ConnectionGuard:
    """Counts live connections and builds the protocol for each accepted one."""

    def __init__(self, limits: ServerLimits) -> None:
        self.limits = limits
        self._live: dict[int, Connection] = {}
        self._ids = itertools.count()
        self.refused = 0  # connections closed at once because the cap was reached
        self.header_timeouts = 0  # connections closed for not sending a request head in time
        self.write_timeouts = 0  # responses abandoned because the client did not take them

    @property
    def open(self) -> int:
        """Connections accepted and not yet closed (handshakes in progress included)."""
        return len(self._live)

    def connections(self) -> list[Connection]:
        return list(self._live.values())

    def factory(self, app: App, tls: bool = False) -> Callable[[], asyncio.Protocol]:
        """The protocol factory for ``loop.create_server``, serving ``app``.

        Over the cap, a plain connection gets a protocol that closes it at once. A TLS one must
        not even start its handshake: asyncio allocates a 256 KiB buffer per TLS connection
        before the handshake (500 refused-but-handshaking clients took 100 MB) and the handshake
        costs CPU. So the factory raises instead: asyncio then drops the accepted socket, which
        closes it, without creating any TLS state.
        """

        def make() -> asyncio.Protocol:
            if len(self._live) >= self.limits.max_connections:
                self.refused += 1
                if tls:
                    raise ConnectionRefusedError("vgpumon: connection cap reached")
                return _Refused()
            token = next(self._ids)
            connection = Connection(app, self, token)
            self._live[token] = connection
            # A TLS connection whose handshake fails never reaches connection_made/lost: its slot
            # is freed when the protocol object goes.
            weakref.finalize(connection, self._live.pop, token, None)
            return connection

        return make

    def release(self, token: int) -> None:
        self._live.pop(token, None)


class _Refused(asyncio.Protocol):
    """The protocol of a connection over the cap: closed the moment it is made."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.abort() if isinstance(transport, asyncio.Transport) else transport.close()


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
    """One client connection: requests in (through h11), responses out, limits enforced."""

    def __init__(self, app: App, guard: ConnectionGuard, token: int) -> None:
        self._app = app
        self._guard = guard
        self._token = token
        self._h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self._transport: asyncio.Transport | None = None
        self._remote = ""
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_for = "head"  # "head" (header timeout), "idle" (keep-alive) or "" (busy)
        self._task: asyncio.Task[None] | None = None
        self._writable: asyncio.Future[None] | None = None  # set while the transport is paused
        self._closing = False  # shutting down: close once the current response is sent
        self._tls = False

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._tls = transport.get_extra_info("sslcontext") is not None
        peer = transport.get_extra_info("peername")
        self._remote = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if self._closing:
            transport.close()
            return
        self._arm(self._guard.limits.header_timeout_seconds, "head")

    def data_received(self, data: bytes) -> None:
        if self._waiting_for == "idle":  # a new request began: its head must come in time
            self._arm(self._guard.limits.header_timeout_seconds, "head")
        self._h11.receive_data(data)
        self._next()

    def eof_received(self) -> bool | None:
        self._h11.receive_data(b"")
        self._next()
        # Half-closed while answering: answer, then close. (Over TLS asyncio closes anyway, and
        # warns when asked not to, which anyone could then make it do in a loop.)
        return True if self.busy and not self._tls else None

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._disarm()
        self._guard.release(self._token)
        self.resume_writing()
        if self._task is not None and not self._task.done():
            self._task.cancel()  # nobody to answer; what others share is shielded by its owner
        self._transport = None

    # -- shutdown -------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def close_when_idle(self) -> None:
        """Shutting down: close now if no request is being answered, else after its response."""
        self._closing = True
        if self._transport is None:  # a TLS handshake still under way: its slot goes now
            self._guard.release(self._token)
        elif not self.busy:
            self._close()

    def abort(self) -> None:
        if self._transport is not None:
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
            self._disarm()
            self._transport.pause_reading()  # one request at a time: nothing buffered meanwhile
            self._task = asyncio.get_running_loop().create_task(self._answer_guarded(event))
        elif isinstance(event, h11.ConnectionClosed) or self._h11.their_state is h11.MUST_CLOSE:
            self._close()

    def _refuse(self, status: int, why: str) -> None:
        log.debug("bad request from %s: %s %s", self._remote or "?", status, " ".join(why.split()))
        if self._h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            response = text(f"{status}: {Response(status).reason}\n", status)
            response.close = True
            self._write_head(self._app.finish(response), response.length)
            self._write_data(b"".join(response.body))
        self._close()

    async def _answer_guarded(self, event: h11.Request) -> None:
        """:meth:`_answer`, and a connection dropped with one log line if sending it fails."""
        try:
            await self._answer(event)
        except (h11.LocalProtocolError, ConnectionError, RuntimeError) as err:
            log.warning("dropping a connection from %s: %s", self._remote or "?", err)
            self.abort()

    async def _answer(self, event: h11.Request) -> None:
        target = event.target.decode("latin-1")
        path = target.partition("?")[0]  # no endpoint takes a query
        headers: dict[str, str] = {}
        for name, value in event.headers:
            key = name.decode("latin-1")
            decoded = value.decode("latin-1")
            headers[key] = f"{headers[key]}, {decoded}" if key in headers else decoded
        method = event.method.decode("latin-1")
        request = Request(method, path, headers, self._remote, self._transport)
        try:
            response = await self._app.handle(request)
        except Exception:
            log.exception("request %s %s failed", method, path)
            response = text("500: Internal Server Error\n", 500)
        self._app.finish(response)
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
        if self._transport is None:
            raise asyncio.CancelledError  # the client went away

    def _write_timed_out(self) -> None:
        self._guard.write_timeouts += 1
        log.debug(
            "dropping %s: response not taken within %.0f s",
            self._remote or "?",
            self._guard.limits.write_timeout_seconds,
        )
        self.abort()

    def _write_data(self, data: bytes) -> None:
        for piece in self._h11.send_with_data_passthrough(h11.Data(data=data)) or ():
            self._write(piece)

    def _write_head(self, response: Response, length: int) -> None:
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers.items()]
        headers.append((b"Content-Length", str(length).encode()))
        headers.append((b"Date", _http_date()))
        if response.close or self._closing:
            headers.append((b"Connection", b"close"))
        head = h11.Response(
            status_code=response.status, headers=headers, reason=response.reason.encode()
        )
        self._write(self._h11.send(head))

    def _write(self, data: bytes | None) -> None:
        if data and self._transport is not None:
            self._transport.write(data)

    def _done(self) -> None:
        """A response is out: keep the connection for the next request, or close it."""
        if self._transport is None:
            return
        self._skip_request_body()
        finished = self._h11.our_state is h11.DONE and self._h11.their_state is h11.DONE
        if self._closing or not finished:
            self._close()
            return
        self._h11.start_next_cycle()
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
            self._guard.header_timeouts += 1
            log.debug("closing a connection that sent no complete request head in time")
        self._waiting_for = ""
        self.abort()

    def _close(self) -> None:
        self._disarm()
        if self._transport is not None:
            self._transport.close()


def _head_bytes(event: h11.Request) -> int:
    return len(event.target) + sum(len(name) + len(value) + 4 for name, value in event.headers)
