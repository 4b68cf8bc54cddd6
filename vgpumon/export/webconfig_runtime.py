"""The web config in force for a running server: reloads, TLS contexts per connection, auth.

:class:`WebConfigRuntime` owns the current :class:`~vgpumon.export.webconfig.WebConfig` and re-reads
it (and the certificate, key and CA files) when they change, at most once per ``check_interval``.
New TLS connections are made by the newest good context, so rotated certificates apply without a
restart; a bad file keeps the previous config. Its middleware applies the rate limit, the client
certificate SANs and basic auth (:mod:`vgpumon.export.auth`) to every request.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from vgpumon.errors import ConfigError
from vgpumon.export.app import App, Handler, Middleware, Request, Response, text
from vgpumon.export.auth import AuthRefused, BasicAuth
from vgpumon.export.limits import DEFAULT_BCRYPT_MAX_COST
from vgpumon.export.webconfig import RateLimit, Stamp, WebConfig, file_stamp

log = logging.getLogger(__name__)


class _TokenBucket:
    """golang.org/x/time/rate.Limiter(Every(interval), burst), as the toolkit uses: starts full."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self._tokens = float(limit.burst)
        self._last = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            refill = (
                (now - self._last) / self.limit.interval_s
                if self.limit.interval_s
                else float("inf")
            )
            self._tokens = min(float(self.limit.burst), self._tokens + refill)
            self._last = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


