"""Regenerate the README's screenshots of ``vgpumon top`` (SVG, from the app itself).

Each picture is the simulator on a manual clock, so rerunning gives the same files:
``python docs/screenshots/make_screenshots.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from vgpumon.collect.base import SamplerConfig
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock
from vgpumon.sources.fleet import FleetSource
from vgpumon.sources.local import LocalSource
from vgpumon.tui.app import create_app

HERE = Path(__file__).resolve().parent
SIZE = (120, 34)


def local(scenario: str, host: str = "local") -> tuple[LocalSource, ManualClock]:
    clock = ManualClock()
    session = open_session(sim=scenario, clock=clock)
    return LocalSource(session, SamplerConfig(), host=host, clock=clock.now), clock


async def cycles(source: LocalSource, clock: ManualClock, n: int) -> None:
    for _ in range(n):
        await source.cycle_once()
        clock.advance(1.0)


async def shot(name: str, sources: list[tuple[LocalSource, ManualClock]], keys: list[str]) -> None:
    source = sources[0][0] if len(sources) == 1 else FleetSource([s for s, _ in sources])
    app = create_app(source, start_source=False, clock=sources[0][1].now)
    async with app.run_test(size=SIZE) as pilot:
        for s, clock in sources:
            await cycles(s, clock, 30)
        await pilot.pause()
        app.render_now()
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()
            app.render_now()
            await pilot.pause()
        await pilot.pause()
        app.save_screenshot(filename=f"{name}.svg", path=str(HERE))


async def main() -> None:
    await shot("host", [local("kvm-vgpu-timesliced")], [])
    await shot("gpu-vgpu", [local("kvm-vgpu-timesliced")], ["enter"])
    await shot("mig", [local("h100-mig-gpm")], ["enter"])
    fleet = [
        local("kvm-vgpu-timesliced", "kvm-01"),
        local("a100-mig-mixed", "mig-01"),
        local("vgpu-license-expiry", "vdi-02"),
        local("baremetal-8xh100", "train-07"),
    ]
    await shot("fleet", fleet, [])
    capacity = [
        local("capacity-l40s-homogeneous", "homog-01"),
        local("capacity-l40s-heterogeneous", "hetero-01"),
        local("capacity-a100-mig", "mig-01"),
    ]
    await shot("capacity", capacity, ["6"])


if __name__ == "__main__":
    asyncio.run(main())
