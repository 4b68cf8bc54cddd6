"""A Prometheus query API (Prometheus, Thanos Query, Mimir, VictoriaMetrics) over HTTP.

Everything vgpumon reads from a metrics store goes through :class:`PrometheusClient`: the
fleet ``top --prometheus`` shows (:mod:`vgpumon.sources.prometheus_fleet`), the graphs' backfill
(:mod:`vgpumon.sources.prometheus`) and the usage totals (:mod:`vgpumon.sources.usage`). It
requests through the same HTTP layer as the exporters' client
(:class:`vgpumon.sources.remote.HttpClient`: TLS with a CA file or none, basic auth or a bearer
token, a time limit, a capped body), reads answers off the event loop when they are large
(:mod:`vgpumon.sources.bodies`), and turns every way a query fails into one
:class:`PrometheusError` line a screen can print: no connection, no answer in time, refused
credentials, a query the server refused (its own words), an answer that is not one. An answer
the server marks partial (Thanos' partial response, a store that did not answer) keeps its
``warnings``, so a screen can say the data is incomplete instead of showing less as if it were
all.

``--prometheus.selector`` narrows every query: its matchers (``{cluster="eu-1"}``) are added to
each selector a query is built from (:meth:`PrometheusClient.select`), checked once at start.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from yarl import URL

from vgpumon.errors import ConfigError, VgpumonError, one_line
from vgpumon.sources.bodies import CHUNK_BYTES, loads
from vgpumon.sources.remote import Connection, FetchError, HttpClient
from vgpumon.text import printable

# The most of one answer read: an hour of 1 s points of every vGPU of a 16 x 48 host, or one
# family of a few thousand hosts, is some tens of MB; hundreds of MB is not an answer to these.
MAX_ANSWER_BYTES = 64 << 20
DEFAULT_TIMEOUT_SECONDS = 10.0

# One label matcher of a selector: name, operator, double-quoted value (PromQL's escapes).
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def prometheus_url(url: str) -> str:
    """A Prometheus server's base URL as given (``--prometheus``), without a trailing slash
    (a path prefix is kept: Mimir serves its API under ``/prometheus``)."""
    text = url.strip().rstrip("/")
    if not text.startswith(("http://", "https://")):
        raise ConfigError(f"bad Prometheus URL {url!r}: give http://HOST:9090 (or https://)")
    try:
        parsed = URL(text)
    except ValueError as exc:
        raise ConfigError(f"bad Prometheus URL {url!r}: {one_line(exc)}") from None
    if not parsed.host:
        raise ConfigError(f"bad Prometheus URL {url!r}: it names no host")
    if parsed.user is not None:
        raise ConfigError(
            f"bad Prometheus URL {url!r}: give credentials with --prometheus.username and "
            "--prometheus.password-file, not in the URL"
        )
    return str(parsed.with_query(None).with_fragment(None)).rstrip("/")


def parse_selector(text: str | None) -> tuple[str, ...]:
    """The label matchers of ``{cluster="eu-1",env=~"prod.*"}`` (braces optional), each as
    PromQL writes it; ConfigError (one line) for anything else."""
    if text is None:
        return ()
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    matchers: list[str] = []
    pos = 0
    while pos < len(body):
        found = _MATCHER.match(body, pos)
        if found is None:
            raise ConfigError(
                f"--prometheus.selector {text!r}: expected label matchers such as "
                '{cluster="eu-1",env=~"prod.*"}'
            )
        name, op, value = found.groups()
        if name == "__name__":
            raise ConfigError(
                f"--prometheus.selector {text!r}: it narrows the hosts; the metric names are "
                "vgpumon's"
            )
        matchers.append(f'{name}{op}"{value}"')
        pos = found.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ConfigError(f"--prometheus.selector {text!r}: matchers are separated by ,")
            pos += 1
    return tuple(matchers)


def quote(value: str) -> str:
    """``value`` as a PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def regex_of(values: Sequence[str]) -> str:
    """An RE2 alternation matching exactly ``values`` (each escaped)."""
    return "|".join(re.escape(v) for v in values)


class PrometheusError(VgpumonError):
    """A query that gave no answer; ``reason`` is one line (without the URL)."""

    def __init__(self, url: str, reason: str, kind: str = FetchError.STATUS) -> None:
        super().__init__(f"Prometheus at {url}: {reason}")
        self.reason = printable(reason)  # the server's own words reach screens as they are
        self.kind = kind


Series = tuple[dict[str, str], float]


@dataclass(frozen=True)
class Answer:
    """An instant vector: (labels, value) per series, and what the server said was partial."""

    series: list[Series]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Target:
    """A scrape target as the server's targets API reports it (Prometheus only)."""

    labels: dict[str, str]
    scrape_url: str | None
    health: str  # up | down | unknown
    last_error: str | None
    interval_seconds: float | None


