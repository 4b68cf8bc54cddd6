"""Every host of ``top`` is a snapshot feed (the sampler, an exporter over HTTP:
:class:`RemoteFeed`, an agentless host over SSH: :class:`SshHostFeed`), and the hosts are one
feed of :class:`~vgpumon.feed.Fleet` news (:class:`FleetFeed`): one stream shape, no second one.

The remote feed is driven by a loopback exporter stand-in whose answer the test sets, both on its
own (its listeners, its readiness, its stop) and as a host of a fleet (the host's states); a
hand-made feed shows the fleet needs nothing but the feed shape; and no class of
``vgpumon.sources`` starts background work outside a feed's ``run``.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib
import inspect
import pkgutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from http_helpers import loopback_get

import vgpumon.sources
from vgpumon.collect.sampler import Sampler
from vgpumon.feed import FallibleFeed, Fleet, HostState, HostUpdate, SnapshotFeed
from vgpumon.model import SamplerHealth, Snapshot, to_json
from vgpumon.sources.fleet import FleetFeed
from vgpumon.sources.remote import Connection, RemoteFeed, RemoteTarget, remote_fleet
from vgpumon.sources.ssh import SshFleet, SshHostFeed

# The second protocol top once read snapshots through (a source: hosts, a stream of updates, its
# own start and close): nothing in vgpumon has that shape any more.
SOURCE_SHAPE = ("hosts", "updates", "start", "close")
FEED_SHAPE = ("name", "latest", "not_ready_reason", "on_snapshot", "refresh", "run")
BOUND = 30.0  # seconds: a generous bound against a loaded machine, not a timing assertion


@dataclass
class Answer:
    """What the stand-in exporter's ``/api/v1/snapshot`` answers now."""

    status: int = 200
    timestamp: float = 1.0
    health: SamplerHealth = field(default_factory=lambda: SamplerHealth(up=True))
    hits: int = 0
    polled: asyncio.Event = field(default_factory=asyncio.Event)


@asynccontextmanager
async def exporter(answer: Answer) -> AsyncIterator[str]:
    async def snapshot(request: web.Request) -> web.Response:
        answer.hits += 1
        answer.polled.set()
        if answer.status != 200:
            return web.Response(status=answer.status, text="{}", content_type="application/json")
        body = to_json(Snapshot(timestamp=answer.timestamp, health=answer.health))
        return web.Response(text=body, content_type="application/json")

    async with loopback_get("/api/v1/snapshot", snapshot) as url:
        yield url


async def polls(answer: Answer, count: int) -> None:
    """Return after the stand-in has answered ``count`` more polls."""
    for _ in range(count):
        answer.polled.clear()
        await asyncio.wait_for(answer.polled.wait(), BOUND)
    await asyncio.sleep(0.05)  # the last answer reaches the feed


