"""``top --prometheus`` on a real Prometheus scraping real exporters: the fleet it lists, the same
values on every screen as ``top --url`` reads from the same exporters, and Prometheus down, slow,
refusing or answering in part shown as such without the screen waiting on it.

One Prometheus scrapes, every second: three exporters (``vgpumon serve --sim``, sampling every
5 s so that one sample stays served for several scrapes) in clusters eu-1 and eu-2, a target of
eu-1 where nothing listens, and a job of another kind (not vgpumon). A small proxy in front of
Prometheus misbehaves on demand: refuses, stalls, answers one family with an error or a warning.
"""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from dashboard_helpers import FLEET_RULES
from export_helpers import free_port
from prometheus_helpers import prometheus_binary, start, start_prometheus, stop_all
from screen_views import cells
from screen_views import host as host_screens

from vgpumon.feed import VIA_LIVE, VIA_STORE, Focus, HostState
from vgpumon.model import Snapshot
from vgpumon.sources.promapi import PrometheusClient
from vgpumon.sources.prometheus_fleet import ROLLUP_QUERIES, PrometheusFleet, rollup_of
from vgpumon.sources.remote import Connection, ExporterClient, RemoteTarget
from vgpumon.view import rows as vr
from vgpumon.view.columns import HOST_COLUMNS

pytestmark = pytest.mark.e2e

EXPORTERS = {  # scenario -> (cluster, extra flags)
    "kvm-vgpu-timesliced": ("eu-1", ["--process-series"]),
    "a100-mig-mixed": ("eu-1", ["--process-series"]),
    "baremetal-8xh100": ("eu-2", []),
    # The driver's own verdicts on the fleet's row: CC not ready, a repair pending, memory
    # beyond repair (from 20 s), MIG-backed vGPUs and encoder schedulers on the host's screens.
    "driver-surfaces": ("eu-1", []),
    "recovery-reset": ("eu-1", []),
}
SAMPLE_SECONDS = 5.0
STARTUP_SECONDS = 40.0
FAST = Connection(timeout_seconds=3.0)


@dataclass
class Stack:
    url: str  # Prometheus
    exporters: dict[str, str]  # scenario -> its instance (HOST:PORT)
    dead: str  # the instance where nothing listens
    logs: list[Path]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_binary()  # skip (or fail in CI) before starting anything
    tmp = tmp_path_factory.mktemp("prometheus-fleet")
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    exporters: dict[str, str] = {}
    groups: dict[str, list[str]] = {"eu-1": [], "eu-2": []}
    try:
        for scenario, (cluster, extra) in EXPORTERS.items():
            port = free_port()
            log = tmp / f"{scenario}.log"
            cmd = [
                sys.executable,
                "-m",
                "vgpumon.cli",
                "serve",
                "--sim",
                scenario,
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--interval",
                f"{SAMPLE_SECONDS:g}",
                *extra,
            ]
            procs.append(start(cmd, log))
            logs.append(log)
            exporters[scenario] = f"127.0.0.1:{port}"
            groups[cluster].append(f"127.0.0.1:{port}")
        dead = f"127.0.0.1:{free_port()}"
        groups["eu-1"].append(dead)
        jobs = [
            {
                "job_name": "vgpumon",
                "static_configs": [
                    {"targets": targets, "labels": {"cluster": cluster}}
                    for cluster, targets in groups.items()
                ],
            },
            {  # another kind of target: its job has no vgpumon exporter
                "job_name": "node",
                "metrics_path": "/not-vgpumon",
                "static_configs": [{"targets": [exporters["baremetal-8xh100"]]}],
            },
        ]
        url, proc, log = start_prometheus(tmp, jobs, rule_files=[FLEET_RULES])
        procs.append(proc)
        logs.append(log)
        result = Stack(url, exporters, dead, logs)
        asyncio.run(_scraped(result))
        yield result
    finally:
        stop_all(procs)


async def _scraped(stack: Stack) -> None:
    client = PrometheusClient(stack.url, FAST)
    give_up = time.monotonic() + STARTUP_SECONDS
    try:
        while time.monotonic() < give_up:
            try:
                # Every exporter's sample in, and every vgpumon target scraped once (the dead
                # one's failure too: a host is listed from its target's ``up``).
                got = await client.instant("count(vgpumon_last_sample_timestamp_seconds)")
                ups = await client.instant('count(up{job="vgpumon"})')
                if (
                    got.series
                    and got.series[0][1] == len(EXPORTERS)
                    and ups.series
                    and ups.series[0][1] == len(EXPORTERS) + 1
                ):
                    return
            except Exception:  # noqa: BLE001 - Prometheus still starting
                pass
            await asyncio.sleep(0.5)
    finally:
        await client.close()
    tails = "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in stack.logs)
    pytest.fail(f"Prometheus did not scrape the exporters in {STARTUP_SECONDS} s\n{tails}")


