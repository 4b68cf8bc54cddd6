"""The HTTP server's own families (connections, timeouts, answers, auth refusals) for /metrics.

The rows are the metric table's (``vgpumon_http_*``, section "Exporter health"); their values
are the counts of the :class:`~vgpumon.export.connections.ConnectionGuard` and of the web
config's basic auth, read when a render starts, so they are as old as the snapshot they are
served with (one sampling interval at most), like the ``process_*`` families.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vgpumon.export.connections import ConnectionGuard
from vgpumon.metrics.exposition import Renderer
from vgpumon.metrics.table import FAMILIES, HTTP_SERVER_PREFIX

HTTP_FAMILIES = tuple(f for f in FAMILIES if f.name.startswith(HTTP_SERVER_PREFIX))


@dataclass(frozen=True)
class HttpServerCounts:
    """One reading of the server's counts, as the table's ``HTTP_SERVER`` scope reads them."""

    open: int
    accepted: int
    refused: int
    evicted: dict[str, int]
    timeouts: dict[str, int]
    requests: dict[int, int]
    auth: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Reading:
    """What the renderer walks: a snapshot-like object holding only the server's counts."""

    http_server: HttpServerCounts


def server_families(
    guard: ConnectionGuard, web_config: Any = None
) -> Callable[[], tuple[str, str]]:
    """A callable giving (text, OpenMetrics) of the ``vgpumon_http_*`` families, no ``# EOF``.

    ``web_config`` (a :class:`vgpumon.export.webconfig_runtime.WebConfigRuntime`) brings the auth
    refusals; without basic auth that family has no series.
    """
    renderer = Renderer(families=HTTP_FAMILIES)

    def render() -> tuple[str, str]:
        stats = guard.stats
        auth = getattr(web_config, "auth_refusals", None)
        counts = HttpServerCounts(
            open=guard.open,
            accepted=stats.accepted,
            refused=stats.refused,
            evicted=dict(stats.evicted),
            timeouts=dict(stats.timeouts),
            requests=dict(stats.requests),
            auth=dict(auth) if auth else {},
        )
        exposition = renderer.render(_Reading(counts))  # type: ignore[arg-type]
        text = b"".join(exposition.text_parts).decode()
        openmetrics = b"".join(exposition.openmetrics_parts[:-1]).decode()  # without # EOF
        return text, openmetrics

    return render


def joined(*extras: Callable[[], tuple[str, str]]) -> Callable[[], tuple[str, str]]:
    """Several ``extra`` callables as one, their outputs one after the other."""

    def render() -> tuple[str, str]:
        parts = [extra() for extra in extras]
        return "".join(p[0] for p in parts), "".join(p[1] for p in parts)

    return render