async def until(check: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + BOUND
    while not check():
        if loop.time() > give_up:
            pytest.fail("the expected state never came")
        await asyncio.sleep(0.01)


def fast_feed(url: str) -> RemoteFeed:
    return RemoteFeed(
        RemoteTarget(url), Connection(timeout_seconds=2.0), interval_seconds=0.02,
        backoff_cap_seconds=0.05,
    )  # fmt: skip


# ------------------------------------------------------------------ the remote feed alone


async def test_the_remote_feed_on_its_own_tells_news_failures_and_recovery() -> None:
    answer = Answer()
    async with exporter(answer) as url:
        feed = fast_feed(url)
        typed: FallibleFeed[Snapshot] = feed  # the shape, for mypy run on this file
        assert isinstance(typed, FallibleFeed)
        heard: list[tuple[str, object]] = []
        feed.on_snapshot(lambda s: heard.append(("snapshot", s.timestamp)))
        feed.on_failure(lambda reason: heard.append(("failure", reason)))
        assert feed.latest is None and feed.not_ready_reason == "no answer from the exporter yet"
        stop = asyncio.Event()
        running = asyncio.create_task(feed.run(stop))
        try:
            await until(lambda: bool(heard))
            await polls(answer, 3)  # the same snapshot again: no news
            assert heard == [("snapshot", 1.0)] and feed.not_ready_reason is None
            answer.status = 500
            await until(lambda: len(heard) == 2)
            await polls(answer, 3)  # failing the same way: one failure told
            assert heard[1] == ("failure", "HTTP 500")
            assert feed.not_ready_reason == "HTTP 500"
            assert feed.latest is not None and feed.latest.timestamp == 1.0  # kept
            answer.status = 200  # back, with the very snapshot it had: news (the host is up)
            await until(lambda: len(heard) == 3)
            answer.timestamp = 2.0
            await until(lambda: len(heard) == 4)
            assert heard[2:] == [("snapshot", 1.0), ("snapshot", 2.0)]
            assert feed.not_ready_reason is None
        finally:
            stop.set()
            await asyncio.wait_for(running, BOUND)  # stop ends the loop by itself
            await feed.close()
        hits = answer.hits
        await asyncio.sleep(0.1)
        assert answer.hits == hits  # nothing polls after run returned


async def test_refresh_wakes_the_remote_feed_at_once() -> None:
    answer = Answer()
    async with exporter(answer) as url:
        feed = RemoteFeed(RemoteTarget(url), interval_seconds=3600)
        stop = asyncio.Event()
        running = asyncio.create_task(feed.run(stop))
        try:
            await until(lambda: answer.hits == 1)
            feed.refresh()  # an hour before the next poll is due
            await until(lambda: answer.hits == 2)
        finally:
            stop.set()
            await asyncio.wait_for(running, BOUND)
            await feed.close()


# ------------------------------------------------- one exporter, as a feed and as a fleet host


class Heard:
    """Every Fleet a fleet feed told, and how to wait for one."""

    def __init__(self, fleet: FleetFeed) -> None:
        self.fleets: list[Fleet] = []
        fleet.on_snapshot(self.fleets.append)
        self.fleet = fleet

    def host(self, name: str) -> HostUpdate:
        return next(u for u in self.fleet.latest.hosts if u.host == name)

    def of(self, name: str) -> list[HostUpdate]:
        """The host's states as told, each once (a Fleet where it did not change repeats it)."""
        out: list[HostUpdate] = []
        for fleet in self.fleets:
            update = next(u for u in fleet.hosts if u.host == name)
            if not out or out[-1] is not update:
                out.append(update)
        return out


async def test_one_exporter_read_as_a_feed_and_as_the_host_of_a_fleet() -> None:
    answer = Answer()
    async with exporter(answer) as url:
        feed = fast_feed(url)
        target = RemoteTarget(url)
        fleet = remote_fleet(
            [target], Connection(timeout_seconds=2.0), interval_seconds=0.02,
            backoff_cap_seconds=0.05,
        )  # fmt: skip
        assert [type(f) for f in fleet.feeds.values()] == [RemoteFeed]
        host = target.host
        told: list[float | str] = []
        feed.on_snapshot(lambda s: told.append(s.timestamp))
        feed.on_failure(told.append)
        heard = Heard(fleet)
        stop = asyncio.Event()
        direct = asyncio.create_task(feed.run(stop))
        assert heard.host(host).state is HostState.CONNECTING
        running = asyncio.create_task(fleet.run(stop))
        try:
            await until(lambda: heard.host(host).state is HostState.UP and bool(told))
            answer.status = 401  # until both readers have seen it
            await until(lambda: heard.host(host).state is HostState.UNREACHABLE)
            await until(lambda: len(told) == 2)
            down = heard.host(host)
            assert down.error == "HTTP 401: the exporter wants credentials"
            assert down.stale and down.snapshot is not None and down.snapshot.timestamp == 1.0
            answer.status = 200
            await until(lambda: heard.host(host).state is HostState.UP)
            await until(lambda: len(told) == 3)
            answer.timestamp = 2.0
            await until(lambda: 2.0 in told and _stamp(heard.host(host)) == 2.0)
        finally:
            stop.set()
            await asyncio.wait_for(running, BOUND)  # the fleet's run ends, its session closed
            await asyncio.wait_for(direct, BOUND)
            await feed.close()
        assert fleet.feeds[host].client.http.closed
    states = [(u.state, u.error, _stamp(u)) for u in heard.of(host)]
    wanted = [
        (HostState.UP, None, 1.0),
        (HostState.UNREACHABLE, "HTTP 401: the exporter wants credentials", 1.0),
        (HostState.UP, None, 1.0),
        (HostState.UP, None, 2.0),
        (HostState.CLOSED, None, 2.0),
    ]
    assert states == wanted  # one change per piece of news, none for a repeated poll
    assert [u.sequence for u in heard.of(host)] == [1, 2, 3, 4, 5]
    # The feed read on its own heard the same news the fleet told.
    assert told == [1.0, "HTTP 401: the exporter wants credentials", 1.0, 2.0]


def _stamp(update: HostUpdate) -> float | None:
    return update.snapshot.timestamp if update.snapshot is not None else None


# ----------------------------------------------------------------- any feed is one host


class HandFeed:
    """A feed the test drives by hand: the wrapper needs only the feed shape. This one never
    fails to make a snapshot (like the sampler)."""

    name = "by hand"
    latest: Snapshot | None = None
    not_ready_reason: str | None = None

    def __init__(self) -> None:
        self.snapshot_listeners: list[Callable[[Snapshot], object]] = []
        self.refreshed = 0
        self.running = False

    def on_snapshot(self, listener: Callable[[Snapshot], object]) -> None:
        self.snapshot_listeners.append(listener)

    def refresh(self) -> None:
        self.refreshed += 1

    async def run(self, stop: asyncio.Event) -> None:
        self.running = True
        try:
            await stop.wait()
        finally:
            self.running = False

    def make(self, snapshot: Snapshot) -> None:
        for listener in self.snapshot_listeners:
            listener(snapshot)


class FallibleHandFeed(HandFeed):
    """A hand-driven feed whose attempts can fail (like an exporter over HTTP)."""

    def __init__(self) -> None:
        super().__init__()
        self.failure_listeners: list[Callable[[str], object]] = []

    def on_failure(self, listener: Callable[[str], object]) -> None:
        self.failure_listeners.append(listener)

    def fail(self, reason: str) -> None:
        for listener in self.failure_listeners:
            listener(reason)


async def test_any_feed_is_one_host_with_its_state_and_reason() -> None:
    feed = FallibleHandFeed()
    down = Snapshot(timestamp=3.0)  # no sampler up, no GPU
    freed: list[str] = []

    def judge(snapshot: Snapshot) -> str | None:
        return "down by its own account" if snapshot is down else None

    async def free() -> None:
        freed.append("hand")

    fleet = FleetFeed([("hand", feed)], judge=judge, closers=[free])
    heard = Heard(fleet)
    assert fleet.name == "by hand" and fleet.latest.names == ("hand",)
    assert fleet.not_ready_reason == "first sampling cycle not done"
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    await until(lambda: feed.running)  # the feed's own loop, run by the fleet's
    fleet.refresh()
    assert feed.refreshed == 1
    feed.make(Snapshot(timestamp=1.0))
    assert fleet.not_ready_reason is None
    feed.fail("cable cut")
    failed = heard.host("hand")
    assert (failed.state, failed.error, _stamp(failed), failed.stale) == (
        HostState.UNREACHABLE, "cable cut", 1.0, True,
    )  # fmt: skip
    feed.make(down)
    judged = heard.host("hand")
    assert (judged.state, judged.error, judged.snapshot) == (
        HostState.UNREACHABLE, "down by its own account", down,
    )  # fmt: skip
    feed.make(Snapshot(timestamp=4.0))
    assert heard.host("hand").state is HostState.UP
    assert heard.host("hand").sequence == 4 and len(heard.fleets) == 4  # one Fleet per change
    stop.set()
    await asyncio.wait_for(running, BOUND)
    assert not feed.running and heard.host("hand").state is HostState.CLOSED
    assert freed == ["hand"]  # what the feed held is freed once it stopped


async def test_a_feed_that_cannot_fail_is_a_host_too() -> None:
    feed = HandFeed()
    assert not isinstance(feed, FallibleFeed)
    fleet = FleetFeed([("steady", feed)])
    feed.make(Snapshot(timestamp=1.0))
    assert Heard(fleet).host("steady").state is HostState.UP


async def test_a_host_that_did_not_change_keeps_its_object() -> None:
    """A consumer finds what changed by identity: one host's news leaves the others' states as
    they were, object for object."""
    one, two = HandFeed(), HandFeed()
    fleet = FleetFeed([("one", one), ("two", two)])
    assert fleet.name == "2 hosts"
    first = fleet.latest
    one.make(Snapshot(timestamp=1.0))
    second = fleet.latest
    assert second.hosts[0] is not first.hosts[0] and second.hosts[1] is first.hosts[1]
    assert fleet.not_ready_reason == "1 host(s) not answered yet"


async def test_a_feed_whose_loop_fails_is_logged_and_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken(HandFeed):
        async def run(self, stop: asyncio.Event) -> None:
            raise RuntimeError("bug in a feed")

    good = HandFeed()
    fleet = FleetFeed([("broken", Broken()), ("good", good)])
    stop = asyncio.Event()
    running = asyncio.create_task(fleet.run(stop))
    await until(lambda: good.running)
    good.make(Snapshot(timestamp=1.0))
    assert Heard(fleet).host("good").state is HostState.UP
    stop.set()
    await asyncio.wait_for(running, BOUND)
    assert "the feed of broken failed" in caplog.text


async def test_a_cancelled_fleet_stops_its_hosts() -> None:
    feed = HandFeed()
    fleet = FleetFeed([("hand", feed)])
    running = asyncio.create_task(fleet.run(asyncio.Event()))
    await until(lambda: feed.running)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, BOUND)
    assert not feed.running