class PrometheusClient:
    """Queries to one Prometheus-compatible API over one :class:`HttpClient`."""

    def __init__(
        self,
        url: str,
        connection: Connection | None = None,
        *,
        selector: str | None = None,
        limit_bytes: int | None = None,
    ) -> None:
        self.url = prometheus_url(url)
        self.connection = connection or Connection(timeout_seconds=DEFAULT_TIMEOUT_SECONDS)
        self.matchers = parse_selector(selector)
        # Every answer is read through this cap (MAX_ANSWER_BYTES unless given).
        limit = MAX_ANSWER_BYTES if limit_bytes is None else limit_bytes
        self.http = HttpClient(self.connection, self.connection.authorization(), limit_bytes=limit)
        self.queries = 0  # requests answered (a bench reads the count and the time)
        self.query_seconds = 0.0

    @property
    def selector(self) -> str:
        """The narrowing matchers as one selector (``{}`` when none)."""
        return "{" + ",".join(self.matchers) + "}"

    def select(self, name: str, *extra: str) -> str:
        """``name{<--prometheus.selector>,<extra matchers>}``."""
        matchers = (*self.matchers, *extra)
        return f"{name}{{{','.join(matchers)}}}" if matchers else name

    async def close(self) -> None:
        await self.http.close()

    # ------------------------------------------------------------------ requests

    async def _get(self, path: str, params: dict[str, str] | None, what: str) -> Any:
        """The decoded JSON body of an answer Prometheus marked success."""
        url = self.url + path
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            status, data, _charset = await self.http.get(url, "application/json", params)
        except FetchError as exc:
            raise PrometheusError(self.url, exc.reason, exc.kind) from None
        finally:
            self.query_seconds += loop.time() - started
        self.queries += 1
        if status == 401:
            said = "refused the credentials" if self.http.authorization else "wants credentials"
            raise PrometheusError(self.url, f"HTTP 401: it {said}", FetchError.AUTH)
        if status == 404:
            raise PrometheusError(self.url, f"HTTP 404: no {path} here", FetchError.STATUS)
        try:
            body = loads(data) if len(data) < CHUNK_BYTES else await asyncio.to_thread(loads, data)
        except ValueError:
            raise PrometheusError(
                self.url,
                f"HTTP {status}: the answer is not JSON (is this a Prometheus API?)",
                FetchError.PAYLOAD,
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, dict) else None
            said = one_line(error, 200) if isinstance(error, str) and error else "no result"
            raise PrometheusError(self.url, f"refused {what} (HTTP {status}): {said}")
        return body

    async def raw_instant(self, promql: str, at: float | None = None) -> Any:
        """The raw answer of an instant query (a range vector's samples, say)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return await self._get("/api/v1/query", params, promql)

    async def instant(self, promql: str, at: float | None = None) -> Answer:
        """The instant vector ``promql`` gives (now, or at ``at``)."""
        body = await self.raw_instant(promql, at)
        try:
            series = (
                instant_vector(body)
                if _small(body)
                else await asyncio.to_thread(instant_vector, body)
            )
        except ValueError as exc:
            raise PrometheusError(self.url, f"{promql}: {exc}", FetchError.PAYLOAD) from None
        return Answer(series, _warnings(body))

    async def range_query(self, promql: str, start: float, end: float, step: float) -> Any:
        """The raw answer of a range query (the backfill reads the matrix itself)."""
        params = {
            "query": promql,
            "start": f"{start:.3f}",
            "end": f"{end:.3f}",
            "step": f"{step:g}",
        }
        return await self._get("/api/v1/query_range", params, promql)

    async def targets(self) -> list[Target] | None:
        """The active scrape targets, or None where the API has none (Thanos, Mimir)."""
        try:
            body = await self._get("/api/v1/targets", {"state": "active"}, "the targets")
        except PrometheusError as exc:
            if exc.reason.startswith(("HTTP 404", "refused the targets")):
                return None
            raise
        data = body.get("data")
        found = data.get("activeTargets") if isinstance(data, dict) else None
        out = []
        for item in found if isinstance(found, list) else ():
            if not isinstance(item, dict) or not isinstance(item.get("labels"), dict):
                continue
            error = item.get("lastError")
            url = item.get("scrapeUrl")
            out.append(
                Target(
                    labels={str(k): str(v) for k, v in item["labels"].items()},
                    scrape_url=url if isinstance(url, str) and url else None,
                    health=str(item.get("health") or "unknown"),
                    last_error=printable(one_line(error, 200))
                    if isinstance(error, str) and error
                    else None,
                    interval_seconds=_seconds(item.get("scrapeInterval")),
                )
            )
        return out


def _small(body: Any) -> bool:
    data = body.get("data") if isinstance(body, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    return not isinstance(result, list) or len(result) < 2000


def _warnings(body: dict[str, Any]) -> tuple[str, ...]:
    found = body.get("warnings")
    if not isinstance(found, list):
        return ()
    return tuple(printable(one_line(w, 200)) for w in found if isinstance(w, str) and w)


def _seconds(text: object) -> float | None:
    """A Prometheus duration (``15s``, ``1m``, ``1m30s``) in seconds; None if it is not one."""
    if not isinstance(text, str) or not text:
        return None
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
    total = 0.0
    for number, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)", text):
        total += float(number) * units[unit]
    return total or None


def instant_vector(body: dict[str, Any]) -> list[Series]:
    """(labels, value) of each series of a ``/api/v1/query`` answer; ValueError (one line)
    where the answer is not shaped as Prometheus shapes an instant vector. Values that are not
    finite (NaN from a division by zero) are kept: each reader says what it does with them."""
    data = body.get("data")
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(result, list):
        raise ValueError("the answer holds no vector (data.result is not a list)")
    out = []
    for i, item in enumerate(result):
        metric = item.get("metric", {}) if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if (
            not isinstance(metric, dict)
            or not isinstance(value, list)
            or len(value) != 2
            or not isinstance(value[1], str)
        ):
            raise ValueError(f"series {i} of the answer is not a sample of an instant vector")
        try:
            number = float(value[1])
        except ValueError:
            raise ValueError(f"series {i}: {value[1][:40]!r} is not a number") from None
        # The labels as JSON gave them, not copied (tens of thousands of series a refresh):
        # every reader takes a label's value only where it is text.
        out.append((metric, number))
    return out
