"""A real Prometheus for the end-to-end tests: find it, start it on a free port, stop it.

The exporter, dashboard and ``top --prometheus`` tests each run one; they differ in what they
scrape and which rules they load, not in how the server is started or stopped.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml
from ci_helpers import tool
from export_helpers import free_port


def prometheus_binary() -> str:
    """Debian's ``prometheus``; skipped without it, except in CI, which must have it."""
    return tool("prometheus", "Debian package prometheus")


def start(cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``cmd`` in the background, its output in ``log`` (read back when a test fails)."""
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


# One scrape and one rule evaluation a second: the tests wait seconds, not minutes.
FAST = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}


def start_prometheus(
    directory: Path, jobs: Sequence[dict[str, Any]], *, rule_files: Sequence[Path] = ()
) -> tuple[str, subprocess.Popen[bytes], Path]:
    """Prometheus scraping ``jobs``, its data and log in ``directory``: (URL, process, log)."""
    config: dict[str, Any] = {"global": FAST}
    if rule_files:
        config["rule_files"] = [str(p) for p in rule_files]
    config["scrape_configs"] = list(jobs)
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = directory / "prometheus.log"
    proc = start(
        [
            prometheus_binary(),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log,
    )
    return f"http://127.0.0.1:{port}", proc, log


def stop_all(procs: Iterable[subprocess.Popen[bytes]]) -> None:
    """Terminate every process, then wait for each (killing one that does not stop in 10 s)."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PrometheusStandIn:
    """A loopback HTTP server that answers ``/api/v1/query`` as Prometheus does, with what the
    test sets: ``vector(promql)`` gives (labels, value) pairs, ``error`` an error answer,
    ``raw`` a body as it is (a wrongly shaped or endless answer). Use it as a context manager.
    """

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.vector: Any = lambda promql: []
        self.error: str | None = None
        self.raw: bytes | None = None
        self.queries: list[str] = []
        self.params: list[dict[str, list[str]]] = []  # every request's query parameters
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the stdlib calls it by this name
                import json
                import urllib.parse

                params = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
                promql = params.get("query", [""])[0]
                stand_in.queries.append(promql)
                stand_in.params.append(params)
                status = 200
                if stand_in.raw is not None:
                    body = stand_in.raw
                elif stand_in.error is not None:
                    status = 400
                    doc = {"status": "error", "errorType": "bad_data", "error": stand_in.error}
                    body = json.dumps(doc).encode()
                else:
                    at = float(params.get("time", ["0"])[0])
                    result = [
                        {"metric": labels, "value": [at, value]}
                        for labels, value in stand_in.vector(promql)
                    ]
                    doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
                    body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> PrometheusStandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
