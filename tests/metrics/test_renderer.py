"""The fast renderer writes exactly what prometheus-client's encoders write.

The reference below is the collector vgpumon used before it had its own renderer: the metric
table turned into prometheus-client ``Metric`` objects and encoded by prometheus-client itself.
Every built-in scenario's snapshot, the rich test snapshot and hostile label values must come out
byte-identical in both formats; ``promtool check metrics`` must accept the result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from export_helpers import rich_snapshot
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.registry import Collector

from vgpumon import sim
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.metrics.exposition import Renderer, render
from vgpumon.metrics.table import FAMILIES, ExportOptions
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session

SCENARIOS = tuple(sorted(sim.builtin_scenarios()))
BOTH_OPTIONS = (ExportOptions(), ExportOptions(processes=True, processes_max=3))
HOSTILE = (
    'quote " inside',
    "back \\ slash and \\n literal",
    "new\nline",
    "tab\tbell\x07nul\x00esc\x1b del\x7f",
    "ends with backslash \\",
    "unicode é 漢字 \u2028 \U0001f600",
    "",
)


class ReferenceCollector(Collector):
    """prometheus-client's own objects for one snapshot (the renderer's previous implementation)."""

    def __init__(self, snapshot: Snapshot, options: ExportOptions) -> None:
        self.snapshot = snapshot
        self.options = options

    def collect(self) -> Iterator[Metric]:
        for family in FAMILIES:
            metric: Metric | None = None
            for labels, value in family.samples(self.snapshot, self.options):
                if metric is None:
                    metric = Metric(family.base_name, family.help, family.type, unit=family.unit)
                metric.add_sample(family.name, dict(zip(family.labels, labels, strict=True)), value)
            if metric is not None:
                yield metric


def reference(snapshot: Snapshot, options: ExportOptions) -> tuple[bytes, bytes]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReferenceCollector(snapshot, options))
    return generate_latest(registry), generate_openmetrics(registry)


@functools.cache
def scenario_snapshot(name: str) -> Snapshot:
    async def two_cycles() -> Snapshot:
        session = open_session(sim=name)
        sampler = Sampler(session, SamplerConfig(deadline_seconds=2.0))
        try:
            await sampler.cycle()
            return await sampler.cycle()
        finally:
            sampler.close()
            release = getattr(session.module, "release_hangs", None)
            if callable(release):
                release()

    return asyncio.run(two_cycles())


def assert_identical(snapshot: Snapshot, options: ExportOptions) -> bytes:
    text, openmetrics = reference(snapshot, options)
    mine = Renderer(options).render(snapshot)
    assert mine.text == text
    assert mine.openmetrics == openmetrics
    return mine.text


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_builtin_scenario_renders_as_prometheus_client_does(name: str) -> None:
    for options in BOTH_OPTIONS:
        assert_identical(scenario_snapshot(name), options)


def hostile_snapshot(value: str) -> Snapshot:
    snapshot = rich_snapshot()
    gpus = list(snapshot.gpus)
    gpus[0] = dataclasses.replace(gpus[0], name=value, serial=value + "x", brand=value)
    return dataclasses.replace(snapshot, gpus=tuple(gpus), source=value)


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_label_values_are_escaped_as_prometheus_client_does(value: str) -> None:
    for options in BOTH_OPTIONS:
        assert_identical(hostile_snapshot(value), options)


def test_label_sets_are_reused_while_the_entity_lasts_and_dropped_after() -> None:
    renderer = Renderer(ExportOptions(processes=True))
    snapshot = rich_snapshot()
    first = renderer.render(snapshot)
    info = next(p for p in renderer.plans if p.family.name == "vgpumon_gpu_info")
    cached = dict(info.label_sets.current)
    assert cached, "the info family's label sets are cached"
    second = renderer.render(dataclasses.replace(snapshot, timestamp=snapshot.timestamp + 1))
    assert second.text.count(b"\n") == first.text.count(b"\n")
    assert all(info.label_sets.current[k] is v for k, v in cached.items()), "reused"
    renamed = dataclasses.replace(snapshot.gpus[0], name="another name")
    renderer.render(dataclasses.replace(snapshot, gpus=(renamed,)))
    assert len(info.label_sets.current) == 1, "entities gone from the snapshot leave the cache"
    assert any('name="another name"' in v for v in info.label_sets.current.values())


def test_families_with_the_same_label_names_share_one_label_set_cache() -> None:
    renderer = Renderer()
    snapshot = scenario_snapshot("kvm-vgpu-timesliced")
    text = renderer.render(snapshot).text.decode()
    vgpu_plans = [p for p in renderer.plans if p.family.labels == ("gpu", "uuid", "vgpu_id")]
    assert len(vgpu_plans) > 1
    assert len({id(p.label_sets) for p in vgpu_plans}) == 1, "one cache for all of them"
    vgpus = [(g, v) for g in snapshot.gpus for v in g.vgpu_instances]
    assert vgpus, "the scenario has vGPUs"
    # One entry per vGPU, however many vGPU families have a sample for it.
    assert len(vgpu_plans[0].label_sets.current) == len(vgpus)
    for g, v in vgpus:
        label_set = f'{{gpu="{g.index}",uuid="{g.uuid}",vgpu_id="{v.vgpu_id}"}} '
        lines = [line for line in text.splitlines() if label_set in line]
        assert len({line.split("{")[0] for line in lines}) > 1, "shared by several families"


def test_invalid_unicode_in_names_is_replaced_not_an_error() -> None:
    # What "surrogateescape" decoding of the bytes b"bad \xff\xfe name" from NVML leaves.
    bad = b"bad \xff\xfe name".decode("utf-8", "surrogateescape")
    snapshot = hostile_snapshot(bad)
    with pytest.raises(UnicodeEncodeError):
        reference(snapshot, ExportOptions())
    body = render(snapshot).decode("utf-8")
    assert 'name="bad \ufffd\ufffd name"' in body
    lone = hostile_snapshot("lone \ud800 surrogate")
    assert 'name="lone ? surrogate"' in render(lone, openmetrics=True).decode("utf-8")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize("value", HOSTILE)
def test_promtool_accepts_hostile_label_values(value: str) -> None:
    body = render(hostile_snapshot(value), options=ExportOptions(processes=True))
    result = subprocess.run(
        ["promtool", "check", "metrics"], input=body, capture_output=True, timeout=30
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
