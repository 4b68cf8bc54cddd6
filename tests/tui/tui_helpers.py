"""Helpers for the terminal UI tests: simulated hosts (a sampler over the simulator with a
manual clock, so every reading and every screen is the same on every run) and exporters."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

import pytest
from textual.pilot import Pilot

from vgpumon.collect import Sampler
from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.registry import every_cycle
from vgpumon.collect.scheduler import SERVICE as SCHEDULER_LOG
from vgpumon.collect.scheduler import SchedulerLogPoller
from vgpumon.model import DeviceAllocation, Snapshot
from vgpumon.nvml.loader import open_session
from vgpumon.sim import ManualClock
from vgpumon.sources.fleet import FleetFeed, nvml_down, this_host
from vgpumon.tui.app import VgpumonApp, create_app


def fleet(hosts: Sequence[SimHost]) -> FleetFeed:
    """The simulated hosts as one feed, as ``top`` reads any set of hosts (one alone as ``top``
    reads this machine)."""
    if len(hosts) == 1:
        return this_host(hosts[0].sampler, host=hosts[0].host, clock=hosts[0].clock.now)
    feeds = [(h.host, h.sampler) for h in hosts]
    return FleetFeed(feeds, judge=nvml_down, clock=hosts[0].clock.now)


class SimHost:
    """One simulated host: a sampler (as ``top`` runs it) the test cycles by hand, shown as the
    one host of a fleet (:meth:`app`) or with others (:func:`fleet`). Every one made is closed
    after its test (tests/tui/conftest.py)."""

    made: ClassVar[list[SimHost]] = []

    def __init__(
        self,
        scenario: str,
        *,
        deadline: float = 5.0,
        host: str = "local",
        enrichers: Sequence[Any] = (),
    ) -> None:
        self.clock = ManualClock()
        self.start = self.clock.now()
        self.session = open_session(sim=scenario, clock=self.clock)
        self.module: Any = self.session.module
        self.host = host
        self.sampler = Sampler(
            self.session,
            # every value read at every step: a screen shows the scenario at that time (top's own
            # sampler reads at the collectors' cadences, tests/collect/test_cadences.py)
            SamplerConfig(deadline_seconds=deadline, cadences=every_cycle()),
            clock=self.clock.now,
            enrichers=enrichers,
        )
        SimHost.made.append(self)

    async def cycles(self, n: int = 3, step: float = 1.0) -> None:
        for _ in range(n):
            await self.sampler.cycle()  # told to the feed's listeners, as a running feed tells
            self.clock.advance(step)

    async def at(self, t: float) -> None:
        """One cycle at scenario time ``t`` (seconds since the start)."""
        self.clock.advance(self.start + t - self.clock.now())
        await self.sampler.cycle()

    async def run_to(self, t: float, *, cycle_every: float = 5.0, poll_every: float = 0.1) -> None:
        """Scenario time up to ``t`` (seconds since the start), reading the scheduler logs every
        ``poll_every`` seconds as the poller thread does on a real host (a jump would wrap their
        rings: missed entries, so no share verdict) and sampling every ``cycle_every`` seconds."""
        poller = self.sampler.services.get(SCHEDULER_LOG)
        last = next_cycle = self.clock.now() - self.start
        while self.clock.now() - self.start < t - 1e-9:
            self.clock.advance(min(poll_every, t - (self.clock.now() - self.start)))
            if isinstance(poller, SchedulerLogPoller):
                for uuid in list(poller._gpus):
                    poller.poll(uuid)
            now = self.clock.now() - self.start
            if now >= next_cycle - 1e-9:
                await self.sampler.cycle()
                last, next_cycle = now, now + cycle_every
        if last < t - 1e-9:
            await self.sampler.cycle()

    def app(self, **kwargs: Any) -> VgpumonApp:
        """``top`` on this host alone; the test runs the cycles."""
        kwargs.setdefault("clock", self.clock.now)
        return create_app(fleet([self]), start_feed=False, **kwargs)

    def close(self) -> None:
        self.sampler.close()


class PodsOf:
    """An enricher standing in for the kubelet's: fixed pods for a snapshot's devices.

    Each MIG GPU instance goes to ``ml/train-<GI>``, each non-MIG GPU without vGPUs to
    ``ml/notebook-<index>`` and the same GPU also to ``ml/notebook-<index>-b`` (a shared GPU),
    every second vGPU to KubeVirt's ``virt-launcher-vm-<id>`` pod in ``vdi`` (VM ``vm-<id>``).
    """

    name = "kubelet"

    def start(self) -> None:
        pass

    def status(self) -> bool | None:
        return True

    def settled(self) -> bool:
        return True

    def close(self) -> None:
        pass

    def apply(self, snapshot: Snapshot) -> Snapshot:
        given: list[DeviceAllocation] = []
        for g in snapshot.gpus:
            if g.mig_instances:
                for gi in g.mig_instances:
                    given.append(
                        DeviceAllocation(
                            "nvidia.com/mig-1g",
                            f"MIG-{gi.id}",
                            "ml",
                            f"train-{gi.id}",
                            "main",
                            None,
                            "mig",
                            g.uuid,
                            gi.id,
                        )
                    )
            elif g.vgpu_instances:
                for v in g.vgpu_instances[1::2]:
                    given.append(
                        DeviceAllocation(
                            "nvidia.com/GRID",
                            f"mdev-{v.vgpu_id}",
                            "vdi",
                            f"virt-launcher-vm-{v.vgpu_id}",
                            "compute",
                            f"vm-{v.vgpu_id}",
                            "vgpu",
                            g.uuid,
                            vgpu_id=v.vgpu_id,
                        )
                    )
            else:
                for suffix in ("", "-b"):
                    given.append(
                        DeviceAllocation(
                            "nvidia.com/gpu",
                            g.uuid,
                            "ml",
                            f"notebook-{g.index}{suffix}",
                            "main",
                            None,
                            "gpu",
                            g.uuid,
                        )
                    )
        return dataclasses.replace(snapshot, allocations=tuple(given))


async def settle(pilot: Pilot[Any]) -> None:
    """Let the app take the published updates, then draw them now, twice: which columns fit
    depends on whether a table overflows its height (a scrollbar takes its width), and an
    auto-height table has its height only after the layout that follows the first draw; the
    second draw reads it, as the next tick of a running ``top`` does."""
    await pilot.pause()
    app = pilot.app
    assert isinstance(app, VgpumonApp)
    for _ in range(2):
        app.render_now()
        await pilot.pause()
        await pilot.pause()  # auto-height tables lay out once more after measuring their rows


def plain(cells: tuple[Any, ...] | None) -> list[str]:
    """A table row's cells as plain text."""
    assert cells is not None
    return [getattr(c, "plain", str(c)) for c in cells]


