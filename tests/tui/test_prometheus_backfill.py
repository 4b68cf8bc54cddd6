"""``top --prometheus``: a real Prometheus scrapes ``vgpumon serve --sim``; the history that top
opens with is filled from its range queries, so graphs are full at once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from export_helpers import free_port
from prometheus_helpers import prometheus_binary, start_prometheus, stop_all
from tui_helpers import until

from vgpumon.errors import ConfigError
from vgpumon.sources.history import History, gpu_entity, vgpu_entity
from vgpumon.sources.prometheus import PrometheusBackfill, series_table
from vgpumon.sources.remote import RemoteFeed, RemoteTarget, remote_fleet
from vgpumon.tui.app import create_app
from vgpumon.tui.widgets.graph import Graph

pytestmark = pytest.mark.e2e
SAMPLES_WANTED = 8  # scrapes Prometheus holds before the tests start
# Points a range query ending at the snapshot returns: a few less than the scrapes (the first and
# newest scrapes fall on either side of the query's step grid).
PAST_POINTS = 5


def test_the_metric_table_names_every_graphed_metric() -> None:
    found = {(s.kind, s.metric) for s in series_table()}
    assert ("gpu", "util") in found and ("gpu", "power") in found
    assert ("vgpu", "sm") in found
    assert ("mig", "gpm_sm") in found
    temperature = next(s for s in series_table() if s.metric == "temperature")
    assert dict(temperature.match) == {"sensor": "gpu"}  # picks the GPU sensor, not memory


def test_a_bad_prometheus_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        PrometheusBackfill("localhost:9090")


def query(url: str, promql: str) -> list[dict[str, object]]:
    params = urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=5) as resp:
        data = json.load(resp)
    return list(data["data"]["result"])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(exporter URL, Prometheus URL), Prometheus holding at least a few seconds of history."""
    prometheus_binary()  # skip (or fail in CI) before starting anything
    tmp = tmp_path_factory.mktemp("backfill")
    exporter_port = free_port()
    procs = []
    log = (tmp / "vgpumon.log").open("wb")
    procs.append(
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vgpumon.cli",
                "serve",
                "--sim",
                "kvm-vgpu-timesliced",
                "--web.listen-address",
                f"127.0.0.1:{exporter_port}",
                "--interval",
                "0.5",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    )
    target = f"127.0.0.1:{exporter_port}"
    jobs = [{"job_name": "vgpumon", "static_configs": [{"targets": [target]}]}]
    prom, proc, _ = start_prometheus(tmp, jobs)
    procs.append(proc)
    try:
        give_up = time.monotonic() + 90
        while True:
            try:
                got = query(prom, 'count_over_time(vgpumon_gpu_utilization_ratio{gpu="0"}[5m])')
                if got and float(got[0]["value"][1]) >= SAMPLES_WANTED:  # type: ignore[index]
                    break
            except (OSError, urllib.error.URLError, KeyError, ValueError):
                pass
            if time.monotonic() > give_up:
                logs = "\n".join(p.read_text()[-1500:] for p in Path(tmp).glob("*.log"))
                pytest.fail(f"Prometheus never held {SAMPLES_WANTED} samples\n{logs}")
            time.sleep(0.5)
        yield f"http://127.0.0.1:{exporter_port}", prom
    finally:
        stop_all(procs)


async def test_backfill_fills_the_history_from_range_queries(stack: tuple[str, str]) -> None:
    exporter, prom = stack
    feed = RemoteFeed(RemoteTarget(exporter, name="kvm-01"))
    snap = await feed.poll()
    await feed.close()
    assert snap is not None
    history = History()
    added = await PrometheusBackfill(prom).fill(history, "kvm-01", snap)
    assert added > 0
    gpu0, gpu2 = snap.gpus[0], snap.gpus[2]
    util = history.series("kvm-01", gpu_entity(gpu0.uuid), "util")
    assert len(util) >= PAST_POINTS and all(t < snap.timestamp for t, _ in util)
    assert {v for _, v in util} == {1.0}  # the scenario's duty on GPU 0
    assert {v for _, v in history.series("kvm-01", gpu_entity(gpu2.uuid), "util")} == {0.35}
    sm = history.series("kvm-01", vgpu_entity(gpu2.uuid, 21), "sm")
    assert len(sm) >= PAST_POINTS  # vGPUs have a past too


async def test_top_opens_with_full_graphs(stack: tuple[str, str]) -> None:
    exporter, prom = stack
    feed = remote_fleet([RemoteTarget(exporter, name="kvm-01")], interval_seconds=0.5)
    app = create_app(feed, backfill=PrometheusBackfill(prom, step_seconds=1.0))
    opened = time.time()
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: any("filled from Prometheus" in e.text for _, e in app.events))
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.screen.query("#g-util")))
        graph = app.screen.query_one("#g-util", Graph)
        # Points from before top started: only Prometheus can have given them.
        await until(pilot, lambda: sum(t < opened - 1 for t, _ in graph.points) >= PAST_POINTS)