# ------------------------------------------ one stream shape; no loop outside a feed's run


def _classes() -> list[type]:
    """Every class defined in the vgpumon package (not imported from elsewhere)."""
    import vgpumon

    found = []
    for info in pkgutil.walk_packages(vgpumon.__path__, "vgpumon."):
        if info.name.startswith(("vgpumon.sim", "vgpumon.loadgen")):
            continue  # the simulator and the CUDA load generator hold no consumers
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra (libvirt, grpc) not installed here
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__:
                found.append(cls)
    return found


def test_the_second_protocol_is_gone() -> None:
    """Nothing in vgpumon has the shape of a snapshot *source* (hosts, a stream of updates, its
    own start and close) beside the feed shape: top reads feeds as serve does."""
    second = [
        f"{cls.__module__}.{cls.__name__}"
        for cls in _classes()
        if all(callable(getattr(cls, member, None)) for member in SOURCE_SHAPE)
    ]
    assert second == []


def _starts_tasks(cls: type) -> list[str]:
    """The methods of ``cls`` itself, other than a feed's ``run``, that start background work (a
    task, a future, a thread)."""
    tree = ast.parse(Path(inspect.getfile(cls)).read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    return sorted(
        {
            f"{cls.__name__}.{method.name}"
            for method in node.body
            if isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef) and method.name != "run"
            for call in ast.walk(method)
            if isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute | ast.Name)
            and (call.func.attr if isinstance(call.func, ast.Attribute) else call.func.id)
            in ("create_task", "ensure_future", "run_in_executor", "Thread")
        }
    )


