"""One running exporter (``vgpumon serve``) over HTTP, as a snapshot feed of one host.

The exporter already serves its newest snapshot as JSON at ``/api/v1/snapshot``, in the same
schema :mod:`vgpumon.model` writes, so a remote host is read exactly as a local one: the consumer
gets the same :class:`~vgpumon.model.Snapshot` objects.

Two layers, so there is one HTTP client in vgpumon:

* :class:`ExporterClient` does one request: URL, TLS (a CA file, or no verification at all),
  basic auth, a total time limit, and every failure turned into :class:`FetchError` with a
  one-line reason a screen can print (connection refused, TLS error, HTTP 401, timeout, bad JSON,
  schema mismatch). ``validate --url`` uses it for ``/metrics`` as well.
* :class:`RemoteFeed` polls with it, a snapshot feed (:class:`vgpumon.feed.FallibleFeed`) like
  the sampler: every ``interval_seconds`` while the exporter answers, with capped, jittered
  exponential backoff while it does not (a dead host is not hammered, and many clients that lost
  the same exporter do not come back in lock step). It tells its listeners only when the
  snapshot's timestamp or the connection state changed, so a screen redraws on news, not on
  every poll. ``top`` reads exporters as hosts of one fleet
  (:class:`~vgpumon.sources.fleet.FleetFeed`), like every feed.
"""

from __future__ import annotations

import asyncio
import base64
import random
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from vgpumon.errors import ConfigError, VgpumonError, one_line
from vgpumon.model import SchemaError, Snapshot, from_json
from vgpumon.sources.bodies import BodyTooLarge, read_capped
from vgpumon.sources.fleet import FleetFeed, nvml_down
from vgpumon.sources.polled import PolledFeed

SNAPSHOT_PATH = "/api/v1/snapshot"
METRICS_PATH = "/metrics"
_KNOWN_PATHS = (METRICS_PATH, SNAPSHOT_PATH)

# Backoff after failed polls: the first retry waits one interval (at most BACKOFF_FIRST_SECONDS:
# an exporter still in its first cycle answers 503 and is worth asking again soon), each further
# failure doubles the wait up to the cap; the wait actually slept is drawn from [half, all] of it.
BACKOFF_FIRST_SECONDS = 1.0
# A snapshot of a large vGPU host is a few MB of JSON; anything far beyond is not an exporter.
MAX_BODY_BYTES = 64 << 20
BACKOFF_CAP_SECONDS = 30.0


def _decode(data: bytes, charset: str | None) -> str:
    """The body as text; an unknown charset is read as UTF-8 (what the exporter sends)."""
    try:
        return data.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class RemoteTarget:
    """Where one exporter answers, and what to call it.

    ``url`` is the exporter's base URL (``http://HOST:PORT``) or one of its endpoints
    (``.../metrics``, ``.../api/v1/snapshot``): users paste whichever they have at hand.
    """

    url: str
    name: str | None = None

    def __post_init__(self) -> None:
        self.base_url  # noqa: B018 - validate at construction: a bad URL is a config error

    @property
    def _parsed(self) -> URL:
        text = self.url.strip().rstrip("/")
        if not text.startswith(("http://", "https://")):
            raise ConfigError(f"bad exporter URL {self.url!r}: give http://HOST:PORT (or https://)")
        try:
            url = URL(text)
        except ValueError as exc:
            raise ConfigError(f"bad exporter URL {self.url!r}: {one_line(exc)}") from None
        if not url.host:
            raise ConfigError(f"bad exporter URL {self.url!r}: it names no host")
        path = url.path.rstrip("/")
        for suffix in _KNOWN_PATHS:
            if path.endswith(suffix):
                path = path[: -len(suffix)]
        return url.with_path(path or "/").with_query(None).with_fragment(None)

    @property
    def base_url(self) -> str:
        """The exporter's base URL without credentials or a trailing slash."""
        return str(self._parsed.with_user(None)).rstrip("/")

    @property
    def host(self) -> str:
        """The host key: ``name`` if given, else ``HOST:PORT`` of the URL."""
        if self.name:
            return self.name
        url = self._parsed
        host = f"[{url.host}]" if url.host and ":" in url.host else url.host
        return f"{host}:{url.port}"

    @property
    def url_credentials(self) -> tuple[str, str] | None:
        """``USER:PASSWORD@`` written in the URL (``validate --url`` has always taken them)."""
        url = self._parsed
        if url.user is None:
            return None
        return url.user, url.password or ""

    def endpoint(self, path: str) -> str:
        """The full URL of ``path`` on this exporter (credentials left out)."""
        return self.base_url + path


