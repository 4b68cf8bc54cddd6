"""Fixtures of the collector tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from vgpumon import testing
from vgpumon.collect.base import SamplerConfig
from vgpumon.sim.scenario_specs import Scenario
from vgpumon.testing import SimHostFactory


@pytest.fixture
def sim_host() -> Iterator[SimHostFactory]:
    """Make sampled simulated hosts (``sim_host(scenario, readers=None, config=None)``); each is
    closed when the test ends, whether it passed or not."""
    hosts: list[testing.SimHost] = []

    def make(
        scenario: str | Scenario,
        readers: list[Any] | None = None,
        config: SamplerConfig | None = None,
    ) -> testing.SimHost:
        host = testing.sim_host(scenario, readers, config)
        hosts.append(host)
        return host

    yield make
    for host in hosts:
        host.close()
