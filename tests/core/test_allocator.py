"""``serve``'s malloc settings: applied on glibc, each unless the environment already sets it."""

from __future__ import annotations

import pytest

from vgpumon import allocator

ALL = {
    "MALLOC_MMAP_THRESHOLD_": allocator.MMAP_THRESHOLD_BYTES,
    "MALLOC_ARENA_MAX": allocator.ARENA_MAX,
}


def glibc_only() -> None:
    if not allocator.is_glibc():
        pytest.skip("not glibc: nothing is set")


def test_both_are_set_when_the_environment_says_nothing() -> None:
    glibc_only()
    assert allocator.tune(environ={}) == ALL


def test_an_operators_own_setting_wins() -> None:
    glibc_only()
    assert allocator.tune(environ={"MALLOC_ARENA_MAX": "8"}) == {
        "MALLOC_MMAP_THRESHOLD_": allocator.MMAP_THRESHOLD_BYTES
    }
    assert allocator.tune(environ=dict.fromkeys(ALL, "1")) == {}
