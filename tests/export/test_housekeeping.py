"""The serving process collects and trims its heap once a period, right after a publish.

docs/exporter.md, "Memory": without it resident memory follows the high-water mark of the bodies
and of the objects that wait in reference cycles for the oldest generation.
"""

from __future__ import annotations

import ctypes
import dataclasses

import pytest
from export_helpers import rich_snapshot

from vgpumon import allocator
from vgpumon.export import housekeeping
from vgpumon.export.housekeeping import HOUSEKEEPING_SECONDS, Housekeeping
from vgpumon.export.publisher import Publisher


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _counting(calls: list[str]) -> tuple[Housekeeping, FakeClock]:
    clock = FakeClock()

    def trim() -> bool:
        calls.append("trim")
        return True

    keeper = Housekeeping(10.0, clock=clock, collect=lambda: calls.append("collect"), trim=trim)
    return keeper, clock


def test_runs_once_per_period_on_the_clock_collect_before_trim() -> None:
    calls: list[str] = []
    keeper, clock = _counting(calls)
    assert not keeper.after_publish()  # not at start: one period after it
    clock.now += 9.9
    assert not keeper.after_publish()
    assert calls == []
    clock.now += 0.1
    assert keeper.after_publish()
    assert calls == ["collect", "trim"]
    assert keeper.runs == 1
    clock.now += 5.0  # the period counts from the last run
    assert not keeper.after_publish()
    clock.now += 5.0
    assert keeper.after_publish()
    assert calls == ["collect", "trim"] * 2
    assert keeper.last_duration_seconds >= 0.0


def test_the_default_period_is_about_a_minute() -> None:
    assert 30.0 <= HOUSEKEEPING_SECONDS <= 120.0
    assert Housekeeping().period == HOUSEKEEPING_SECONDS


async def test_the_publisher_calls_it_after_each_publish_and_survives_its_failure() -> None:
    snapshot = rich_snapshot()
    publisher = Publisher(lambda: snapshot)
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("a housekeeping bug")

    publisher.after_publish += [broken, lambda: calls.append("after")]
    await publisher.publish(snapshot)
    assert calls == ["after"]
    assert publisher.current is not None and publisher.current.of(snapshot)
    newer = dataclasses.replace(snapshot)
    await publisher.publish(newer)
    assert calls == ["after", "after"]


def test_a_real_run_collects_and_trims() -> None:
    keeper = Housekeeping()
    keeper.run()
    assert keeper.runs == 1
    assert 0.0 <= keeper.last_duration_seconds < 5.0


def test_trim_is_a_no_op_without_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("trim must not load a C library off glibc")

    monkeypatch.setattr(allocator, "is_glibc", lambda: False)
    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert allocator.trim() is False
    Housekeeping(0.0).run()  # the housekeeping still collects, and does not fail


def test_trim_without_malloc_trim_in_the_c_library(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTrim:
        def __init__(self, _name: object) -> None:
            pass

    monkeypatch.setattr(allocator, "is_glibc", lambda: True)
    monkeypatch.setattr(ctypes, "CDLL", NoTrim)
    assert allocator.trim() is False


@pytest.mark.skipif(not allocator.is_glibc(), reason="glibc only")
def test_trim_on_glibc_returns_a_bool() -> None:
    assert allocator.trim() in (True, False)


def test_the_module_names_where_it_runs() -> None:
    doc = housekeeping.__doc__ or ""
    assert "malloc_trim" in doc and "gc.collect" in doc