def fleet_of(url: str, **kwargs: Any) -> PrometheusFleet:
    client = PrometheusClient(url, FAST, selector=kwargs.pop("selector", None))
    return PrometheusFleet(client, **kwargs)


GPUS = {
    "kvm-vgpu-timesliced": 3,
    "a100-mig-mixed": 2,
    "baremetal-8xh100": 8,
    "driver-surfaces": 3,
    "recovery-reset": 3,
}


async def test_the_fleet_is_every_vgpumon_target_named_by_its_group(stack: Stack) -> None:
    feed = fleet_of(stack.url, group_by=("cluster",))
    await feed.refresh_once()
    fleet = feed.latest
    by_host = {u.host: u for u in fleet.hosts}
    expected = {f"{EXPORTERS[s][0]}/{instance}" for s, instance in stack.exporters.items()} | {
        f"eu-1/{stack.dead}"
    }
    assert set(by_host) == expected, "the node job is not vgpumon's: left out"
    assert list(by_host) == sorted(by_host, key=lambda h: (h.split("/")[0], h)), "grouped"
    for scenario, instance in stack.exporters.items():
        update = by_host[f"{EXPORTERS[scenario][0]}/{instance}"]
        assert update.state is HostState.UP and update.via == VIA_STORE, update
        assert update.snapshot is not None and len(update.snapshot.gpus) == GPUS[scenario]
    dead = by_host[f"eu-1/{stack.dead}"]
    assert dead.state is HostState.UNREACHABLE
    assert dead.error is not None and "connection refused" in dead.error, dead.error
    assert feed.interval_seconds == 1.0, "the refresh follows the scrape interval"
    await feed.client.close()


async def test_a_selector_narrows_every_query(stack: Stack) -> None:
    feed = fleet_of(stack.url, selector='{cluster="eu-2"}')
    await feed.refresh_once()
    assert [u.host for u in feed.latest.hosts] == [stack.exporters["baremetal-8xh100"]]
    await feed.client.close()


async def _same_sample(
    feed: PrometheusFleet, host: str, instance: str
) -> tuple[Snapshot, Snapshot]:
    """The host from its exporter and from Prometheus, of the same sample."""
    client = ExporterClient(RemoteTarget(f"http://{instance}"), FAST)
    feed.focus(Focus("host", (host,)))
    try:
        for _ in range(40):
            live = await client.snapshot()
            await feed.refresh_once()
            update = next(u for u in feed.latest.hosts if u.host == host)
            if update.snapshot is not None and update.snapshot.timestamp == live.timestamp:
                return live, update.snapshot
            await asyncio.sleep(0.5)
    finally:
        await client.close()
    raise AssertionError(f"{host}: Prometheus never held the exporter's sample")


@pytest.mark.parametrize("scenario", list(EXPORTERS))
async def test_every_screen_shows_what_top_url_shows(stack: Stack, scenario: str) -> None:
    """Every table of every screen (the fleet row, the host's GPUs, vGPUs, MIG instances and
    processes, scheduler, licenses, capacity, usage; text, colours, badges, gauges) and the
    event log, for one sample of each exporter read both ways."""
    instance = stack.exporters[scenario]
    feed = fleet_of(stack.url)
    try:
        await feed.refresh_once()
        live, stored = await _same_sample(feed, instance, instance)
    finally:
        await feed.client.close()
    if "--process-series" in EXPORTERS[scenario][1]:
        assert host_screens(stored) == host_screens(live)
        return
    # Without --process-series the exporter keeps its processes out of Prometheus (they churn
    # the TSDB): the process tables are empty, everything else is the same (docs/fleet.md).
    assert all(g.processes is None for g in stored.gpus)
    without = [dataclasses.replace(g, processes=None) for g in live.gpus]
    assert host_screens(stored) == host_screens(dataclasses.replace(live, gpus=tuple(without)))


@dataclass
class Proxy:
    """Prometheus behind a proxy that misbehaves on demand."""

    target: str
    mode: str = "pass"  # pass | refuse | stall | refuse_family | warn
    family: str = "vgpumon_gpu_power_watts"
    seen: list[str] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        query = request.query.get("query", "")
        self.seen.append(query)
        if self.mode == "refuse":
            raise web.HTTPServiceUnavailable(text="down for maintenance")
        if self.mode == "stall":
            await asyncio.sleep(30)
        if self.mode == "refuse_family" and query.startswith(self.family):
            return web.json_response(
                {"status": "error", "errorType": "timeout", "error": "query timed out"},
                status=503,
            )
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.target + request.path, params=request.query) as answer,
        ):
            body = await answer.json(content_type=None)
        if self.mode == "warn" and query.startswith(self.family):
            body["warnings"] = ["store eu-2 did not answer: partial response"]
        return web.json_response(body, status=answer.status)


