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
from collections.abc import Iterable, Iterator
from typing import Any

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
from vgpumon.metrics import exposition, gofloat
from vgpumon.metrics.exposition import Exposition, Renderer, ScopePlan, render
from vgpumon.metrics.gofloat import go_float
from vgpumon.metrics.table import FAMILIES, VGPU, ExportOptions
from vgpumon.model import Snapshot, Temperatures
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


def with_gpu(snapshot: Snapshot, index: int, **changes: Any) -> Snapshot:
    gpus = list(snapshot.gpus)
    gpus[index] = dataclasses.replace(gpus[index], **changes)
    return dataclasses.replace(snapshot, gpus=tuple(gpus))


def with_vgpu(snapshot: Snapshot, gpu: int, vgpu: int, **changes: Any) -> Snapshot:
    instances = list(snapshot.gpus[gpu].vgpu_instances)
    instances[vgpu] = dataclasses.replace(instances[vgpu], **changes)
    return with_gpu(snapshot, gpu, vgpu_instances=tuple(instances))


def snapshots_in_turn(base: Snapshot) -> list[Snapshot]:
    """Snapshots one after the other as a sampler may publish them: each changes what the
    renderer keeps between renders (values few and many, signs of zero, absent values, states,
    info labels, entities that come and go, hostile labels, Inf and NaN)."""
    gpu = base.gpus[0]
    vgpu = gpu.vgpu_instances[0]
    steps = [base, dataclasses.replace(base, timestamp=base.timestamp + 1)]
    steps.append(with_vgpu(steps[-1], 0, 0, framebuffer_used_bytes=12_345_678))  # one value
    steps.append(with_gpu(steps[-1], 0, power_watts=-0.0))
    steps.append(with_gpu(steps[-1], 0, power_watts=0.0))  # equal to -0.0, written otherwise
    steps.append(with_gpu(steps[-1], 0, power_watts=None))  # absent now
    steps.append(with_gpu(with_gpu(steps[-1], 1, power_watts=7.0), 2, power_watts=None))
    steps.append(with_gpu(with_gpu(steps[-1], 1, power_watts=None), 2, power_watts=7.0))
    # As many samples with the same values as before, in other lines (labelled families):
    steps.append(with_gpu(steps[-1], 0, temperatures=Temperatures(50.0, None)))
    steps.append(with_gpu(steps[-1], 0, temperatures=Temperatures(None, 50.0)))
    many = steps[-1]
    for i in range(len(many.gpus)):
        many = with_gpu(many, i, power_watts=100.5 + i, energy_joules=2.5e9 + i)
    steps.append(many)
    steps.append(with_vgpu(steps[-1], 0, 0, license=dataclasses.replace(vgpu.license, state="x")))
    steps.append(with_vgpu(steps[-1], 0, 0, vm_id='vm "quoted"\nand \\ more'))  # info labels
    steps.append(with_gpu(steps[-1], 0, xid_errors={**gpu.xid_errors, 999: 2}))  # a new label
    steps.append(with_vgpu(steps[-1], 0, 1, vgpu_id=4242))  # another vGPU, as many as before
    steps.append(with_gpu(steps[-1], 0, vgpu_instances=gpu.vgpu_instances[1:]))  # one gone
    steps.append(with_vgpu(steps[-1], 0, 1, vm_id="moved, then changed"))
    steps.append(with_gpu(steps[-1], 2, vgpu_instances=base.gpus[2].vgpu_instances[:-1]))
    steps.append(with_gpu(steps[-1], 0, name="new\nname", power_watts=float("inf")))
    steps.append(with_gpu(steps[-1], 1, uuid='GPU-"odd\\uuid\n'))  # in every scope's labels
    steps.append(with_gpu(steps[-1], 2, name="renamed after the others moved"))
    steps.append(with_gpu(steps[-1], 0, power_watts=float("nan")))
    steps.append(with_gpu(steps[-1], 0, power_watts=float("-inf")))
    steps.append(base)  # everything back
    return steps


@pytest.mark.parametrize("options", BOTH_OPTIONS)
def test_one_renderer_writes_each_snapshot_in_turn_as_prometheus_client_does(
    options: ExportOptions,
) -> None:
    renderer = Renderer(options)
    for snapshot in snapshots_in_turn(scenario_snapshot("kvm-vgpu-timesliced")):
        text, openmetrics = reference(snapshot, options)
        mine = renderer.render(snapshot)
        assert mine.text == text
        assert mine.openmetrics == openmetrics


def family_lines(exposition: Exposition, renderer: Renderer, name: str) -> bytes:
    """A family's sample lines: the part after its text header."""
    plan = next(p for p in renderer.plans if p.family.name == name)
    parts = exposition.text_parts
    return parts[parts.index(plan.text_header) + 1]