def test_only_a_feeds_run_starts_background_work() -> None:
    """Every loop in ``vgpumon.sources`` is a feed's ``run``, driven by its consumer (serve's
    server, top's feed thread); no class starts work of its own beside it."""
    classes = []
    for info in pkgutil.iter_modules(vgpumon.sources.__path__):
        module = importlib.import_module(f"vgpumon.sources.{info.name}")
        classes += [
            cls
            for _, cls in inspect.getmembers(module, inspect.isclass)
            if cls.__module__ == module.__name__ and not getattr(cls, "_is_protocol", False)
        ]
    assert {"FleetFeed", "RemoteFeed", "SshHostFeed", "SshFleet"} <= {c.__name__ for c in classes}
    for cls in classes:
        assert _starts_tasks(cls) == [], f"{cls.__name__} starts work of its own"


def test_the_planted_loop_is_caught() -> None:
    """The check above fails on a class with a loop of its own outside ``run``."""

    class Looping:
        async def start(self) -> None:
            self.task = asyncio.create_task(asyncio.sleep(0))

        async def run(self, stop: asyncio.Event) -> None:
            await asyncio.create_task(stop.wait())

    assert _starts_tasks(Looping) == ["Looping.start"]

    class Source:
        def hosts(self) -> None: ...
        def updates(self) -> None: ...
        def start(self) -> None: ...
        def close(self) -> None: ...

    assert all(callable(getattr(Source, member, None)) for member in SOURCE_SHAPE)


