"""Regenerate the README's screenshots of ``vgpumon top`` (SVG, from the app itself).

Each picture is the simulator on a manual clock, so rerunning gives the same files:
``python docs/screenshots/make_screenshots.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from vgpumon.collect import Sampler
from vgpumon.collect.base import SamplerConfig
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock
from vgpumon.sources.fleet import FleetFeed, nvml_down, this_host
from vgpumon.tui.app import create_app

HERE = Path(__file__).resolve().parent
SIZE = (120, 34)


Host = tuple[str, Sampler, ManualClock]


def local(scenario: str, host: str = "local") -> Host:
    clock = ManualClock()
    session = open_session(sim=scenario, clock=clock)
    return host, Sampler(session, SamplerConfig(), clock=clock.now), clock


async def cycles(sampler: Sampler, clock: ManualClock, n: int) -> None:
    for _ in range(n):
        await sampler.cycle()
        clock.advance(1.0)


async def shot(name: str, hosts: list[Host], keys: list[str]) -> None:
    clock = hosts[0][2]
    if len(hosts) == 1:
        feed = this_host(hosts[0][1], host=hosts[0][0], clock=clock.now)
    else:
        feed = FleetFeed([(h, s) for h, s, _ in hosts], judge=nvml_down, clock=clock.now)
    app = create_app(feed, start_feed=False, clock=clock.now)
    async with app.run_test(size=SIZE) as pilot:
        for _, sampler, sim_clock in hosts:
            await cycles(sampler, sim_clock, 30)
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
    for _, sampler, _ in hosts:
        sampler.close()


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
