"""Bodies go out as parts: the text and OpenMetrics forms share their sample lines, the server
regroups the parts into chunks of ``CHUNK_BYTES`` and the client gets exactly the exposition."""

from __future__ import annotations

import asyncio
import gzip

import pytest
from export_helpers import FixedFeed
from http_helpers import LiveClient

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.export.connections import CHUNK_BYTES, chunks
from vgpumon.export.publisher import gzip_parts
from vgpumon.export.server import build_app
from vgpumon.metrics.exposition import Renderer
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


async def sampled_async(name: str) -> Snapshot:
    sampler = Sampler(open_session(sim=name), SamplerConfig(deadline_seconds=2.0))
    try:
        await sampler.cycle()
        return await sampler.cycle()
    finally:
        sampler.close()


def sampled(name: str) -> Snapshot:
    return asyncio.run(sampled_async(name))


@pytest.mark.parametrize(
    "sizes",
    [
        [],
        [0],
        [10],
        [7, 0, 3],
        [CHUNK_BYTES],
        [CHUNK_BYTES + 1],
        [CHUNK_BYTES - 1, 1, 1],
        [150] * 1000,
        [3 * CHUNK_BYTES + 5, 40, CHUNK_BYTES * 2, 0, 1],
    ],
)
def test_chunks_regroup_the_parts_in_order_into_full_chunks(sizes: list[int]) -> None:
    parts = tuple(bytes([i % 251]) * n for i, n in enumerate(sizes))
    got = list(chunks(parts))
    assert b"".join(got) == b"".join(parts)
    assert all(len(c) == CHUNK_BYTES for c in got[:-1])
    assert all(0 < len(c) <= CHUNK_BYTES for c in got)


def test_both_forms_share_the_same_lines_objects() -> None:
    exposition = Renderer().render(sampled("kvm-vgpu-timesliced"))
    text_ids = {id(p) for p in exposition.text_parts}
    shared = [p for p in exposition.openmetrics_parts if id(p) in text_ids]
    assert sum(len(p) for p in shared) > len(exposition.text) / 2, "the lines are not copied"


def test_gzip_of_the_parts_is_gzip_of_the_body() -> None:
    exposition = Renderer().render(sampled("kvm-vgpu-timesliced"))
    assert gzip.decompress(gzip_parts(exposition.openmetrics_parts)) == exposition.openmetrics


Fixed = FixedFeed


@pytest.mark.parametrize("accept", [None, OPENMETRICS])
@pytest.mark.parametrize("encoding", ["identity", "gzip"])
async def test_a_large_body_arrives_whole(accept: str | None, encoding: str) -> None:
    snapshot = await sampled_async("hgx-8xh100-nvlink")
    expected = Renderer().render(snapshot)
    want = expected.openmetrics if accept else expected.text
    assert len(want) > 2 * CHUNK_BYTES, "the scenario's body spans several chunks"
    client = LiveClient(build_app(Fixed(snapshot)))
    await client.start_server()
    try:
        headers = {"Accept-Encoding": encoding, **({"Accept": accept} if accept else {})}
        resp = await client.get("/metrics", headers=headers, auto_decompress=False)
        assert resp.status == 200
        body = await resp.read()
        if encoding == "gzip":
            assert resp.headers["Content-Encoding"] == "gzip"
            body = gzip.decompress(body)
        else:
            assert int(resp.headers["Content-Length"]) == len(want)
        assert body == want
    finally:
        await client.close()