@dataclass(frozen=True)
class Connection:
    """How to talk to exporters: TLS trust, credentials, and how long one request may take."""

    ca_file: str | None = None  # PEM bundle that signed the exporter's certificate
    insecure: bool = False  # skip certificate verification (self-signed, lab use)
    username: str | None = None
    password: str | None = None
    timeout_seconds: float = 5.0
    bearer_token: str | None = None  # ``Authorization: Bearer`` instead of basic auth

    def ssl_context(self) -> ssl.SSLContext | bool | None:
        """What aiohttp's ``ssl=`` gets: False skips verification, None is the default trust."""
        if self.insecure:
            return False
        if self.ca_file is None:
            return None
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot use CA file {self.ca_file}: {one_line(exc)}") from None

    def authorization(self, target: RemoteTarget | None = None) -> str | None:
        """The ``Authorization`` header: a bearer token, these credentials, else those written
        in the URL."""
        if self.password is not None and self.username is None:
            raise ConfigError("a password was given without a user name")
        if self.bearer_token is not None:
            if self.username is not None:
                raise ConfigError("give a bearer token or basic-auth credentials, not both")
            return f"Bearer {self.bearer_token}"
        if self.username is not None:
            creds: tuple[str, str] | None = (self.username, self.password or "")
        else:
            creds = None if target is None else target.url_credentials
        if creds is None:
            return None
        return "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode("ascii")


