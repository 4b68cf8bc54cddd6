"""Licensing over time, host side per vGPU and guest side per feature, against the scenarios."""

from __future__ import annotations

from typing import Any

import pytest
from vgpu_helpers import by_id, vgpu_errors

from vgpumon.model import VGPU_LICENSE_STATES, Snapshot
from vgpumon.sim.licensing import EXPIRY_STATUSES, LICENSE_STATES, LicenseTimeline
from vgpumon.testing import SimHost, SimHostFactory

STATE_NAMES = {v: k for k, v in LICENSE_STATES.items()}
STATUS_NAMES = {v: k for k, v in EXPIRY_STATUSES.items()}


def expected(
    timeline: LicenseTimeline, t: float, epoch: float
) -> tuple[bool, str, str, float | None]:
    """(licensed, state, expiry status, expiry timestamp) as the scenario file defines them."""
    phase = [p for p in timeline.phases if p.at <= t][-1]
    end = phase.end(t)  # expires, or the end of a renewed lease
    if end is not None and t >= end:
        return False, STATE_NAMES[timeline.after_expiry], "not_available", None
    licensed = STATE_NAMES[phase.state] == "licensed"
    if end is not None:
        return licensed, STATE_NAMES[phase.state], "valid", epoch + end
    status = STATUS_NAMES[phase.expiry_status] if licensed else "not_available"
    return licensed, STATE_NAMES[phase.state], status, None


async def _at(host: SimHost, t: float) -> Snapshot:
    host.advance(t - host.t, poll_every=None)
    return await host.cycle()


@pytest.fixture
async def expiry_host(sim_host: SimHostFactory) -> Any:
    host = sim_host("vgpu-license-expiry")
    yield host
    host.close()


async def test_host_licenses_follow_the_scenario_timeline(expiry_host: SimHost) -> None:
    host = expiry_host
    epoch = host.module._core.epoch
    instances = host.scenario.gpus[0].extra["vgpu"]["instances"]
    seen: set[str] = set()
    for t in (0.5, 3.0, 5.0, 15.0, 20.5, 30.0, 41.0):
        snap = await _at(host, t)
        got = by_id(snap.gpus[0])
        for inst in instances:
            lic = got[inst["id"]].license
            if inst.get("guest_driver", "x") is None:
                # No guest driver: NVML answers DRIVER_NOT_LOADED; no license data, not an error.
                assert (lic.licensed, lic.state, lic.expiry_status) == (None, None, None)
                continue
            timeline = inst.get("license", LicenseTimeline.constant())
            licensed, state, status, when = expected(timeline, host.t, epoch)
            assert (lic.licensed, lic.state, lic.expiry_status) == (licensed, state, status), (
                t,
                inst["id"],
            )
            assert lic.expiry_timestamp_seconds == (pytest.approx(when) if when else None)
            seen.add(lic.state)
        assert vgpu_errors(snap) == {
            ("nvmlDeviceGetVgpuSchedulerState_v2", "function_not_found"): 1,
            ("nvmlDeviceGetVgpuSchedulerLog_v2", "function_not_found"): 1,
        }
    assert seen == set(VGPU_LICENSE_STATES)  # every state NVML defines appeared


async def test_a_license_expires_mid_run(expiry_host: SimHost) -> None:
    host = expiry_host
    before = by_id((await _at(host, 19.0)).gpus[0])[31].license
    after = by_id((await _at(host, 21.0)).gpus[0])[31].license
    epoch = host.module._core.epoch
    assert (before.licensed, before.state, before.expiry_status) == (True, "licensed", "valid")
    assert before.expiry_timestamp_seconds == pytest.approx(epoch + 20.0)
    assert (after.licensed, after.state, after.expiry_status) == (
        False,
        "unlicensed_restricted",
        "not_available",
    )
    assert after.expiry_timestamp_seconds is None


@pytest.fixture
async def guest_host(sim_host: SimHostFactory) -> Any:
    host = sim_host("vgpu-guest")
    yield host
    host.close()


async def test_guest_features_follow_the_scenario(guest_host: SimHost) -> None:
    host = guest_host
    epoch = host.module._core.epoch
    for t in (1.0, 6.0, 7201.0):
        snap = await _at(host, t)
        for g, spec in zip(snap.gpus, host.scenario.gpus, strict=True):
            assert g.virtualization_mode == "vgpu"
            assert g.vgpu_instances == () and g.vgpu_types == () and g.vgpu_schedulers == ()
            assert g.guest_license_supported is True
            defs = spec.extra["guest"]["features"]
            assert len(g.guest_licenses) == len(defs)
            for f, d in zip(g.guest_licenses, defs, strict=True):
                licensed, _state, status, when = expected(d["license"], host.t, epoch)
                assert f.feature == "nvidia_rtx" and f.product_name == d["product"]
                assert f.enabled is True
                assert (f.licensed, f.state) == (licensed, "licensed" if licensed else "unlicensed")
                assert f.expiry_status == status
                assert f.expiry_timestamp_seconds == (pytest.approx(when) if when else None)
        assert vgpu_errors(snap) == {}  # a guest never asks vGPU host calls


async def test_guest_license_acquired_then_the_other_expires(guest_host: SimHost) -> None:
    host = guest_host
    early = await _at(host, 1.0)
    assert [f.licensed for g in early.gpus for f in g.guest_licenses] == [True, False]
    later = await _at(host, 2 * 3600 + 1.0)
    assert [f.licensed for g in later.gpus for f in g.guest_licenses] == [False, True]
    assert later.gpus[0].guest_licenses[0].expiry_status == "not_available"


async def test_a_license_that_could_not_be_read_is_read_again_next_cycle(
    sim_host: SimHostFactory,
) -> None:
    """Licenses are read every 10 s; one whose call failed is not held unknown (with the
    collector successful, so check said "ok") until then: it is read again the next cycle, and
    the collector fails for as long as it cannot be read (issue 33, finding 2)."""
    from vgpumon.collect.base import SamplerConfig

    host = sim_host("vgpu-license-expiry", config=SamplerConfig())  # serve's cadences
    real = host.module.nvmlVgpuInstanceGetLicenseInfo
    failing = {"on": True}

    def flaky(vgpu: object) -> object:
        if failing["on"]:
            raise host.module.NVMLError(host.module.NVML_ERROR_TIMEOUT)
        return real(vgpu)

    host.module.nvmlVgpuInstanceGetLicenseInfo = flaky

    def license_ok(snap: Snapshot) -> bool | None:
        return next(c.success for c in snap.collectors if c.name == "license")

    first = await host.cycle()
    assert license_ok(first) is False
    host.advance(1.0, poll_every=None)
    second = await host.cycle()  # within the cadence: still unread, still not a success
    assert license_ok(second) is False
    failing["on"] = False
    host.advance(1.0, poll_every=None)
    third = await host.cycle()  # read again at once, not 10 s later
    assert license_ok(third) is True
    held = [v.license for g in second.gpus for v in g.vgpu_instances]
    read = [v.license for g in third.gpus for v in g.vgpu_instances]
    assert read != held and any(lic.state is not None for lic in read), read
