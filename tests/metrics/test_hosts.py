"""Several agentless hosts in one exposition: the table's families, each sample with ``host``."""

from __future__ import annotations

import dataclasses

from export_helpers import rich_snapshot, samples_by_name
from prometheus_client.parser import text_string_to_metric_families

from vgpumon.feed import HostState, HostUpdate
from vgpumon.metrics.exposition import render
from vgpumon.metrics.hosts import HOST_FAMILIES, HostSnapshot, HostsView
from vgpumon.metrics.table import FAMILIES
from vgpumon.model import to_dict
from vgpumon.sources.ssh import down_snapshot


def test_host_families_are_the_table_with_host_in_front() -> None:
    assert [f.name for f in HOST_FAMILIES] == [f.name for f in FAMILIES]
    for derived, row in zip(HOST_FAMILIES, FAMILIES, strict=True):
        assert derived.labels == ("host", *row.labels)
        assert (derived.type, derived.unit, derived.help) == (row.type, row.unit, row.help)


def _view() -> HostsView:
    snapshot = rich_snapshot()
    failed = HostUpdate(host="esxi-2", state=HostState.UNREACHABLE, error="no answer within 10 s")
    return HostsView(
        hosts=(
            HostSnapshot("esxi-1", snapshot),
            HostSnapshot("esxi-3", dataclasses.replace(snapshot, source="other")),
            HostSnapshot("esxi-2", down_snapshot(failed, 1.0), failed.error),
        ),
        source="test",
    )


def test_one_family_block_per_name_and_host_on_every_sample() -> None:
    text = render(_view(), families=HOST_FAMILIES).decode()
    names = [f.name for f in text_string_to_metric_families(text)]
    assert len(names) == len(set(names))
    samples = samples_by_name(text)
    assert all("host" in labels for rows in samples.values() for labels, _ in rows)
    up = {labels["host"]: v for labels, v in samples["vgpumon_up"]}
    assert up == {"esxi-1": 1.0, "esxi-2": 0.0, "esxi-3": 1.0}
    ssh = {
        labels["host"]: v
        for labels, v in samples["vgpumon_scrape_collector_success"]
        if labels["collector"] == "ssh"
    }
    assert ssh == {"esxi-2": 0.0}
    assert {labels["host"] for labels, _ in samples["vgpumon_gpu_up"]} == {"esxi-1", "esxi-3"}


def test_the_single_host_exposition_is_unchanged() -> None:
    """Per host, the series are exactly the single-host series plus the host label."""
    single = samples_by_name(render(rich_snapshot()).decode())
    many = samples_by_name(render(_view(), families=HOST_FAMILIES).decode())
    for name, rows in single.items():
        mine = sorted(
            (sorted((k, v) for k, v in labels.items() if k != "host"), value)
            for labels, value in many[name]
            if labels["host"] == "esxi-1"
        )
        assert mine == sorted((sorted(labels.items()), value) for labels, value in rows), name


def test_the_view_is_json() -> None:
    data = to_dict(_view())
    assert [h["host"] for h in data["hosts"]] == ["esxi-1", "esxi-3", "esxi-2"]
    assert data["hosts"][2]["error"] == "no answer within 10 s"
