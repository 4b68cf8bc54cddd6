"""Simulated hosts for the terminal UI tests: a sampler over the simulator with a manual clock,
so every reading (and so every screen) is the same on every run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from textual.pilot import Pilot

from vgpumon.collect.base import SamplerConfig
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock
from vgpumon.sources.local import LocalSource
from vgpumon.tui.app import VgpumonApp, create_app


class SimHost:
    """One simulated host feeding a :class:`LocalSource`; the test decides when cycles run."""

    def __init__(self, scenario: str, *, deadline: float = 5.0, host: str = "local") -> None:
        self.clock = ManualClock()
        self.start = self.clock.now()
        self.session = open_session(sim=scenario, clock=self.clock)
        self.module: Any = self.session.module
        self.source = LocalSource(
            self.session, SamplerConfig(deadline_seconds=deadline), host=host, clock=self.clock.now
        )

    async def cycles(self, n: int = 3, step: float = 1.0) -> None:
        for _ in range(n):
            await self.source.cycle_once()
            self.clock.advance(step)

    async def at(self, t: float) -> None:
        """One cycle at scenario time ``t`` (seconds since the start)."""
        self.clock.advance(self.start + t - self.clock.now())
        await self.source.cycle_once()

    def app(self, **kwargs: Any) -> VgpumonApp:
        return create_app(self.source, start_source=False, **kwargs)


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


async def settle(pilot: Pilot[Any]) -> None:
    """Let the app take the published updates, then draw them now."""
    await pilot.pause()
    app = pilot.app
    assert isinstance(app, VgpumonApp)
    app.render_now()
    await pilot.pause()
    await pilot.pause()  # auto-height tables lay out once more after measuring their rows


def plain(cells: tuple[Any, ...] | None) -> list[str]:
    """A table row's cells as plain text."""
    assert cells is not None
    return [getattr(c, "plain", str(c)) for c in cells]
