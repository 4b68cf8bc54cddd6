"""The exporter app: endpoints, content negotiation, gzip, render cache, in-flight cap."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from export_helpers import FixedFeed, rich_snapshot, samples_by_name
from http_helpers import LiveClient

from vgpumon.export.app import Handler, Request, Response
from vgpumon.export.server import build_app
from vgpumon.metrics.table import ExportOptions
from vgpumon.model import SamplerHealth, Snapshot, from_json

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


FakeSampler = FixedFeed

Factory = Callable[..., Any]


@pytest.fixture
async def make_client() -> AsyncIterator[Factory]:
    clients: list[LiveClient] = []

    async def make(source: FakeSampler, **kwargs: Any) -> LiveClient:
        client_kwargs = kwargs.pop("client_kwargs", {})
        client = LiveClient(build_app(source, **kwargs), **client_kwargs)
        await client.start_server()
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


async def test_landing_page_lists_endpoints(make_client: Factory) -> None:
    client = await make_client(FakeSampler(rich_snapshot()))
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    page = await resp.text()
    for path in ("/metrics", "/api/v1/snapshot", "/-/healthy", "/-/ready"):
        assert f'href="{path}"' in page
    assert "sim:test" in page


async def test_health_and_readiness(make_client: Factory) -> None:
    source = FakeSampler()
    client = await make_client(source)
    assert (await client.get("/-/healthy")).status == 200
    not_yet = await client.get("/-/ready")
    assert not_yet.status == 503
    assert "first sampling cycle" in await not_yet.text()
    assert (await client.get("/metrics")).status == 503
    assert (await client.get("/api/v1/snapshot")).status == 503
    source.latest = rich_snapshot()
    assert (await client.get("/-/ready")).status == 200
    source.latest = dataclasses.replace(source.latest, health=SamplerHealth(wedged=True))
    wedged = await client.get("/-/ready")
    assert wedged.status == 503 and "wedged" in await wedged.text()
    assert (await client.get("/-/healthy")).status == 200
    assert (await client.get("/metrics")).status == 200, "a wedged sampler still serves"


async def test_text_format_is_the_default(make_client: Factory) -> None:
    client = await make_client(FakeSampler(rich_snapshot()))
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = samples_by_name(await resp.text())
    assert samples["vgpumon_up"] == [({}, 1.0)]


@pytest.mark.parametrize(
    "accept",
    [
        PROMETHEUS_ACCEPT,
        "application/openmetrics-text; version=1.0.0",
        "application/openmetrics-text",
    ],
)
async def test_openmetrics_by_accept_header(make_client: Factory, accept: str) -> None:
    client = await make_client(FakeSampler(rich_snapshot()))
    resp = await client.get("/metrics", headers={"Accept": accept})
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    body = await resp.text()
    assert body.endswith("# EOF\n")
    assert "# TYPE vgpumon_nvml_errors counter" in body


async def test_old_openmetrics_version_falls_back_to_text(make_client: Factory) -> None:
    client = await make_client(FakeSampler(rich_snapshot()))
    resp = await client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text;version=0.0.1"}
    )
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"


async def test_gzip_when_accepted(make_client: Factory) -> None:
    client = await make_client(
        FakeSampler(rich_snapshot()), client_kwargs={"auto_decompress": False}
    )
    plain = await (await client.get("/metrics", headers={"Accept-Encoding": "identity"})).read()
    resp = await client.get("/metrics", headers={"Accept-Encoding": "deflate, gzip;q=0.9"})
    assert resp.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in resp.headers["Vary"]
    zipped = await resp.read()
    assert len(zipped) < len(plain)
    assert gzip.decompress(zipped) == plain
    assert client.app.publisher.renders == 1, "gzip reuses it"


async def test_snapshot_api_round_trips(make_client: Factory) -> None:
    snapshot = rich_snapshot()
    client = await make_client(FakeSampler(snapshot))
    resp = await client.get("/api/v1/snapshot")
    assert resp.status == 200 and resp.content_type == "application/json"
    assert from_json(await resp.read()) == snapshot


async def test_concurrent_scrapes_share_one_render(make_client: Factory) -> None:
    source = FakeSampler(rich_snapshot())
    client = await make_client(source, options=ExportOptions(processes=True), max_requests=60)
    publisher = client.app.publisher
    assert publisher is not None
    bodies = await asyncio.gather(*(client.get("/metrics") for _ in range(50)))
    texts = {await r.text() for r in bodies}
    assert len(texts) == 1 and publisher.renders == 1
    await asyncio.gather(
        *(client.get("/metrics", headers={"Accept": PROMETHEUS_ACCEPT}) for _ in range(50))
    )
    assert publisher.renders == 1, "one render makes every format"
    source.latest = dataclasses.replace(source.latest, timestamp=source.latest.timestamp + 1)  # type: ignore[union-attr]
    publisher.render_ahead_seconds = float("inf")  # rendered on ask, as a small host's are
    newer = {
        await r.text() for r in await asyncio.gather(*(client.get("/metrics") for _ in range(50)))
    }
    assert publisher.renders == 2, "the fifty scrapes of the new snapshot shared one render"
    assert len(newer) == 1 and newer != texts


def _bump(source: FakeSampler) -> None:
    source.latest = dataclasses.replace(source.latest, timestamp=source.latest.timestamp + 1)  # type: ignore[union-attr]


async def _rendered(publisher: Any, count: int) -> None:
    while publisher.renders < count:
        await asyncio.sleep(0.01)


async def test_cheap_renders_wait_for_a_scrape_and_slow_ones_do_not(make_client: Factory) -> None:
    """Snapshots nobody scrapes are not rendered on a host whose render is cheap."""
    source = FakeSampler(rich_snapshot())
    client = await make_client(source)
    publisher = client.app.publisher
    assert publisher is not None
    await _rendered(publisher, 1)  # the first one is rendered ahead, and measures the cost
    assert publisher.last_render_seconds is not None and publisher.last_render_seconds > 0
    publisher.render_ahead_seconds = float("inf")
    for _ in range(5):  # five snapshots, no scrape: no render
        _bump(source)
        publisher.kick()
        await asyncio.sleep(0.06)
    assert publisher.renders == 1
    assert (await client.get("/metrics")).status == 200
    assert publisher.renders == 2 and publisher.current is not None
    assert publisher.current.of(source.latest), "the scrape got the newest snapshot, not an old one"
    await client.get("/metrics")
    assert publisher.renders == 2, "a second scrape of the same snapshot reuses the render"
    publisher.render_ahead_seconds = 0.0  # now every render counts as slow
    _bump(source)
    publisher.kick()
    await asyncio.wait_for(_rendered(publisher, 3), 5)  # without a scrape


async def test_a_scrape_never_waits_for_a_render(make_client: Factory) -> None:
    """A new snapshot is rendered before it is served; meanwhile scrapes get the last body."""
    source = FakeSampler(rich_snapshot())
    client = await make_client(source)
    publisher = client.app.publisher
    assert publisher is not None
    publisher.render_ahead_seconds = 0.0  # every render counts as slow: rendered ahead
    old = await (await client.get("/metrics")).read()
    started = asyncio.Event()
    release = asyncio.Event()
    real_publish = publisher.publish

    async def slow_publish(snapshot: Snapshot) -> Any:
        started.set()
        await release.wait()
        return await real_publish(snapshot)

    publisher.publish = slow_publish  # type: ignore[method-assign]
    source.latest = dataclasses.replace(source.latest, timestamp=source.latest.timestamp + 1)  # type: ignore[union-attr]
    publisher.kick()
    await asyncio.wait_for(started.wait(), 5)
    during = await asyncio.wait_for(client.get("/metrics"), 5)
    assert during.status == 200 and await during.read() == old, "the last complete body"
    release.set()
    while publisher.renders < 2:
        await asyncio.sleep(0.01)
    assert await (await client.get("/metrics")).read() != old


async def test_requests_past_the_cap_get_503_at_once(make_client: Factory) -> None:
    release = asyncio.Event()
    entered = 0

    async def slow(request: Request, handler: Handler) -> Response:
        nonlocal entered
        entered += 1
        await release.wait()
        return await handler(request)

    client = await make_client(FakeSampler(rich_snapshot()), max_requests=3, middlewares=[slow])
    held = [asyncio.create_task(client.get("/metrics")) for _ in range(3)]
    while entered < 3:
        await asyncio.sleep(0.01)
    refused = await asyncio.wait_for(client.get("/metrics"), timeout=2)
    assert refused.status == 503
    assert refused.headers["Retry-After"] == "1"
    assert (await client.get("/api/v1/snapshot")).status == 503
    release.set()
    assert [r.status for r in await asyncio.gather(*held)] == [200, 200, 200]
    assert (await client.get("/metrics")).status == 200, "the slots are free again"


async def test_the_cap_leaves_health_and_readiness_answered(make_client: Factory) -> None:
    """node_exporter's --web.max-requests limits the metrics handler only: with every slot
    taken by slow scrapes, /-/healthy and /-/ready still answer (issue 33; they got 503)."""
    release = asyncio.Event()
    entered = 0

    async def slow(request: Request, handler: Handler) -> Response:
        nonlocal entered
        if request.path == "/metrics":
            entered += 1
            await release.wait()
        return await handler(request)

    client = await make_client(FakeSampler(rich_snapshot()), max_requests=2, middlewares=[slow])
    held = [asyncio.create_task(client.get("/metrics")) for _ in range(2)]
    while entered < 2:
        await asyncio.sleep(0.01)
    assert (await asyncio.wait_for(client.get("/metrics"), timeout=2)).status == 503
    for path in ("/-/healthy", "/-/ready", "/"):
        assert (await asyncio.wait_for(client.get(path), timeout=2)).status == 200, path
    release.set()
    assert [r.status for r in await asyncio.gather(*held)] == [200, 200]


async def test_a_render_that_fails_is_not_retried_in_a_loop(
    make_client: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot the renderer cannot render: 503 at once, one attempt, then the next snapshot."""
    source = FakeSampler(rich_snapshot())
    client = await make_client(source)
    publisher = client.app.publisher
    assert publisher is not None
    while publisher.renders < 1:  # the render started with the app is done
        await asyncio.sleep(0.01)
    attempts = 0
    real_publish = publisher.publish

    async def broken(snapshot: Snapshot) -> Any:
        nonlocal attempts
        attempts += 1
        raise ValueError("cannot render")

    publisher.publish = broken  # type: ignore[method-assign]
    publisher.current = None  # as before the first render
    source.latest = dataclasses.replace(source.latest, timestamp=source.latest.timestamp + 1)  # type: ignore[union-attr]
    resp = await asyncio.wait_for(client.get("/metrics"), 5)
    assert resp.status == 503
    await asyncio.sleep(0.3)
    assert attempts == 1, "the same snapshot is not re-rendered over and over"
    publisher.publish = real_publish  # type: ignore[method-assign]
    source.latest = dataclasses.replace(source.latest, timestamp=source.latest.timestamp + 2)  # type: ignore[union-attr]
    while publisher.current is None:
        await asyncio.sleep(0.01)
    assert (await client.get("/metrics")).status == 200


