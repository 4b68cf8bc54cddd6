"""``/api/v1/snapshot`` bodies: one build per snapshot, shared, and gone with the snapshot."""

from __future__ import annotations

import dataclasses
import gc

from export_helpers import rich_snapshot

from vgpumon.export.server import JsonCache
from vgpumon.model import from_json


async def test_one_body_per_snapshot_shared_by_every_request() -> None:
    cache = JsonCache()
    snapshot = rich_snapshot()
    first = await cache.body(snapshot)
    assert from_json(first) == snapshot
    assert await cache.body(snapshot) is first, "built once, not per request"
    newer = dataclasses.replace(snapshot, timestamp=snapshot.timestamp + 1)
    second = await cache.body(newer)
    assert from_json(second) == newer


async def test_the_body_is_dropped_when_its_snapshot_is() -> None:
    cache = JsonCache()
    snapshot = rich_snapshot()
    await cache.body(snapshot)
    assert cache.task is not None
    del snapshot
    gc.collect()
    assert cache.task is None, "a body nobody can be served any more is not kept"
    again = rich_snapshot()
    assert from_json(await cache.body(again)) == again


async def test_a_dead_older_snapshot_does_not_drop_the_newer_body() -> None:
    cache = JsonCache()
    older = rich_snapshot()
    await cache.body(older)
    newer = dataclasses.replace(older, timestamp=older.timestamp + 1)
    body = await cache.body(newer)
    del older
    gc.collect()
    assert cache.task is not None
    assert await cache.body(newer) is body
