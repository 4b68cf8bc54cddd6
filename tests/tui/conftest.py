"""Fixtures for the terminal UI tests (the helpers themselves are in tui_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from tui_helpers import SimHost


@pytest.fixture
def sim_host() -> Iterator[Any]:
    made: list[SimHost] = []

    def make(scenario: str, **kwargs: Any) -> SimHost:
        host = SimHost(scenario, **kwargs)
        made.append(host)
        return host

    yield make
    for host in made:
        release = getattr(host.module, "release_hangs", None)
        if release is not None:
            release()
