"""A render walks each scope once, whatever the number of its families (the vGPU scope has
sixteen), and keeps nothing of the snapshot after it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from export_helpers import rich_snapshot

from vgpumon.metrics import table
from vgpumon.metrics.exposition import Renderer


def test_each_scope_is_walked_once_per_render() -> None:
    calls = 0
    walk = table.VGPU.walk

    def counting(s: Any, o: Any) -> Iterator[Any]:
        nonlocal calls
        calls += 1
        return iter(walk(s, o))

    families = sum(
        1 for f in table.FAMILIES if f.labels[: len(table.VGPU.labels)] == table.VGPU.labels
    )
    assert families > 1
    object.__setattr__(table.VGPU, "walk", counting)  # a frozen row: restored below
    try:
        Renderer().render(rich_snapshot())
    finally:
        object.__setattr__(table.VGPU, "walk", walk)
    assert calls == 1
    assert table._WALKS == {}, "nothing of the snapshot is kept after the render"
