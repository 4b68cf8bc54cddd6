"""validate --url: the ladder checked through a running exporter's /metrics (or JSON API).

The exporter is the real app on 127.0.0.1 over a simulated host; its sampler cycles once
per scenario second of a ManualClock that the run's own sleeps move, so an exporter interval is
simulated exactly and nothing waits for real seconds.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import trustme
from aiohttp import web  # a server that is not vgpumon
from validate_helpers import FAST, ManualTimer

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.collect.registry import every_cycle
from vgpumon.export.address import ListenAddress
from vgpumon.export.listener import Listener
from vgpumon.export.server import build_app
from vgpumon.export.webconfig_runtime import WebConfigRuntime
from vgpumon.metrics.table import ExportOptions
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock
from vgpumon.sources.remote import Connection
from vgpumon.validate.drivers import SimDriver
from vgpumon.validate.readings import GPM, PROCESSES, UTILIZATION, Reading
from vgpumon.validate.run import NOT_RUN, Plan, Progress, Validation
from vgpumon.validate.sources import ExporterSource, SourceError, normalize_url
from vgpumon.validate.steps import ERROR, PASS, SKIP, Step, default_ladder, select_steps


class SimExporter:
    """``vgpumon serve`` over a simulated host, sampling once per ``interval`` of scenario time."""

    def __init__(
        self,
        scenario: str,
        *,
        processes: bool = True,
        interval: float = 1.0,
        web_config: str | None = None,
        cadences: dict[str, float] | None = None,
    ) -> None:
        self.clock = ManualClock()
        self.session = open_session(sim=scenario, clock=self.clock)
        self.module: Any = self.session.module
        config = SamplerConfig(
            interval_seconds=interval, cadences={**every_cycle(), **(cadences or {})}
        )
        self.sampler = Sampler(self.session, config, clock=self.clock.now)
        self.web_config = WebConfigRuntime(web_config) if web_config is not None else None
        self.app = build_app(
            self.sampler, options=ExportOptions(processes=processes), web_config=self.web_config
        )
        self.interval = interval
        self.next_cycle = self.clock.now()
        self.stall_after: float | None = None
        self.cycles = 0
        self.url = ""
        self._listener = Listener(self.app)

    async def __aenter__(self) -> SimExporter:
        ssl_context = self.web_config.ssl_context() if self.web_config is not None else None
        await self._listener.start([ListenAddress("127.0.0.1", 0)], ssl_context)
        port = self._listener.addresses[0][1]
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._listener.close(1.0)
        self.sampler.close()

    async def tick(self, now: float) -> None:
        while now >= self.next_cycle:
            if self.stall_after is not None and self.next_cycle >= self.stall_after:
                return
            snapshot = await self.sampler.cycle()
            # The exporter renders each snapshot before serving it; on the simulated clock that
            # render takes no time, so wait for it before time moves on.
            await self.app.publisher.until_published(snapshot)
            self.cycles += 1
            self.next_cycle += self.interval

    def timer(self) -> ManualTimer:
        return ManualTimer(self.clock, on_advance=self.tick)


class Readings(Progress):
    def __init__(self) -> None:
        self.times: dict[str, list[float]] = {}

    def reading(self, step: Step, reading: Reading, fraction: float) -> None:
        self.times.setdefault(step.name, []).append(reading.timestamp)


async def run_through(
    exporter: SimExporter,
    device: str = "0",
    *,
    steps: str | None = None,
    via: str = "metrics",
    progress: Progress | None = None,
    applied: list[tuple[str | None, float]] | None = None,
    connection: Connection | None = None,
):
    timer = exporter.timer()
    source = ExporterSource(
        exporter.url, timer=timer, via=via, silence_timeout_s=10.0, connection=connection
    )
    plan = Plan(
        device=device,
        steps=select_steps(default_ladder(), steps),
        timing=FAST,
        pids_may_differ=True,
    )

    def driver(target):
        sim = SimDriver(exporter.module, target)
        if applied is None:
            return sim
        original = sim.apply

        async def apply(load):
            applied.append((None if load is None else f"{load.duty}", exporter.clock.now()))
            return await original(load)

        sim.apply = apply  # type: ignore[method-assign]
        return sim

    return await Validation(plan, source, driver, timer=timer, progress=progress).run()


async def test_the_whole_ladder_passes_through_metrics():
    async with SimExporter("passthrough-guest") as exporter:
        progress = Readings()
        applied: list[tuple[str | None, float]] = []
        report = await run_through(exporter, progress=progress, applied=applied)
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert report.source.startswith(f"exporter {exporter.url}/metrics")
    assert all(s.status == PASS for s in report.steps)
    processes = [c for c in report.checks() if c.check == PROCESSES]
    assert len(processes) == 9 and all(c.status == PASS for c in processes)
    # Every reading used was published after the settle time and two fresh exporter samples.
    for (_, at), step in zip(applied, report.plan.steps, strict=True):
        first = min(progress.times[step.name])
        assert first >= at + FAST.settle_s + 2 * exporter.interval - 1e-6, step.name


@pytest.mark.parametrize("via", ["metrics", "snapshot"])
async def test_an_exporter_with_the_default_cadences_passes(via: str):
    """``serve --processes --interval 1`` as installed: GPM and per-process utilization are read
    every 5 s, so each published value averages the 5 s before its read. A reading taken right
    after the settle time straddles the step change (it was 19.8 % for duty 0.25 and 63.5 % for
    duty 0.75 on an H100); validate waits until the exporter's cadences say the averages cover
    only the new load."""
    from vgpumon.config.serve import ServeSettings

    defaults = ServeSettings()
    cadences = {
        "gpm": defaults.gpm_interval_seconds,
        "processes": defaults.processes_interval_seconds,
    }
    assert cadences == {"gpm": 5.0, "processes": 5.0}
    async with SimExporter("passthrough-guest", cadences=cadences) as exporter:
        progress = Readings()
        applied: list[tuple[str | None, float]] = []
        report = await run_through(exporter, progress=progress, applied=applied, via=via)
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert all(s.status == PASS for s in report.steps), [s.status for s in report.steps]
    assert report.notes[0] == (
        "the exporter reads GPM metrics every 5 s, per-process utilization every 5 s (cycles "
        "every 1 s): each step waits 12 s after the load settles, until those averages cover "
        "only its load"
    )
    # Every reading used was published after both averages' windows began within the step.
    for (_, at), step in zip(applied, report.plan.steps, strict=True):
        first = min(progress.times[step.name])
        assert first >= at + FAST.settle_s + 2 * 5.0, step.name


async def test_what_the_cadences_make_validate_wait_and_say():
    """An exporter that reads averages every cycle needs no wait; one at 5 s cadences 12 s; an
    older one without the vgpumon_sampler_* cadence families gets a note saying what it needs."""
    from vgpumon.model import SamplerHealth, SamplingCadence, Snapshot
    from vgpumon.validate.sources import cover_seconds

    def snapshot(interval: float | None, gpm: float, processes: float) -> Snapshot:
        cadences = (SamplingCadence("gpm", gpm), SamplingCadence("processes", processes))
        health = SamplerHealth(interval_seconds=interval, cadences=cadences if interval else ())
        return Snapshot(timestamp=0.0, health=health)

    assert cover_seconds(snapshot(1.0, 1.0, 1.0)) == 0.0
    assert cover_seconds(snapshot(1.0, 5.0, 1.0)) == 12.0
    assert cover_seconds(snapshot(2.0, 5.0, 10.0)) == 24.0
    source = ExporterSource("http://127.0.0.1:9")
    source._latest = snapshot(None, 0.0, 0.0)
    assert source.notes() == [
        "the exporter does not publish its sampling cadences (an older vgpumon): if it reads "
        "GPM or processes less often than every cycle, its averages may straddle the steps; "
        "run it with --intervals.gpm and --intervals.processes equal to --interval"
    ]
    source._latest = snapshot(1.0, 1.0, 1.0)
    assert source.notes() == []
    await source.close()


async def test_without_per_process_series_the_process_checks_are_skipped_with_the_reason():
    async with SimExporter("passthrough-guest", processes=False) as exporter:
        report = await run_through(exporter, steps="idle,duty-0.50")
    assert report.exit_code == 0
    skipped = [c for c in report.checks() if c.status == SKIP]
    assert {c.check for c in skipped} == {PROCESSES, "process_sm_utilization"}
    assert all("start it with --process-series" in c.reason for c in skipped)


async def test_the_json_api_gives_the_process_list_even_without_per_process_series():
    async with SimExporter("passthrough-guest", processes=False) as exporter:
        report = await run_through(exporter, steps="duty-0.50", via="snapshot")
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert report.source.endswith("/api/v1/snapshot")
    assert all(c.status == PASS for c in report.checks())


async def test_a_mig_device_through_the_exporter():
    async with SimExporter("h100-mig-gpm") as exporter:
        await exporter.tick(exporter.clock.now())
        latest = exporter.sampler.latest
        assert latest is not None
        gi4 = next(gi for gi in latest.gpus[0].mig_instances if gi.id == 4)
        mig_uuid = gi4.compute_instances[0].mig_uuid
        assert mig_uuid is not None
        report = await run_through(exporter, mig_uuid, steps="idle,sm-0.25,multi-process")
    assert report.exit_code == 0, [c.message for c in report.failures()]
    gpm = [c for c in report.checks() if c.check == GPM]
    assert all(c.status == PASS and c.subject == "GPU instance 4" for c in gpm)
    util = [c for c in report.checks() if c.check == UTILIZATION]
    assert all(c.status == SKIP and "MIG devices" in c.reason for c in util)


async def test_an_exporter_that_stops_sampling_ends_the_run():
    async with SimExporter("passthrough-guest") as exporter:
        exporter.stall_after = exporter.clock.now() + 8.0
        report = await run_through(exporter, steps="idle,duty")
    assert report.exit_code == 1
    assert report.aborted is not None and "published no new sample" in report.aborted
    assert [s.status for s in report.steps][:2] == [PASS, ERROR]
    assert report.steps[-1].status == NOT_RUN


async def test_an_exporter_still_in_its_first_cycle_is_waited_for():
    async with SimExporter("passthrough-guest") as exporter:
        exporter.next_cycle = exporter.clock.now() + 3.0  # 503 until then
        source = ExporterSource(exporter.url, timer=exporter.timer())
        try:
            await source.open()
            target = await source.resolve("0")
        finally:
            await source.close()
        assert target.gpu_uuid.startswith("GPU-") and exporter.cycles == 1


async def test_an_exporter_that_never_has_a_sample_is_an_error():
    async with SimExporter("passthrough-guest") as exporter:
        exporter.stall_after = exporter.clock.now()
        source = ExporterSource(exporter.url, timer=exporter.timer(), silence_timeout_s=2.0)
        with pytest.raises(SourceError, match="has no sample after 2 s"):
            try:
                await source.open()
            finally:
                await source.close()


async def test_an_unreachable_exporter_is_one_line():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    source = ExporterSource(f"http://127.0.0.1:{port}", timer=ManualTimer(ManualClock()))
    with pytest.raises(SourceError, match=rf"cannot reach the exporter at http://127.0.0.1:{port}"):
        try:
            await source.open()
        finally:
            await source.close()


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, "", "wants credentials"),
        (500, "", "answered HTTP 500"),
        (200, "something_else 1\n", "not a vgpumon exporter"),
        (200, "this is { not metrics", "could not be parsed"),
    ],
)
async def test_what_a_wrong_server_answers(status: int, body: str, message: str):
    async def handler(request: web.Request) -> web.Response:
        return web.Response(status=status, text=body)

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    source = ExporterSource(f"http://127.0.0.1:{port}/metrics", timer=ManualTimer(ManualClock()))
    try:
        with pytest.raises(SourceError, match=message):
            await source.open()
    finally:
        await source.close()
        await runner.cleanup()


def test_normalize_url():
    assert normalize_url("http://h:9400/metrics") == "http://h:9400"
    assert normalize_url(" https://h:9400/api/v1/snapshot/ ") == "https://h:9400"
    with pytest.raises(Exception, match="give http://HOST:PORT"):
        normalize_url("h:9400")


def _tls_and_auth(tmp_path: Path) -> str:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.crt"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(
        "tls_server_config:\n"
        f"  cert_file: {tmp_path / 'server.crt'}\n"
        f"  key_file: {tmp_path / 'server.key'}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    return str(tmp_path / "web.yml")


async def test_an_exporter_behind_tls_and_basic_auth(tmp_path: Path):
    web_config = _tls_and_auth(tmp_path)
    trusted = Connection(ca_file=str(tmp_path / "ca.pem"), username="prometheus")
    async with SimExporter("passthrough-guest", web_config=web_config) as exporter:
        assert exporter.url.startswith("https://")
        good = dataclasses.replace(trusted, password="s3cret")
        report = await run_through(exporter, steps="duty-0.50", connection=good)
        assert report.exit_code == 0, [c.message for c in report.failures()]
        for connection, message in (
            (dataclasses.replace(trusted, password="wrong"), "refused the credentials"),
            (Connection(ca_file=str(tmp_path / "ca.pem")), "wants credentials .* --username"),
            (Connection(username="prometheus", password="s3cret"), "certificate not trusted"),
        ):
            source = ExporterSource(exporter.url, timer=exporter.timer(), connection=connection)
            with pytest.raises(SourceError, match=message):
                try:
                    await source.open()
                finally:
                    await source.close()