async def test_replaced_snapshots_are_not_kept_alive_by_the_server(make_client: Factory) -> None:
    """The rendered bodies and the JSON cache refer to their snapshot weakly: one copy lives."""
    import gc
    import weakref

    source = FakeSampler(rich_snapshot())
    client = await make_client(source)
    publisher = client.app.publisher
    assert publisher is not None
    publisher.render_ahead_seconds = 0.0  # every render counts as slow: rendered ahead
    assert (await client.get("/api/v1/snapshot")).status == 200
    assert (await client.get("/metrics")).status == 200
    old = weakref.ref(source.latest)  # type: ignore[arg-type]
    source.latest = dataclasses.replace(source.latest, timestamp=source.latest.timestamp + 1)  # type: ignore[union-attr]
    while publisher.current is None or not publisher.current.of(source.latest):
        await asyncio.sleep(0.01)
    gc.collect()
    assert old() is None, "the replaced snapshot was freed"


async def test_new_export_options_keep_the_old_body_until_their_render_is_done(
    make_client: Factory,
) -> None:
    source = FakeSampler(rich_snapshot())
    client = await make_client(source)
    publisher = client.app.publisher
    assert publisher is not None
    while publisher.renders < 1:
        await asyncio.sleep(0.01)
    before = await (await client.get("/metrics")).text()
    assert "vgpumon_process_series_truncated" not in before
    publisher.set_options(ExportOptions(processes=True))
    assert publisher.current is not None, "still served while the new render runs"
    while publisher.current.options != ExportOptions(processes=True):
        await asyncio.sleep(0.01)
    after = await (await client.get("/metrics")).text()
    assert "vgpumon_process_series_truncated" in after


async def test_render_ahead_always_renders_every_snapshot_without_a_scrape(
    make_client: Factory,
) -> None:
    source = FakeSampler(rich_snapshot())
    client = await make_client(source, render_ahead=True)
    publisher = client.app.publisher
    assert publisher is not None
    await _rendered(publisher, 1)
    assert publisher.renders_ahead, "however cheap the render was"
    for count in (2, 3):
        _bump(source)
        publisher.kick()
        await asyncio.wait_for(_rendered(publisher, count), 5)


async def test_until_published_renders_new_options_ahead_even_on_ask(
    make_client: Factory,
) -> None:
    """New export options are rendered ahead; waiting for them must not spin on the loop."""
    source = FakeSampler(rich_snapshot())
    client = await make_client(source)
    publisher = client.app.publisher
    assert publisher is not None
    await _rendered(publisher, 1)
    publisher.render_ahead_seconds = float("inf")  # renders wait for a scrape...
    publisher.set_options(ExportOptions(processes=True))  # ...but not those of new options
    _bump(source)
    assert source.latest is not None
    await asyncio.wait_for(publisher.until_published(source.latest), 5)
    assert publisher.current is not None and publisher.current.of(source.latest)
    assert publisher.current.options == ExportOptions(processes=True)
