"""Configured NVML fields (serve config ``fields``): read raw, in the one batched call per GPU.

Expectations come from the scenario: the values it gives (``field_values``) and the modelled
values of the GPUs it describes (power limit, PCIe replay counter), never from output.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import vgpumon.sim as sim
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.registry import enabled_readers
from vgpumon.collect.sampler import Sampler
from vgpumon.model import Gpu, Snapshot
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim.clock import ManualClock
from vgpumon.sim.scenario import parse_scenario
from vgpumon.sim.scenario_specs import GpuSpec, Scenario

SCENARIO = """\
name: extra-fields
gpus:
  - model: h100-sxm-80gb
    field_values: {250: 12.5, 94: 7, 300: -3, 112: not_supported}
  - model: h100-sxm-80gb
    field_values: {250: not_supported}
  - model: l40s
"""
GIVEN, REPLAY, MIN_LIMIT, PAST_DRIVER, MODELLED_GONE = 250, 94, 187, 300, 112
LINK_RAW_TX = (140, 0)  # per-link NVLink raw TX of link 0: H100 has links, L40S none
KEYS: tuple[int | tuple[int, int], ...] = (
    GIVEN,
    REPLAY,
    MIN_LIMIT,
    PAST_DRIVER,
    MODELLED_GONE,
    LINK_RAW_TX,
)
FIELD_CALL = "nvmlDeviceGetFieldValues"


def expected(spec: GpuSpec) -> dict[tuple[int, int | None], float]:
    """What each GPU of the scenario answers, from its spec: the scenario's own answers first,
    then the modelled fields (the simulator models 94, 187 and per-link 140, not 250 or 300)."""
    given = spec.extra.get("field_values", {})
    out: dict[tuple[int, int | None], float] = {}
    for key in KEYS:
        fid, scope = key if isinstance(key, tuple) else (key, None)
        if fid in given:
            if given[fid] is not None:
                out[(fid, scope)] = float(given[fid])
        elif fid == REPLAY:
            out[(fid, scope)] = float(spec.pcie["replay_counter"])
        elif fid == MIN_LIMIT:
            out[(fid, scope)] = spec.power_min_limit * 1000  # NVML answers milliwatts
        elif key == LINK_RAW_TX and spec.nvlink_links > 0:
            out[(fid, scope)] = 0.0  # no traffic modelled on the raw counters
    return out


def got(gpu: Gpu) -> dict[tuple[int, int | None], float]:
    return {(v.field_id, v.scope_id): v.value for v in gpu.extra_fields}


class Recording:
    """The simulator, with every nvmlDeviceGetFieldValues call written down (handle, ids)."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.calls: list[tuple[Any, list[Any]]] = []

    def nvmlDeviceGetFieldValues(self, handle: Any, ids: list[Any]) -> Any:
        self.calls.append((handle, list(ids)))
        return self._module.nvmlDeviceGetFieldValues(handle, ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


class Host:
    def __init__(self, scenario: Scenario, keys: tuple[int | tuple[int, int], ...]) -> None:
        self.clock = ManualClock()
        self.module = Recording(sim.create(scenario, clock=self.clock))
        self.scenario = scenario
        session = NvmlSession(self.module, "sim:recorded")
        session.init()
        config = SamplerConfig(extra_fields=keys)
        self.sampler = Sampler(session, config, enabled_readers(config), clock=self.clock.now)

    async def cycle(self) -> Snapshot:
        self.clock.advance(1.0)
        return await self.sampler.cycle()

    def calls_per_gpu(self, since: int) -> list[int]:
        """nvmlDeviceGetFieldValues calls of each GPU, by index, since call number ``since``."""
        indexes = [self.module.nvmlDeviceGetIndex(h) for h, _ in self.module.calls[since:]]
        return [indexes.count(i) for i in range(len(self.scenario.gpus))]


@pytest.fixture
def host_for() -> Iterator[Any]:
    hosts: list[Host] = []

    def make(keys: tuple[int | tuple[int, int], ...] = KEYS) -> Host:
        host = Host(parse_scenario(SCENARIO, "extra-fields"), keys)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.sampler.close()


async def test_values_are_those_the_scenario_gives(host_for: Any) -> None:
    host = host_for()
    for _ in range(3):
        snap = await host.cycle()
        for gpu, spec in zip(snap.gpus, host.scenario.gpus, strict=True):
            assert got(gpu) == expected(spec), gpu.index
    assert any(c.name == "fields" and c.success for c in snap.collectors)


async def test_not_supported_gives_no_value_and_is_not_asked_again(host_for: Any) -> None:
    host = host_for()
    first = await host.cycle()
    assert (GIVEN, None) in got(first.gpus[0])
    assert (GIVEN, None) not in got(first.gpus[1])  # the scenario says not_supported
    assert (GIVEN, None) not in got(first.gpus[2])  # an id the simulated driver does not model
    assert (PAST_DRIVER, None) not in got(first.gpus[1])  # INVALID_ARGUMENT: unknown id
    mark = len(host.module.calls)
    await host.cycle()
    for handle, ids in host.module.calls[mark:]:
        index = host.module.nvmlDeviceGetIndex(handle)
        if index != 0:
            assert GIVEN not in ids and PAST_DRIVER not in ids, index
        else:
            assert GIVEN in ids and PAST_DRIVER in ids


async def test_one_field_values_call_per_gpu_and_cycle(host_for: Any) -> None:
    plain, extra = host_for(()), host_for()
    for _ in range(2):  # the first cycle finds out what each reader asks for
        await plain.cycle()
        await extra.cycle()
    for host in (plain, extra):
        mark = len(host.module.calls)
        await host.cycle()
        assert host.calls_per_gpu(mark) == [1, 1, 1]
    # The declared ids ride in that one call (the ones a GPU answered not supported are left out
    # until the re-probe).
    gpus = len(extra.scenario.gpus)
    for handle, ids in extra.module.calls[-gpus:]:
        index = extra.module.nvmlDeviceGetIndex(handle)
        answered = {
            fid if scope is None else (fid, scope)
            for fid, scope in expected(extra.scenario.gpus[index])
        }
        assert answered <= set(ids), index
        assert len(ids) == len(set(ids)), "an id vgpumon reads itself (94) is asked once"


async def test_no_declared_fields_means_no_collector_and_no_values(host_for: Any) -> None:
    host = host_for(())
    snap = await host.cycle()
    assert "fields" not in {c.name for c in snap.collectors}
    assert all(g.extra_fields == () for g in snap.gpus)


async def test_a_reload_changes_the_fields_and_drops_the_old_ids(host_for: Any) -> None:
    host = host_for()
    await host.cycle()
    host.sampler.set_extra_fields((MIN_LIMIT,))
    snap = await host.cycle()
    for gpu, spec in zip(snap.gpus, host.scenario.gpus, strict=True):
        assert got(gpu) == {(MIN_LIMIT, None): spec.power_min_limit * 1000}
    mark = len(host.module.calls)
    await host.cycle()
    asked = {k for _, ids in host.module.calls[mark:] for k in ids}
    assert GIVEN not in asked and PAST_DRIVER not in asked and LINK_RAW_TX not in asked
    assert host.calls_per_gpu(mark) == [1, 1, 1]
    host.sampler.set_extra_fields(())
    snap = await host.cycle()
    assert "fields" not in {c.name for c in snap.collectors}
    assert all(g.extra_fields == () for g in snap.gpus)
