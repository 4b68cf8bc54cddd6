"""Fixtures for the terminal UI tests (the helpers themselves are in tui_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tui_helpers import SimHost


@pytest.fixture
def sim_host() -> Iterator[Any]:
    def make(scenario: str, **kwargs: Any) -> SimHost:
        return SimHost(scenario, **kwargs)

    yield make


@pytest.fixture(autouse=True)
def close_sim_hosts() -> Iterator[None]:
    """Every simulated host a test made: its hangs released, its sampler closed."""
    yield
    for host in SimHost.made:
        release = getattr(host.module, "release_hangs", None)
        if release is not None:
            release()
        host.close()
    SimHost.made.clear()
