"""Tables that compose: the host tree's columns are the GPU, vGPU and MIG tables' own columns,
so each cell (the share/due cell among them) is defined once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from vgpumon.view import columns as c
from vgpumon.view.rows import GpuRow, MigRow, VgpuRow

# Cells the tree alone has (its id column's v/GI prefixes, the GPU's short name, its count of
# unlicensed vGPUs, a MIG instance's CIs and GPM pair, a vGPU's alarms, the GPU's UUID).
TREE_ONLY = {
    c._TREE_VGPU_ID,
    c._TREE_GI,
    c._TREE_GPU_NAME,
    c._GPU_LICENSES,
    c._MIG_CIS,
    c._MIG_GPM,
    c._VGPU_ALARMS,
    c._GPU_UUID,
}
TABLES = {GpuRow: c.GPU_COLUMNS, VgpuRow: c.VGPU_COLUMNS, MigRow: c.MIG_COLUMNS}


def tables() -> Iterator[tuple[str, tuple[c.Column[Any], ...]]]:
    for name in dir(c):
        value = getattr(c, name)
        if name.endswith("_COLUMNS") and isinstance(value, tuple):
            yield name, value


def test_each_tree_cell_is_its_kinds_own_column() -> None:
    for column in c.HOST_TREE_COLUMNS:
        if column.key == "pod":
            assert column.kinds is None  # one pod column for every kind of row
            continue
        assert column.kinds, column.key
        for kind, part in column.kinds.items():
            assert part in TABLES[kind] or part in TREE_ONLY, (column.key, kind.__name__)


def test_the_share_due_cell_is_defined_once() -> None:
    """One column object makes share/due cells, wherever a table shows them (a table that lists
    another's columns holds the very same objects)."""
    own = {
        id(column): column.key
        for _, columns in tables()
        for column in columns
        if column.label == "share/due" and column.kinds is None
    }
    assert list(own.values()) == ["share"]
    tree = next(col for col in c.HOST_TREE_COLUMNS if col.key == "share")
    assert tree.kinds is not None and tree.kinds[VgpuRow] is own_share()


def own_share() -> c.Column[Any]:
    return next(col for col in c.VGPU_COLUMNS if col.key == "share")