def test_a_family_whose_values_did_not_change_is_not_formatted_again() -> None:
    renderer = Renderer()
    snapshot = scenario_snapshot("kvm-vgpu-timesliced")
    first = renderer.render(snapshot)
    second = renderer.render(dataclasses.replace(snapshot, timestamp=snapshot.timestamp + 1))
    for name in ("vgpumon_gpu_power_watts", "vgpumon_vgpu_info", "vgpumon_vgpu_license_state"):
        assert family_lines(second, renderer, name) is family_lines(first, renderer, name), name
    stamp = "vgpumon_last_sample_timestamp_seconds"
    assert family_lines(second, renderer, stamp) != family_lines(first, renderer, stamp)


def test_a_render_formats_only_the_values_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    renderer = Renderer()
    snapshot = scenario_snapshot("kvm-vgpu-timesliced")
    renderer.render(snapshot)
    formatted: list[float] = []

    def one(value: float) -> str:
        formatted.append(value)
        return go_float(value)

    def several(values: Iterable[float]) -> list[str]:
        return [one(v) for v in values]

    for module in (exposition, gofloat):
        monkeypatch.setattr(module, "go_float", one)
        monkeypatch.setattr(module, "go_floats", several, raising=False)
    renderer.render(with_vgpu(snapshot, 0, 0, framebuffer_used_bytes=12_345_678))
    assert formatted == [12_345_678]


def test_label_sets_are_made_once_while_the_entities_last_and_dropped_after() -> None:
    renderer = Renderer(ExportOptions(processes=True))
    snapshot = rich_snapshot()
    renderer.render(snapshot)
    gpus = next(p for p in renderer.plans if p.family.name == "vgpumon_gpu_power_watts")
    assert isinstance(gpus, ScopePlan)
    label_sets = gpus.rows.label_sets()
    assert len(label_sets) == len([g for g in snapshot.gpus if g.up])
    renderer.render(dataclasses.replace(snapshot, timestamp=snapshot.timestamp + 1))
    assert gpus.rows.label_sets() is label_sets, "the same entities: the same label sets"
    renamed = dataclasses.replace(snapshot.gpus[0], name="another name")
    body = renderer.render(dataclasses.replace(snapshot, gpus=(renamed,))).text.decode()
    assert len(gpus.rows.label_sets()) == 1, "entities gone from the snapshot leave the cache"
    assert 'name="another name"' in body
    for plan in renderer.plans:  # nothing kept per entity beyond the snapshot's entities
        if isinstance(plan, ScopePlan):
            assert plan.rows.items is None, "the snapshot's items are not kept"
            assert len(plan.rows.keys) <= 1 + len(snapshot.gpus[0].vgpu_instances) * 2


def test_families_of_one_scope_share_its_label_sets() -> None:
    renderer = Renderer()
    snapshot = scenario_snapshot("kvm-vgpu-timesliced")
    text = renderer.render(snapshot).text.decode()
    vgpu_plans = [
        p
        for p in renderer.plans
        if isinstance(p, ScopePlan) and p.family.labels == ("gpu", "uuid", "vgpu_id")
    ]
    assert len(vgpu_plans) > 1
    assert len({id(p.rows) for p in vgpu_plans if p.rows.scope is VGPU}) == 1, "one for all"
    vgpus = [(g, v) for g in snapshot.gpus for v in g.vgpu_instances]
    assert vgpus, "the scenario has vGPUs"
    rows = next(p.rows for p in vgpu_plans if p.rows.scope is VGPU)
    assert len(rows.label_sets()) == len(vgpus), "one label set per vGPU, whatever the families"
    for g, v in vgpus:
        label_set = f'{{gpu="{g.index}",uuid="{g.uuid}",vgpu_id="{v.vgpu_id}"}} '
        lines = [line for line in text.splitlines() if label_set in line]
        assert len({line.split("{")[0] for line in lines}) > 1, "shared by several families"


def test_renders_under_way_at_once_each_write_their_own_snapshot() -> None:
    renderer = Renderer()
    first, second = snapshots_in_turn(scenario_snapshot("kvm-vgpu-timesliced"))[8:10]
    renderer.render(first)  # something kept from an earlier render
    one, other = renderer.steps(first, 0.0), renderer.steps(second, 0.0)
    done: dict[int, Exposition] = {}
    while len(done) < 2:  # in turn, a slice each, as the event loop runs them
        for i, steps in enumerate((one, other)):
            if i not in done:
                got = next(steps)
                if got is not None:
                    done[i] = got
    assert done[0].text == reference(first, ExportOptions())[0]
    assert done[1].text == reference(second, ExportOptions())[0]
    assert renderer.render(second).text == done[1].text


def test_an_abandoned_render_keeps_nothing_of_its_snapshot() -> None:
    renderer = Renderer()
    steps = renderer.steps(rich_snapshot(), 0.0)
    assert next(steps) is None  # a slice done, the rest never asked for
    steps.close()
    scopes = {id(p.rows): p.rows for p in renderer.plans if isinstance(p, ScopePlan)}
    assert all(rows.items is None for rows in scopes.values())


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
