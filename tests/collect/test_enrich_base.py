"""Enrichers never hold a cycle: a hung or broken one costs only its own success series."""

from __future__ import annotations

import threading
from typing import Any

from enrich_helpers import wait_for

from vgpumon.collect.enrich.base import Refresher
from vgpumon.model import Snapshot
from vgpumon.testing import sim_host


class _Stuck:
    """An enricher whose peer never answers its second question (a hung libvirtd)."""

    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.refresher: Refresher[str] = Refresher(
            "stuck", self._fetch, interval=0.01, timeout=0.05
        )

    def _fetch(self) -> str:
        self.calls += 1
        if self.calls > 1:
            self.release.wait()
        return "named"

    def start(self) -> None:
        self.refresher.start()

    def apply(self, snapshot: Snapshot) -> Snapshot:
        return snapshot  # nothing to merge: only its status is under test

    def status(self) -> bool | None:
        return self.refresher.ok()

    def settled(self) -> bool:
        return self.refresher.settled()

    def close(self) -> None:
        self.release.set()
        self.refresher.stop()


class _Broken(_Stuck):
    name = "broken"

    def apply(self, snapshot: Snapshot) -> Snapshot:
        raise RuntimeError("a bug in an enricher")

    def status(self) -> bool | None:
        return True


def _success(snap: Snapshot, name: str) -> Any:
    return next((c.success for c in snap.collectors if c.name == name), None)


async def test_a_hung_peer_reports_failure_and_cycles_go_on() -> None:
    host = sim_host("kvm-vgpu-timesliced")
    stuck = _Stuck()
    host.sampler.enrichers = [stuck]
    try:
        await host.cycle()
        wait_for(lambda: stuck.calls >= 2, "the second, hanging read")
        wait_for(lambda: stuck.status() is False, "the timeout")
        for _ in range(3):
            snap = await host.cycle()
            assert _success(snap, "stuck") is False
            assert not snap.health.wedged and len(snap.gpus) == 3
        assert stuck.refresher.result == "named"  # the last answer is kept
    finally:
        host.close()


async def test_a_broken_enricher_costs_only_its_own_series() -> None:
    host = sim_host("kvm-vgpu-timesliced")
    host.sampler.enrichers = [_Broken()]
    try:
        snap = await host.cycle()
    finally:
        host.close()
    assert _success(snap, "broken") is False
    assert _success(snap, "vgpu") is True
    assert sum(len(g.vgpu_instances) for g in snap.gpus) == 11


def test_a_failing_refresh_logs_once_per_episode(caplog: Any) -> None:
    failures = iter([RuntimeError("down")] * 5)

    def fetch() -> int:
        exc = next(failures, None)
        if exc is not None:
            raise exc
        return 1

    refresher: Refresher[int] = Refresher("flaky", fetch, interval=0.01, timeout=5, retry=0.001)
    refresher.start()
    try:
        wait_for(lambda: refresher.ok() is True, "recovery")
    finally:
        refresher.stop()
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "down" in warnings[0].getMessage()
