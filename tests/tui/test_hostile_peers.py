"""One bad peer never takes ``top`` down, and no string a peer sends reaches the terminal as a
control (issue 33, findings 1 and 8).

A stand-in exporter on loopback serves whatever JSON the test sets at ``/api/v1/snapshot``; a
stand-in Prometheus answers the usage screen. ``top`` reads them through its real remote path.
Each screen's terminal output (the bytes Textual would write) is checked for stray controls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from export_helpers import rich_snapshot
from http_helpers import loopback_get
from pty_helpers import stray_controls
from tui_helpers import until

from vgpumon.feed import HostState
from vgpumon.model import Snapshot, to_json
from vgpumon.sources.remote import Connection, RemoteTarget, remote_fleet
from vgpumon.tui.app import VgpumonApp, create_app

FAST = Connection(timeout_seconds=2.0)
OSC52 = "\x1b]52;c;UFdORUQ=\x1b\\\x1b]0;PWN\x1b\\"
HOSTILE = OSC52 + "\x9b2J\u202e[link=http://x]y"


def hostile(value: Any) -> Any:
    """``value`` (a snapshot) with every string in it prefixed by terminal escapes and markup:
    names, ids, states, versions, reasons. A remote exporter may send any of them."""
    if isinstance(value, str):
        return HOSTILE + value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(
            value,
            **{f.name: hostile(getattr(value, f.name)) for f in dataclasses.fields(value)},
        )
    if isinstance(value, tuple):
        return tuple(hostile(v) for v in value)
    if isinstance(value, dict):
        return {hostile(k): hostile(v) for k, v in value.items()}
    return value


class StandIn:
    """An exporter's snapshot endpoint that serves ``body`` (bytes), set by the test."""

    def __init__(self) -> None:
        self.body = b"{}"
        self.url = ""

    @asynccontextmanager
    async def running(self) -> AsyncIterator[StandIn]:
        async def snapshot(request: web.Request) -> web.Response:
            return web.Response(body=self.body, content_type="application/json")

        async with loopback_get("/api/v1/snapshot", snapshot) as self.url:
            yield self


def screen_bytes(app: VgpumonApp) -> str:
    """What the terminal would be sent to draw the whole screen now."""
    update = app.screen._compositor.render_full_update()
    return update.render_segments(app.console)


def _snapshot_now(snap: Snapshot) -> Snapshot:
    import time

    return dataclasses.replace(snap, timestamp=time.time())


async def test_every_screen_shows_a_hostile_peer_escaped() -> None:
    snap = hostile(_snapshot_now(rich_snapshot()))
    stand_in = StandIn()
    stand_in.body = to_json(snap).encode()
    async with stand_in.running():
        source = remote_fleet([RemoteTarget(stand_in.url, name="h1")], FAST, interval_seconds=0.2)
        app = create_app(source)
        async with app.run_test(size=(200, 60)) as pilot:
            await until(pilot, lambda: "h1" in app.hosts and app.hosts["h1"].snapshot is not None)
            await pilot.pause()
            seen = []
            for key in ("1", "2", "3", "4", "5", "6", "question_mark", "escape", "1", "enter"):
                await pilot.press(key)
                app.render_now()
                await pilot.pause()
                out = screen_bytes(app)
                assert stray_controls(out) == [], (key, stray_controls(out)[:3])
                assert "\x1b]52" not in out
                seen.append(out)
            # The names did show, escaped.
            assert any("PWN\\x1b\\" in out for out in seen)
            await pilot.press("q")


async def _host_error_of(body: bytes) -> str:
    """Serve ``body`` as the snapshot; ``top`` must show the host as failing, not crash, and
    still quit on ``q``. The host's error line."""
    stand_in = StandIn()
    stand_in.body = body
    async with stand_in.running():
        source = remote_fleet([RemoteTarget(stand_in.url, name="h1")], FAST, interval_seconds=0.2)
        app = create_app(source)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(
                pilot,
                lambda: "h1" in app.hosts and app.hosts["h1"].state is HostState.UNREACHABLE,
            )
            for key in ("1", "2", "3", "4", "5", "6"):
                await pilot.press(key)
                app.render_now()
                await pilot.pause()
            error = app.hosts["h1"].error or ""
            await pilot.press("q")
        assert app.return_code in (0, None)
    return error


async def test_duplicate_gpu_uuids_from_a_peer_are_an_error_not_a_crash() -> None:
    snap = _snapshot_now(rich_snapshot())
    doubled = dataclasses.replace(snap, gpus=(snap.gpus[0], snap.gpus[0]))
    error = await _host_error_of(to_json(doubled).encode())
    assert "listed twice" in error