class Exporter:
    """``vgpumon serve --sim SCENARIO`` in this process on a loopback port; stop and start again
    on the same port, so a client sees the host go away and come back."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.port = 0
        self._runner: Any = None
        self._sampler: Any = None
        self._stop: Any = None
        self._task: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> Exporter:
        import asyncio

        from vgpumon.collect import Sampler
        from vgpumon.export.address import ListenAddress
        from vgpumon.export.listener import Listener
        from vgpumon.export.server import build_app

        self._sampler = Sampler(
            open_session(sim=self.scenario), SamplerConfig(interval_seconds=0.2)
        )
        self._runner = Listener(build_app(self._sampler))
        await self._runner.start([ListenAddress("127.0.0.1", self.port)])
        self.port = self._runner.addresses[0][1]
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._sampler.run(self._stop))
        return self

    async def stop(self) -> None:
        import asyncio

        if self._runner is not None:
            await self._runner.close(0.5)
            self._runner = None
        if self._task is not None:
            self._stop.set()
            await self._task
            self._task = None
        if self._sampler is not None:
            await asyncio.to_thread(self._sampler.close)
            self._sampler = None


async def until(pilot: Pilot[Any], check: Any, *, seconds: float = 60.0) -> None:
    """Wait until ``check()`` holds (a generous bound for a loaded machine, not a timing test)."""
    import asyncio

    loop = asyncio.get_running_loop()
    give_up = loop.time() + seconds
    while not check():
        if loop.time() > give_up:
            pytest.fail(f"condition never held: {check}")
        await pilot.pause(0.05)
        app = pilot.app
        assert isinstance(app, VgpumonApp)
        app.render_now()
    await pilot.pause()