class _ReloadingServerContext(ssl.SSLContext):
    """The context the server listens with: every connection is made by the newest good context.

    asyncio (and uvloop) create each TLS connection with ``wrap_bio``, blocking servers with
    ``wrap_socket``; delegating both means every setting of a reloaded file (client auth, versions,
    ciphers, curves, certificate, CA) applies to new connections, which swapping the context in
    the SNI callback alone cannot do (OpenSSL copies verify mode, versions and curves into each
    connection when it is created).
    """

    _source: Callable[[], ssl.SSLContext]

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLObject:
        return self._source().wrap_bio(
            incoming,
            outgoing,
            server_side=server_side,
            server_hostname=server_hostname,
            session=session,
        )

    def wrap_socket(
        self,
        sock: socket.socket,
        server_side: bool = False,
        do_handshake_on_connect: bool = True,
        suppress_ragged_eofs: bool = True,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> ssl.SSLSocket:
        return self._source().wrap_socket(
            sock,
            server_side=server_side,
            do_handshake_on_connect=do_handshake_on_connect,
            suppress_ragged_eofs=suppress_ragged_eofs,
            server_hostname=server_hostname,
            session=session,
        )


def _client_sans(peercert: Mapping[str, Any]) -> set[str]:
    """A client certificate's SANs spelled as Go prints them (DNS, IP, e-mail and URI entries)."""
    out: set[str] = set()
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "IP Address":
            with contextlib.suppress(ValueError):
                value = str(ipaddress.ip_address(value.strip()))
        if kind in ("DNS", "IP Address", "email", "URI"):
            out.add(value)
    return out


def _set_headers(target: Any, headers: tuple[tuple[str, str], ...]) -> None:
    for name, value in headers:
        target[name] = value


class WebConfigRuntime:
    """The web config currently in force for one server; re-reads the files when they change.

    Changes are looked for at most once per ``check_interval`` seconds, when a TLS connection
    starts or a request arrives. A file that fails to load (or that would switch TLS on or off,
    which needs a new listener) is logged once as a warning and the previous config stays.

    The look and the reload run in a worker thread, never on the event loop: the loop waits for
    them at most ``INLINE_WAIT_SECONDS`` (so a rotation applies to the very connection that
    noticed it), and never again while a reload is stuck (a file on a hung file system); files
    are read only when they are regular files (:mod:`vgpumon.yamlfile`).
    """

    INLINE_WAIT_SECONDS = 0.5

    def __init__(
        self,
        path: str,
        *,
        check_interval: float = 1.0,
        bcrypt_max_cost: int = DEFAULT_BCRYPT_MAX_COST,
    ) -> None:
        self._path = path
        self._interval = check_interval
        self._lock = threading.RLock()
        self._auth = BasicAuth(max_cost=bcrypt_max_cost)
        # Requests refused by basic auth, by reason (the vgpumon_http_auth_refusals_total family).
        self.auth_refusals = {"unauthorized": 0, "throttled": 0, "busy": 0}
        self._limiter: _TokenBucket | None = None
        self._rejected: tuple[tuple[str, Stamp | None], ...] | None = None
        self._config = WebConfig.load(path)
        self._adopt(self._config)
        self._next_check = time.monotonic() + check_interval
        self._reloader: ThreadPoolExecutor | None = None
        self._pending: Future[bool] | None = None
        self._outer: _ReloadingServerContext | None = None
        if self._config.tls_context is not None:
            outer = _ReloadingServerContext(ssl.PROTOCOL_TLS_SERVER)
            outer._source = self._connection_context
            self._outer = outer

    @property
    def config(self) -> WebConfig:
        """The config in force now."""
        return self._config

    @property
    def bcrypt_checks(self) -> int:
        """How many bcrypt comparisons ran so far (cache hits cost none; unknown users cost one)."""
        return self._auth.checker.calls

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to listen with (None without TLS); it stays valid across reloads."""
        return self._outer

    def check_for_changes(self, *, force: bool = False) -> bool:
        """Reload if the file or a file it names changed; True when a new config took effect."""
        now = time.monotonic()
        with self._lock:
            if not force and now < self._next_check:
                return False
            self._next_check = now + self._interval
            current = tuple((p, file_stamp(p)) for p, _ in self._config.file_stamps)
            if current == self._config.file_stamps or current == self._rejected:
                return False
            try:
                new = WebConfig.load(self._path)
                if (new.tls is None) != (self._config.tls is None):
                    state = "on" if new.tls is not None else "off"
                    raise ConfigError(
                        f"web config {self._path}: switching TLS {state} needs a restart"
                    )
                if self._config.users and not new.users:
                    # An emptied or truncated file (a deploy that wrote half of it, a bad
                    # template) would turn basic auth off: the last good users stay. Removing
                    # auth on purpose is a restart, as switching TLS is.
                    raise ConfigError(
                        f"web config {self._path}: it lists no basic_auth_users, which would "
                        "turn basic auth off; that takes a restart"
                    )
            except ConfigError as err:
                self._rejected = current
                log.warning("%s; keeping the previous web config", err)
                return False
            self._rejected = None
            self._adopt(new)
            log.info("web config %s reloaded", self._path)
            return True

    def check_soon(self) -> None:
        """From the event loop: :meth:`check_for_changes` in the worker thread, briefly awaited."""
        if time.monotonic() < self._next_check:
            return
        pending = self._pending
        if pending is not None and not pending.done():
            return  # a reload is stuck in a file read: never wait on it again
        if self._reloader is None:
            self._reloader = ThreadPoolExecutor(1, thread_name_prefix="vgpumon-webconfig")
        self._pending = pending = self._reloader.submit(self.check_for_changes)
        try:
            pending.result(timeout=self.INLINE_WAIT_SECONDS)
        except FutureTimeout:
            log.warning(
                "web config %s: reloading takes longer than %.1f s; serving with the current one",
                self._path,
                self.INLINE_WAIT_SECONDS,
            )
        except Exception:  # a bug in a reload must not break the handshake or the request
            log.exception("web config %s: reload failed", self._path)

    def _adopt(self, config: WebConfig) -> None:
        if config.tls_context is not None:
            config.tls_context.sni_callback = self._on_client_hello
        for warning in self._auth.set_users(config.users):
            log.warning("web config %s: %s", self._path, warning)
        if config.rate_limit is None:
            self._limiter = None
        elif self._limiter is None or self._limiter.limit != config.rate_limit:
            self._limiter = _TokenBucket(config.rate_limit)
        self._config = config
        for message in config.warnings:
            log.warning("web config %s: %s", self._path, message)

    def _connection_context(self) -> ssl.SSLContext:
        self.check_soon()
        context = self._config.tls_context
        if context is None:  # cannot happen: TLS cannot be switched off by a reload
            raise ssl.SSLError("vgpumon web config has no TLS context")
        return context

    def _on_client_hello(
        self, sslobj: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> int | None:
        """SNI callback, run for every ClientHello (with or without SNI).

        A connection wrapped just before a reload finishes its handshake with the new certificate,
        key and client CA (the only parts OpenSSL takes from a context swapped in at this point).
        """
        try:
            self.check_soon()
            newest = self._config.tls_context
            if newest is not None and sslobj.context is not newest:
                sslobj.context = newest
        except Exception:  # an exception here would abort the handshake with an internal error
            log.exception("web config: swapping in the reloaded TLS context failed")
        return None

    # -- HTTP -----------------------------------------------------------------------------------

    def middleware(self) -> Middleware:
        """Middleware: rate limit, client-certificate SANs, basic auth.

        Like the toolkit it protects every path; the security headers go on every response
        through :meth:`setup`'s response hook.
        """

        async def webconfig_middleware(request: Request, handler: Handler) -> Response:
            self.check_soon()
            return await self._guarded(request, handler)

        return webconfig_middleware

    async def _guarded(self, request: Request, handler: Handler) -> Response:
        limiter = self._limiter
        if limiter is not None and not limiter.allow():
            return text("Too Many Requests", 429)
        tls = self._config.tls
        if tls is not None and tls.client_allowed_sans:
            peercert = request.peercert()
            if not peercert or not _client_sans(peercert) & set(tls.client_allowed_sans):
                return text("client certificate has no allowed SAN", 403)
        if self._auth.enabled:
            try:
                ok = await self._auth.check(request.headers.get("authorization"), request.remote)
            except AuthRefused as refused:
                self.auth_refusals["throttled" if refused.status == 429 else "busy"] += 1
                return text(refused.reason, refused.status, {"Retry-After": "1"})
            if not ok:
                self.auth_refusals["unauthorized"] += 1
                return text("Unauthorized", 401, {"WWW-Authenticate": "Basic"})
        return await handler(request)

    def _add_headers(self, response: Response) -> None:
        _set_headers(response.headers, self._config.http.headers)

    def setup(self, app: App) -> None:
        """Install on ``app``: the middleware and headers on every response (``serve`` calls
        :meth:`close` when it stops).

        The middleware goes first (outermost), so nothing else in the app runs for a request that
        fails authentication.
        """
        app.middlewares.insert(0, self.middleware())
        app.response_hooks.append(self._add_headers)

    def close(self) -> None:
        """Stop the bcrypt and reload worker threads."""
        self._auth.close()
        if self._reloader is not None:
            self._reloader.shutdown(wait=False, cancel_futures=True)
            self._reloader = None