class FetchError(VgpumonError):
    """One request to an exporter failed; ``reason`` is one line without the URL.

    ``kind`` says which way it failed, for callers that word it their own way (``validate``
    tells a user where credentials go); ``status`` is the HTTP status where there was one.
    """

    CONNECT = "connect"  # no connection (refused, no route, name unknown, TLS)
    TIMEOUT = "timeout"
    AUTH = "auth"  # HTTP 401
    STATUS = "status"  # any other HTTP status but 200 and 503
    NOT_READY = "not_ready"  # HTTP 503
    PAYLOAD = "payload"  # the body is not a snapshot of this schema

    def __init__(self, url: str, reason: str, kind: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.kind = kind
        self.status = status


class NotReady(FetchError):
    """The exporter answers but has no sample yet (HTTP 503: its first cycle is running)."""


class HttpClient:
    """GET requests over one :class:`aiohttp.ClientSession` (opened on first use): TLS, an
    ``Authorization`` header, a total time limit and a capped body, every failure to get an
    answer a :class:`FetchError` with a one-line reason. The exporters' client and the
    Prometheus client (:mod:`vgpumon.sources.promapi`) both request through it."""

    def __init__(
        self,
        connection: Connection,
        authorization: str | None,
        *,
        limit_bytes: int | None = None,
    ) -> None:
        if connection.timeout_seconds <= 0:
            raise ConfigError(f"timeout must be positive, got {connection.timeout_seconds:g}")
        self.connection = connection
        self.authorization = authorization
        self.limit_bytes = MAX_BODY_BYTES if limit_bytes is None else limit_bytes
        self._ssl = connection.ssl_context()
        self._http: aiohttp.ClientSession | None = None

    async def get(
        self, url: str, accept: str, params: dict[str, str] | None = None
    ) -> tuple[int, bytes, str | None]:
        """(status, body, charset) of one GET of ``url``."""
        if self._http is None:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.connection.timeout_seconds)
            )
        headers = {"Accept": accept}
        if self.authorization is not None:
            headers["Authorization"] = self.authorization
        kwargs: dict[str, Any] = {"headers": headers}
        if params:
            kwargs["params"] = params
        if self._ssl is not None:
            kwargs["ssl"] = self._ssl
        try:
            async with self._http.get(url, **kwargs) as response:
                status = response.status
                try:
                    data = await read_capped(response, self.limit_bytes)
                except BodyTooLarge as exc:
                    raise FetchError(url, str(exc), FetchError.PAYLOAD, status) from None
                return status, data, response.charset
        except asyncio.TimeoutError:
            raise FetchError(
                url,
                f"no answer within {self.connection.timeout_seconds:g} s (timeout)",
                FetchError.TIMEOUT,
            ) from None
        except aiohttp.ClientConnectorCertificateError as exc:
            reason = f"TLS error: certificate not trusted ({one_line(exc.certificate_error)})"
            raise FetchError(url, reason, FetchError.CONNECT) from None
        except aiohttp.ClientSSLError as exc:
            raise FetchError(url, f"TLS error: {one_line(exc)}", FetchError.CONNECT) from None
        except aiohttp.ClientConnectorError as exc:
            if isinstance(exc.os_error, ConnectionRefusedError):
                raise FetchError(url, "connection refused", FetchError.CONNECT) from None
            reason = f"cannot connect: {one_line(exc.os_error)}"
            raise FetchError(url, reason, FetchError.CONNECT) from None
        except aiohttp.ServerDisconnectedError:
            reason = "the server closed the connection"
            if not url.startswith("https://"):
                reason += " (plain HTTP to a TLS port?)"
            raise FetchError(url, reason, FetchError.CONNECT) from None
        except aiohttp.ClientError as exc:
            reason = f"{type(exc).__name__}: {one_line(exc)}"
            raise FetchError(url, reason, FetchError.CONNECT) from None

    @property
    def closed(self) -> bool:
        """No session is open (none yet, or closed)."""
        return self._http is None or self._http.closed

    @property
    def open(self) -> bool:
        """A session is open (one was used and not closed since)."""
        return self._http is not None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None


class ExporterClient:
    """Requests to one exporter (through one :class:`HttpClient`)."""

    def __init__(self, target: RemoteTarget, connection: Connection = Connection()) -> None:
        self.target = target
        self.connection = connection
        self.http = HttpClient(connection, connection.authorization(target))

    @property
    def sends_credentials(self) -> bool:
        """Requests carry credentials (from the connection or the URL)."""
        return self.http.authorization is not None

    async def get_text(self, path: str, accept: str) -> str:
        """The body of ``path``; any failure is a :class:`FetchError` with a one-line reason."""
        url = self.target.endpoint(path)
        status, data, charset = await self.http.get(url, accept)
        if status == 503:
            raise NotReady(
                url, "HTTP 503: the exporter has no sample yet", FetchError.NOT_READY, 503
            )
        if status == 401:
            if not self.sends_credentials:
                raise FetchError(
                    url, "HTTP 401: the exporter wants credentials", FetchError.AUTH, 401
                )
            raise FetchError(
                url, "HTTP 401: the exporter refused the credentials", FetchError.AUTH, 401
            )
        if status != 200:
            raise FetchError(url, f"HTTP {status}", FetchError.STATUS, status)
        return _decode(data, charset)

    async def snapshot(self) -> Snapshot:
        """The exporter's newest snapshot from its JSON API, parsed and checked in a worker thread
        (a large host's JSON takes long enough to freeze a screen sharing the loop)."""
        body = await self.get_text(SNAPSHOT_PATH, "application/json")
        try:
            return await asyncio.to_thread(from_json, body)
        except SchemaError as exc:
            reason = f"schema mismatch: {one_line(exc)}"
            raise FetchError(
                self.target.endpoint(SNAPSHOT_PATH), reason, FetchError.PAYLOAD
            ) from None
        except (ValueError, TypeError) as exc:
            reason = f"bad JSON: {one_line(exc)}"
            raise FetchError(
                self.target.endpoint(SNAPSHOT_PATH), reason, FetchError.PAYLOAD
            ) from None

    async def close(self) -> None:
        await self.http.close()