@pytest.fixture
async def proxy(stack: Stack) -> AsyncIterator[tuple[Proxy, str]]:
    found = Proxy(stack.url)
    app = web.Application()
    app.router.add_get("/{tail:.*}", found.handle)
    # A stalled handler is cancelled at cleanup, not waited for (aiohttp waits 60 s by default).
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    yield found, f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def test_prometheus_down_keeps_the_data_and_says_so_once_it_is_old(
    proxy: tuple[Proxy, str], stack: Stack
) -> None:
    bad, url = proxy
    clock = [1000.0]
    feed = PrometheusFleet(PrometheusClient(url, FAST), clock=lambda: clock[0])
    await feed.refresh_once()
    before = {u.host: u for u in feed.latest.hosts}
    bad.mode = "refuse"
    clock[0] += 0.5  # one failed refresh within the grace: nothing changes yet
    await feed.refresh_once()
    assert {u.host: u.state for u in feed.latest.hosts} == {h: u.state for h, u in before.items()}
    clock[0] += 10.0
    await feed.refresh_once()
    for update in feed.latest.hosts:
        assert update.state is HostState.UNREACHABLE and update.stale == (
            update.snapshot is not None
        )
        assert update.error is not None and "HTTP 503" in update.error, update.error
        assert update.snapshot is before[update.host].snapshot, "the last data is kept"
    assert "Prometheus" in feed.name and "HTTP 503" in feed.name
    bad.mode = "pass"
    await feed.refresh_once()
    assert all(u.state is HostState.UP for u in feed.latest.hosts if u.host != stack.dead), (
        "back as soon as it answers"
    )
    await feed.client.close()


async def test_prometheus_slow_never_holds_the_refresh_beyond_its_timeout(
    proxy: tuple[Proxy, str],
) -> None:
    bad, url = proxy
    feed = PrometheusFleet(PrometheusClient(url, Connection(timeout_seconds=1.0)))
    bad.mode = "stall"
    started = time.monotonic()
    await feed.refresh_once()
    assert time.monotonic() - started < 3.0
    assert feed.not_ready_reason is not None and "no answer within 1 s" in feed.not_ready_reason
    await feed.client.close()


@pytest.mark.parametrize("mode", ["refuse_family", "warn"])
async def test_a_partial_answer_is_said_on_every_host(
    proxy: tuple[Proxy, str], stack: Stack, mode: str
) -> None:
    bad, url = proxy
    feed = PrometheusFleet(PrometheusClient(url, FAST))
    await feed.refresh_once()
    power = {
        u.host: [g.power_watts for g in u.snapshot.gpus]
        for u in feed.latest.hosts
        if u.snapshot is not None
    }
    bad.mode = mode
    await feed.refresh_once()
    said = "query timed out" if mode == "refuse_family" else "partial response"
    for update in feed.latest.hosts:
        if update.host == stack.dead:
            continue
        assert update.state is HostState.UP
        assert update.error is not None and update.error.startswith("partial data"), update
        assert said in update.error
        assert update.snapshot is not None
        # The family that failed keeps its last answer; one marked partial is what came.
        assert [g.power_watts for g in update.snapshot.gpus] == power[update.host]
    assert "partial" in feed.name
    await feed.client.close()


async def test_a_host_opens_live_from_its_exporter_and_goes_back(stack: Stack) -> None:
    instance = stack.exporters["a100-mig-mixed"]
    feed = fleet_of(stack.url)
    stop = asyncio.Event()
    running = asyncio.create_task(feed.run(stop))
    try:
        for _ in range(50):
            if any(u.host == instance and u.state is HostState.UP for u in feed.latest.hosts):
                break
            await asyncio.sleep(0.1)
        feed.live(instance, True)
        for _ in range(50):
            update = next(u for u in feed.latest.hosts if u.host == instance)
            if update.via == VIA_LIVE:
                break
            await asyncio.sleep(0.1)
        assert update.via == VIA_LIVE and update.state is HostState.UP
        assert update.snapshot is not None and update.snapshot.source == "sim:a100-mig-mixed"
        feed.live(instance, False)
        await asyncio.sleep(0.2)
        update = next(u for u in feed.latest.hosts if u.host == instance)
        assert update.via == VIA_STORE
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