def test_the_feeds_have_the_feed_shape() -> None:
    """(The sampler's shape is checked in test_feed_shape.py.)"""
    feeds: list[type[SnapshotFeed[Snapshot]]] = [RemoteFeed, SshHostFeed]
    for feed in feeds:
        for member in FEED_SHAPE:
            assert hasattr(feed, member), (feed.__name__, member)
    fallible: list[type[FallibleFeed[Snapshot]]] = [RemoteFeed, SshHostFeed]
    assert all(callable(getattr(f, "on_failure", None)) for f in fallible)
    fleets: list[type[SnapshotFeed[Fleet]]] = [FleetFeed, SshFleet]
    for fleet in fleets:
        for member in FEED_SHAPE:
            assert hasattr(fleet, member), (fleet.__name__, member)


async def test_top_builds_every_host_from_a_feed(tmp_path: Path) -> None:
    """``top`` on this host, on exporters and on agentless hosts: one fleet of feeds."""
    from vgpumon.commands import top

    parser = argparse.ArgumentParser()
    top.add_arguments(parser)

    def leaves(argv: list[str]) -> list[Any]:
        made = top.feed_from_args(parser.parse_args(argv))
        assert isinstance(made.feed, FleetFeed)
        return list(made.feed.feeds.values())

    local = leaves(["--sim", "passthrough-guest"])
    assert [type(f) for f in local] == [Sampler]
    local[0].close()
    assert [type(f) for f in leaves(["--url", "http://gpu1:9400"])] == [RemoteFeed]
    two = leaves(["--url", "http://gpu1:9400", "--url", "http://gpu2:9400"])
    assert [type(f) for f in two] == [RemoteFeed, RemoteFeed]
    ssh = leaves(["--ssh.targets", "root@esxi-1", "--ssh.targets", "esxi-2"])
    assert [type(f) for f in ssh] == [SshHostFeed, SshHostFeed]
    assert isinstance(
        top.feed_from_args(parser.parse_args(["--ssh.targets", "esxi-1"])).feed, SshFleet
    )


# ------------------------------------------------------------------ what a remote snapshot says


@asynccontextmanager
async def remote_host(answer: Answer) -> AsyncIterator[Heard]:
    """A running fleet of one exporter over the stand-in, once it holds a first snapshot."""
    async with exporter(answer) as url:
        fleet = remote_fleet(
            [RemoteTarget(url)], Connection(timeout_seconds=2.0), interval_seconds=0.02
        )
        heard = Heard(fleet)
        stop = asyncio.Event()
        running = asyncio.create_task(fleet.run(stop))
        try:
            await until(lambda: heard.fleet.latest.hosts[0].snapshot is not None)
            yield heard
        finally:
            stop.set()
            await asyncio.wait_for(running, BOUND)


async def test_a_remote_exporter_that_wedges_reaches_the_screen() -> None:
    """A wedged exporter keeps serving its last good snapshot (same timestamp) with the health
    saying wedged: that is news, not a repeat, or ``top --url`` would never show it."""
    answer = Answer(health=SamplerHealth(up=True, cycles_total=5))
    async with remote_host(answer) as heard:
        answer.health = SamplerHealth(
            up=False, wedged=True, cycles_total=6, cycles_abandoned_total=1
        )

        def wedged() -> bool:
            snap = heard.fleet.latest.hosts[0].snapshot
            return snap is not None and snap.health.wedged

        await until(wedged)


async def test_a_remote_exporter_without_nvml_shows_its_host_down_as_a_local_one_does() -> None:
    answer = Answer(health=SamplerHealth(up=False, down_reason="NVML not initialised: x"))
    async with remote_host(answer) as heard:
        update = heard.fleet.latest.hosts[0]
        assert update.state is HostState.UNREACHABLE
        assert update.error == "NVML is not initialised"