class RemoteFeed(PolledFeed):
    """One exporter's snapshots, polled from ``/api/v1/snapshot``: a :class:`FallibleFeed`.

    A snapshot is news (:meth:`on_snapshot`) when its timestamp or health differs from the last
    one's (a wedged exporter repeats its last good snapshot, flagged wedged), or when it is the
    first answer after a failure (the host is back, maybe with the same snapshot); a failed poll
    is news (:meth:`on_failure`) when the poll before it succeeded or failed for another reason.
    While failing, polls back off (:meth:`next_delay`).
    """

    def __init__(
        self,
        target: RemoteTarget,
        connection: Connection = Connection(),
        *,
        interval_seconds: float = 1.0,
        backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
        rng: random.Random | None = None,
    ) -> None:
        if interval_seconds <= 0:
            raise ConfigError(f"interval must be positive, got {interval_seconds:g}")
        super().__init__(interval_seconds, "no answer from the exporter yet")
        self.target = target
        self.backoff_cap_seconds = backoff_cap_seconds
        self.client = ExporterClient(target, connection)
        self._rng = rng or random.Random()
        self._failures = 0  # polls failed in a row
        self._up = False  # the newest poll returned a snapshot

    @property
    def name(self) -> str:
        base = self.target.base_url
        return base if self.target.name is None else f"{self.target.name} ({base})"

    async def poll(self) -> Snapshot | None:
        """One request now; tells the listeners if something changed. The snapshot, or None
        when the poll failed (:attr:`not_ready_reason` says why)."""
        try:
            snapshot = await self.client.snapshot()
        except FetchError as exc:
            self._failures += 1
            self._up = False
            if self._error != exc.reason:
                self._tell_failure(exc.reason)
            return None
        self._failures = 0
        last = self._latest
        # A wedged exporter serves its last good snapshot again (same timestamp) with the health
        # saying so: a changed health is news too, or the wedge would never be shown.
        news = (
            not self._up
            or last is None
            or last.timestamp != snapshot.timestamp
            or last.health != snapshot.health
        )
        self._up = True
        if news:
            self._tell_snapshot(snapshot)
        else:
            self._error = None
        return snapshot

    def next_delay(self, elapsed: float = 0.0) -> float:
        """Seconds until the next poll: the rest of the interval while up, a jittered backoff
        (from now) while failing."""
        if self._failures == 0:
            return max(0.0, self.interval_seconds - elapsed)
        first = min(self.interval_seconds, BACKOFF_FIRST_SECONDS)
        ceiling = min(self.backoff_cap_seconds, first * 2 ** min(self._failures - 1, 32))
        return self._rng.uniform(ceiling / 2, ceiling)

    async def close(self) -> None:
        """Close the HTTP session (after :meth:`run` has returned)."""
        await self.client.close()


def remote_fleet(
    targets: Sequence[RemoteTarget],
    connection: Connection = Connection(),
    *,
    interval_seconds: float = 1.0,
    backoff_cap_seconds: float = BACKOFF_CAP_SECONDS,
) -> FleetFeed:
    """Exporters as the hosts of one fleet (``top --url``/``--targets``): a host whose exporter's
    NVML is down shows down, as this host's would; each host's HTTP session closes with the
    fleet."""
    feeds = [
        (
            t.host,
            RemoteFeed(
                t,
                connection,
                interval_seconds=interval_seconds,
                backoff_cap_seconds=backoff_cap_seconds,
            ),
        )
        for t in targets
    ]
    return FleetFeed(feeds, judge=nvml_down, closers=[feed.close for _, feed in feeds])
