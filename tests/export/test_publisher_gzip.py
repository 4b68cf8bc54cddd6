"""gzip bodies are made only for the forms scrapers ask for, and a gzip ask is always answered gzip.

Large bodies are compressed ahead, small ones on the first ask for each snapshot.

Compressing every form of every snapshot cost more CPU than rendering on a big host while the
sampler publishes once a second and Prometheus scrapes a few times a minute, in one form.
"""

from __future__ import annotations

import asyncio
import gzip

import pytest
from http_helpers import LiveClient

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export import publisher as publisher_module
from vgpumon.export.publisher import Publisher
from vgpumon.export.server import build_app
from vgpumon.nvml.loader import open_session

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


async def test_nothing_is_compressed_before_a_scraper_asks() -> None:
    sampler = Sampler(open_session(sim="baremetal-8xh100"), SamplerConfig())
    try:
        snapshot = await sampler.cycle()
        publisher = Publisher(lambda: snapshot)
        bodies = await publisher.publish(snapshot)
        assert bodies.text_gzip is None and bodies.openmetrics_gzip is None
        # An ask is still answered gzip, compressed for that answer.
        assert gzip.decompress(b"".join(await bodies.body(True, True))) == bodies.openmetrics
        publisher.want_gzip(True)
        bodies = await publisher.publish(snapshot)
        assert bodies.openmetrics_gzip is not None and bodies.text_gzip is None
        assert gzip.decompress(bodies.openmetrics_gzip) == bodies.openmetrics
    finally:
        sampler.close()


async def test_a_gzip_scrape_is_gzip_from_the_first_answer_on() -> None:
    sampler = Sampler(open_session(sim="baremetal-8xh100"), SamplerConfig())
    app = build_app(sampler)
    client = LiveClient(app)
    await client.start_server()
    try:
        await sampler.cycle()
        headers = {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}
        for _ in range(2):
            resp = await client.get("/metrics", headers=headers, auto_decompress=False)
            assert resp.status == 200
            assert resp.headers["Content-Encoding"] == "gzip"
            assert gzip.decompress(await resp.read()).endswith(b"# EOF\n")
            await sampler.cycle()
            await app.publisher.until_published(sampler.latest)  # type: ignore[arg-type]
        assert app.publisher.current is not None
        assert app.publisher.current.openmetrics_gzip is not None  # compressed in advance now
        assert app.publisher.current.text_gzip is None  # nobody asked for text gzipped
    finally:
        await client.close()
        sampler.close()


async def test_a_small_body_is_compressed_on_first_ask_once_per_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sampler = Sampler(open_session(sim="passthrough-guest"), SamplerConfig())
    try:
        snapshot = await sampler.cycle()
        publisher = Publisher(lambda: snapshot)
        publisher.want_gzip(False)  # a scraper asked for gzip: a large body would be compressed
        bodies = await publisher.publish(snapshot)
        assert len(bodies.text) < publisher_module.EAGER_GZIP_BYTES
        assert bodies.text_gzip is None  # ... but a small one waits for the next ask
        calls: list[int] = []
        real = publisher_module.gzip_parts

        def counting(body: tuple[bytes, ...]) -> bytes:
            calls.append(publisher_module.body_size(body))
            return real(body)

        monkeypatch.setattr(publisher_module, "gzip_parts", counting)
        (first,) = await bodies.body(False, True)
        (again,) = await bodies.body(False, True)
        assert gzip.decompress(first) == bodies.text
        assert again is first and calls == [len(bodies.text)]  # compressed once, then kept
        assert gzip.decompress(b"".join(await bodies.body(True, True))) == bodies.openmetrics
        assert len(calls) == 2
    finally:
        sampler.close()


async def test_a_large_body_asked_gzipped_by_many_is_compressed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before a snapshot's gzip form exists, concurrent asks share one compression, then reuse it.

    Each ask compressed its own copy before (a 1.9 MB body: 9 ms of CPU per scrape).
    """
    monkeypatch.setattr(publisher_module, "EAGER_GZIP_BYTES", 1)  # every body counts as large
    compressions = 0
    real = publisher_module.gzip_parts

    def counting(body: publisher_module.Body) -> bytes:
        nonlocal compressions
        compressions += 1
        return real(body)

    monkeypatch.setattr(publisher_module, "gzip_parts", counting)
    sampler = Sampler(open_session(sim="baremetal-8xh100"), SamplerConfig())
    try:
        snapshot = await sampler.cycle()
        bodies = await Publisher(lambda: snapshot).publish(snapshot)
        answers = await asyncio.gather(*(bodies.body(True, True) for _ in range(20)))
        answers.append(await bodies.body(True, True))
        assert compressions == 1
        assert all(gzip.decompress(b"".join(a)) == bodies.openmetrics for a in answers)
    finally:
        sampler.close()
