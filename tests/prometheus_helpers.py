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