async def test_a_host_whose_exporter_is_not_reachable_stays_on_prometheus(stack: Stack) -> None:
    feed = fleet_of(stack.url)
    stop = asyncio.Event()
    running = asyncio.create_task(feed.run(stop))
    try:
        await asyncio.sleep(1.0)
        feed.live(stack.dead, True)
        for _ in range(50):
            update = next(u for u in feed.latest.hosts if u.host == stack.dead)
            if update.error is not None and update.error.startswith("live:"):
                break
            await asyncio.sleep(0.1)
        assert update.via == VIA_STORE
        assert update.error is not None and "connection refused" in update.error, update.error
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


async def test_the_fleet_rules_give_each_host_the_row_its_own_series_give(stack: Stack) -> None:
    """vgpumon-fleet.rules.yml, evaluated by Prometheus, against the fleet screen's row of the
    same sample read from the exporter: every column, colour and badge."""
    client = PrometheusClient(stack.url, FAST)
    try:
        for scenario, instance in stack.exporters.items():
            exporter = ExporterClient(RemoteTarget(f"http://{instance}"), FAST)
            want = got = None
            for _ in range(30):  # until the rules were evaluated on the exporter's sample
                live = await exporter.snapshot()
                per: dict[str, Any] = {}
                for name in sorted(ROLLUP_QUERIES):
                    answer = await client.instant(client.select(name, f'instance="{instance}"'))
                    per[name] = answer.series
                want = cells([vr.host_row(instance, "up", live)], HOST_COLUMNS)
                got = cells([vr.host_row_from_rollup(instance, "up", rollup_of(per))], HOST_COLUMNS)
                if got == want:
                    break
                await asyncio.sleep(0.5)
            await exporter.close()
            assert got == want, scenario
    finally:
        await client.close()


async def test_a_large_fleet_is_read_as_the_rules_figures(stack: Stack) -> None:
    """Above the size at which every host's series would be read, the rules' figures are: one
    series per host and figure; the host shown in full still reads all of its own."""
    shown = stack.exporters["kvm-vgpu-timesliced"]
    feed = fleet_of(stack.url, rollup_above_hosts=0)
    try:
        await feed.refresh_once()
        assert feed.rules is True and feed.rollup_mode
        feed.focus(Focus("host", (shown,)))
        await feed.refresh_once()
        by_host = {u.host: u for u in feed.latest.hosts}
        for instance in stack.exporters.values():
            update = by_host[instance]
            assert update.state is HostState.UP
            if instance == shown:
                assert update.snapshot is not None and update.rollup is None
            else:
                assert update.snapshot is None and update.rollup is not None
                assert (
                    update.rollup.gpus
                    == GPUS[next(s for s, i in stack.exporters.items() if i == instance)]
                )
        dead = by_host[stack.dead]
        assert dead.state is HostState.UNREACHABLE and "connection refused" in (dead.error or "")
    finally:
        await feed.client.close()


async def test_top_shows_the_fleet_opens_a_host_in_full_and_live(stack: Stack) -> None:
    """The terminal UI over the Prometheus fleet (its feed on its own thread, as top runs it):
    the fleet screen lists every host; Enter opens one, which the feed then reads in full (the
    host's driver and module, its graphs filled from Prometheus); L reads it live and back."""
    from vgpumon.sources.prometheus import PrometheusBackfill
    from vgpumon.tui.app import create_app
    from vgpumon.tui.screens.host import HostScreen

    feed = fleet_of(stack.url, group_by=("cluster",))
    backfill = PrometheusBackfill(PrometheusClient(stack.url, FAST), window_seconds=60.0)
    app = create_app(feed, backfill=backfill)
    shown = f"eu-1/{stack.exporters['kvm-vgpu-timesliced']}"

    async def until(what: str, check: Any, seconds: float = 15.0) -> None:
        for _ in range(int(seconds / 0.1)):
            if check():
                return
            await pilot.pause(0.1)
        raise AssertionError(what)

    async with app.run_test(size=(160, 50)) as pilot:
        await until("every host listed", lambda: len(app.hosts) == len(EXPORTERS) + 1)
        await until(
            "the hosts up",
            lambda: sum(u.state is HostState.UP for u in app.hosts.values()) == len(EXPORTERS),
        )
        await app.push_screen(HostScreen(shown))
        await until(
            "the host read in full",
            lambda: (
                (u := app.hosts[shown]).snapshot is not None
                and u.snapshot.driver.driver_version is not None
            ),
        )
        assert app.focus_now() == Focus("host", (shown,))
        await until("its graphs filled", lambda: shown in app._backfilled)
        await pilot.press("L")
        await until("read live", lambda: app.hosts[shown].via == VIA_LIVE)
        await pilot.press("L")
        await until("back on Prometheus", lambda: app.hosts[shown].via == VIA_STORE)
        assert backfill.client.http.open
    assert app.stop_feed(5.0)
    assert not backfill.client.http.open, "closed with the app: no warning once top has ended"