async def test_duplicate_vgpu_ids_from_a_peer_are_an_error_not_a_crash() -> None:
    snap = _snapshot_now(rich_snapshot())
    gpu = next(g for g in snap.gpus if g.vgpu_instances)
    doubled_gpu = dataclasses.replace(gpu, vgpu_instances=gpu.vgpu_instances * 2)
    doubled = dataclasses.replace(
        snap, gpus=tuple(doubled_gpu if g is gpu else g for g in snap.gpus)
    )
    error = await _host_error_of(to_json(doubled).encode())
    assert "listed twice" in error


async def test_a_nan_timestamp_from_a_peer_is_an_error_not_a_crash() -> None:
    doc = json.loads(to_json(_snapshot_now(rich_snapshot())))
    doc["timestamp"] = float("nan")
    error = await _host_error_of(json.dumps(doc).encode())  # json writes NaN
    assert "not a time" in error


async def test_deeply_nested_json_from_a_peer_is_an_error_not_a_crash() -> None:
    error = await _host_error_of(b"[" * 200_000 + b"]" * 200_000)
    assert "nested too deeply" in error


async def test_a_peer_answer_over_the_cap_is_refused(monkeypatch: Any) -> None:
    from vgpumon.sources import remote

    monkeypatch.setattr(remote, "MAX_BODY_BYTES", 100_000)
    error = await _host_error_of(b" " * 1_000_000 + b"{}")
    assert "larger than" in error


async def test_markup_in_a_prometheus_error_shows_on_the_usage_screen() -> None:
    from prometheus_helpers import PrometheusStandIn

    from vgpumon.sources.usage import UsageClient
    from vgpumon.tui.screens.usage import UsageScreen

    snap = _snapshot_now(rich_snapshot())
    stand_in = StandIn()
    stand_in.body = to_json(snap).encode()
    with PrometheusStandIn() as prom:
        prom.error = "bad [link=http://evil]click[/link] [red]x " + OSC52
        async with stand_in.running():
            source = remote_fleet(
                [RemoteTarget(stand_in.url, name="h1")], FAST, interval_seconds=0.2
            )
            usage = UsageClient(prom.url, timeout_seconds=5)
            app = create_app(source, usage=usage)
            async with app.run_test(size=(160, 40)) as pilot:
                await until(pilot, lambda: "h1" in app.hosts)
                await pilot.press("u")
                assert isinstance(app.screen, UsageScreen)
                await pilot.press("w")  # last hour: asks Prometheus
                screen = app.screen

                def title() -> str:
                    return str(screen.query_one("#usage-title").render())

                await until(pilot, lambda: "refused" in title())
                assert "[link=http://evil]click[/link]" in title()
                out = screen_bytes(app)
                assert stray_controls(out) == []
                await pilot.press("q")
            await usage.client.close()  # top closes it with the backfill that shares it


async def test_the_screen_obeys_q_while_a_large_backfill_is_merged() -> None:
    """A Prometheus answering with hundreds of thousands of points: the backfill is merged in
    slices, so ``q`` ends the app meanwhile instead of after the whole answer."""
    from vgpumon.sources.prometheus import PrometheusBackfill

    snap = _snapshot_now(rich_snapshot())
    uuid = snap.gpus[0].uuid
    points = [[snap.timestamp - 600 + i * 0.001, "0.5"] for i in range(300_000)]
    answer = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"uuid": uuid}, "values": points}]},
    }
    body = json.dumps(answer).encode()
    asked = asyncio.Event()

    async def query_range(request: web.Request) -> web.Response:
        asked.set()
        return web.Response(body=body, content_type="application/json")

    stand_in = StandIn()
    stand_in.body = to_json(snap).encode()
    async with loopback_get("/api/v1/query_range", query_range) as prom_url, stand_in.running():
        source = remote_fleet([RemoteTarget(stand_in.url, name="h1")], FAST, interval_seconds=0.5)
        backfill = PrometheusBackfill(prom_url, window_seconds=600)
        app = create_app(source, backfill=backfill)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: "h1" in app.hosts and app.hosts["h1"].snapshot)
            await asyncio.wait_for(asked.wait(), 60)
            loop = asyncio.get_running_loop()
            started = loop.time()
            await asyncio.sleep(0.3)  # the answer is being read and merged
            await pilot.press("q")
            quit_after = loop.time() - started
        assert quit_after < 2.0


async def test_a_row_key_given_twice_shows_one_row() -> None:
    """The same PID listed twice on one GPU (by a peer, or on two MIG instances) is one row."""
    from rich.text import Text
    from textual.app import App, ComposeResult

    from vgpumon.tui.widgets.keyed_table import KeyedTable

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield KeyedTable(id="t")

    app = One()
    async with app.run_test() as pilot:
        table = app.query_one(KeyedTable)
        row = (Text("a"),)
        table.sync([("c", "c")], [("k1", row), ("k2", row), ("k1", (Text("b"),))])
        await pilot.pause()
        assert table.held_keys == ["k1", "k2"]
        table.sync([("c", "c")], [("k2", row), ("k2", row)])
        await pilot.pause()
        assert table.held_keys == ["k2"]
