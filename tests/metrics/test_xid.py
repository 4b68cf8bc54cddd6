"""Xid counters start at 0 for catalogued Xids, so an alert's ``increase()`` sees the first one."""

from __future__ import annotations

import dataclasses

from export_helpers import rich_snapshot, samples_by_name

from vgpumon.metrics.exposition import render
from vgpumon.metrics.table import XID_CATALOG, XID_CRITICAL, XID_INFORMATIONAL

NAME = "vgpumon_gpu_xid_errors_total"


def xid_series(snapshot: object) -> dict[tuple[str, str], float]:
    samples = samples_by_name(render(snapshot).decode()).get(NAME, [])  # type: ignore[arg-type]
    return {(labels["gpu"], labels["xid"]): value for labels, value in samples}


def test_catalogued_xids_exist_at_zero_and_events_add_to_them() -> None:
    series = xid_series(rich_snapshot())
    # GPU 0 saw Xid 79 once and Xid 13 twice; every other catalogued Xid is there at 0.
    assert series[("0", "79")] == 1.0
    assert series[("0", "13")] == 2.0
    assert series[("0", "48")] == 0.0
    assert {x for g, x in series if g == "0"} == {str(x) for x in XID_CATALOG}
    # The lost GPU keeps only up and info: no Xid series for it.
    assert "3" not in {g for g, _ in series}


def test_no_xid_series_where_the_xid_reader_did_not_run() -> None:
    snapshot = rich_snapshot()
    without = dataclasses.replace(
        snapshot, collectors=tuple(c for c in snapshot.collectors if c.name != "xid")
    )
    assert xid_series(without) == {}


def test_critical_and_informational_sets_do_not_overlap() -> None:
    assert not set(XID_CRITICAL) & set(XID_INFORMATIONAL)
