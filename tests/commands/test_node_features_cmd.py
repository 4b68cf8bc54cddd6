"""`vgpumon node-features` and `serve --kubernetes.nfd-features-file`: NFD's local feature file
format, values from the capacity scenarios' hand-computed answers, and a file that changes only
with a value."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from vgpu_helpers import CONTENTION, sampled

from vgpumon.cli import main
from vgpumon.commands.serve import nfd_listener
from vgpumon.model import (
    Gpu,
    GuestLicenseFeature,
    SamplerHealth,
    Snapshot,
    VgpuInstance,
    VgpuLicense,
    VgpuType,
)
from vgpumon.nodefeatures import (
    FeatureFileWriter,
    invalid_lines,
    license_state,
    node_features,
    parse,
    render,
)

DAY = 86400.0


def features_of(tmp_path: Path, *args: str) -> dict[str, str]:
    out = tmp_path / "vgpumon.features"
    assert main(["node-features", "--output", str(out), *args]) == 0
    text = out.read_text(encoding="utf-8")
    assert invalid_lines(text) == [], "every key and value is a valid label"
    return parse(text)


def test_homogeneous_l40s_features(tmp_path: Path) -> None:
    got = features_of(tmp_path, "--sim", "capacity-l40s-homogeneous")
    # Both GPUs summed per type: GPU 0 has room for three 8Q, GPU 1 for sixteen 1Q.
    assert got == {
        "vgpumon.io/gpu.count": "2",
        "vgpumon.io/gpu.model": "NVIDIA-L40S",
        "vgpumon.io/virtualization.mode": "host_vgpu",
        "vgpumon.io/license": "ok",
        "vgpumon.io/vgpu.creatable.L40S-8Q": "3",
        "vgpumon.io/vgpu.creatable.L40S-16Q": "0",
        "vgpumon.io/vgpu.creatable.L40S-24Q": "0",
        "vgpumon.io/vgpu.creatable.L40S-48Q": "0",
        "vgpumon.io/vgpu.creatable.L40S-1Q": "16",
        "vgpumon.io/vgpu.creatable.L40S-2Q": "0",
    }


def test_mig_profile_features(tmp_path: Path) -> None:
    got = features_of(tmp_path, "--sim", "capacity-a100-mig")
    assert got["vgpumon.io/mig.enabled"] == "true"
    assert got["vgpumon.io/mig.creatable.1g.5gb"] == "2"
    assert got["vgpumon.io/mig.creatable.1g.5gb-me"] == "1"  # "+" is not allowed in a label
    assert got["vgpumon.io/mig.creatable.2g.10gb"] == "1"
    assert got["vgpumon.io/mig.creatable.3g.20gb"] == "0"
    assert "vgpumon.io/license" not in got  # no licenses on a bare-metal MIG GPU: no label


def test_unlicensed_vgpu_is_the_node_license(tmp_path: Path) -> None:
    got = features_of(tmp_path, "--sim", "kvm-vgpu-timesliced")
    assert got["vgpumon.io/license"] == "unlicensed"


def _vgpu_host(*licenses: VgpuLicense) -> Snapshot:
    vgpus = tuple(VgpuInstance(vgpu_id=i + 1, license=lic) for i, lic in enumerate(licenses))
    return Snapshot(timestamp=1000 * DAY, gpus=(Gpu(index=0, uuid="GPU-0", vgpu_instances=vgpus),))


def test_license_states() -> None:
    """Expiring is the collector's lease verdict (docs/licensing.md): a license ending in two
    days is ok while its lease is renewed, expiring once the renewal is overdue."""
    now = 1000 * DAY
    ok = VgpuLicense(licensed=True, state="licensed", expiry_timestamp_seconds=now + 30 * DAY)
    soon = VgpuLicense(
        licensed=True,
        state="licensed",
        expiry_timestamp_seconds=now + 2 * DAY,
        renewal_overdue=False,
    )
    stuck = dataclasses.replace(soon, renewal_overdue=True)
    off = VgpuLicense(licensed=False, state="unlicensed_restricted")
    booting = VgpuLicense(state="uninitialized")
    assert license_state(_vgpu_host(ok)) == "ok"
    assert license_state(_vgpu_host(ok, soon)) == "ok"
    assert license_state(_vgpu_host(ok, stuck)) == "expiring"
    assert license_state(_vgpu_host(stuck, off)) == "unlicensed"
    assert license_state(_vgpu_host(booting)) is None
    guest = Snapshot(
        timestamp=now,
        gpus=(
            Gpu(
                index=0,
                uuid="GPU-0",
                guest_licenses=(GuestLicenseFeature("vgpu", licensed=False, state="unlicensed"),),
            ),
        ),
    )
    assert license_state(guest) == "unlicensed"


def test_the_retired_expiring_flag_is_said_to_be_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["node-features", "--license-expiring-within", "24h", "--sim", "capacity-a100-mig"])
        == 0
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--license-expiring-within no longer applies" in err


def test_odd_names_become_valid_labels() -> None:
    t = VgpuType(type_id=1, name="GRID M60-2Q (legacy)/x", creatable_instances=2)
    snap = Snapshot(timestamp=0, gpus=(Gpu(index=0, uuid="G", name="Tesla M60 ", vgpu_types=(t,)),))
    text = render(node_features(snap))
    assert invalid_lines(text) == []
    assert parse(text)["vgpumon.io/vgpu.creatable.M60-2Q-legacy-x"] == "2"


def test_the_file_changes_only_when_a_value_does(tmp_path: Path) -> None:
    out = tmp_path / "vgpumon.features"
    writer = FeatureFileWriter(out)
    snap = _vgpu_host(VgpuLicense(licensed=True, state="licensed"))
    assert writer.update(snap) is True
    first = out.stat()
    # A re-sample with the same values (a later timestamp) leaves the file alone, also for a
    # new writer that starts from the file on disk (a restarted exporter).
    later = dataclasses.replace(snap, timestamp=snap.timestamp + 60)
    assert writer.update(later) is False
    assert FeatureFileWriter(out).update(later) is False
    assert (out.stat().st_ino, out.stat().st_mtime_ns) == (first.st_ino, first.st_mtime_ns)
    lapsed = _vgpu_host(VgpuLicense(licensed=False, state="unlicensed"))
    assert writer.update(lapsed) is True
    assert parse(out.read_text(encoding="utf-8"))["vgpumon.io/license"] == "unlicensed"
    assert out.stat().st_ino != first.st_ino, "replaced by rename, not rewritten in place"
    assert sorted(os.listdir(tmp_path)) == ["vgpumon.features"], "no temporary file left"
    assert oct(out.stat().st_mode & 0o777) == "0o644"


def test_a_second_command_run_leaves_the_file_unchanged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "f"
    args = ["node-features", "--output", str(out), "--sim", "capacity-a100-mig"]
    assert main(args) == 0
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines() == [f"{out}: written", f"{out}: unchanged"]


def test_serve_listener_writes_on_change_and_skips_a_down_nvml(tmp_path: Path) -> None:
    out = tmp_path / "f"
    update = nfd_listener(str(out))
    up = SamplerHealth(up=True)
    snap = dataclasses.replace(_vgpu_host(VgpuLicense(licensed=True)), health=up)
    update(snap)
    assert update.updater.settled(10)
    text = out.read_text(encoding="utf-8")
    assert parse(text)["vgpumon.io/gpu.count"] == "1"
    # NVML down: the snapshot has no GPUs, which must not relabel the node as GPU-less.
    update(Snapshot(timestamp=snap.timestamp + 1, health=SamplerHealth(up=False)))
    assert update.updater.settled(10)
    assert out.read_text(encoding="utf-8") == text


async def test_a_slow_disk_never_holds_a_scrape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An fsync of 2 s (a busy or failing disk) while snapshots keep changing the features: the
    listener runs on the event loop, so before every scrape waited for the disk (issue 33: 0 of
    20 answered within 1 s)."""
    import asyncio
    import time

    from attack_helpers import scrape, target

    from vgpumon import nodefeatures

    def slow_fsync(fd: int) -> None:
        time.sleep(2.0)

    monkeypatch.setattr(nodefeatures.os, "fsync", slow_fsync)
    out = tmp_path / "features"
    update = nfd_listener(str(out))
    up = SamplerHealth(up=True)
    states = ("licensed", "unlicensed_restricted")
    snaps = [
        dataclasses.replace(
            _vgpu_host(VgpuLicense(licensed=i % 2 == 0, state=states[i % 2])),
            health=up,
            timestamp=float(i),
        )
        for i in range(4)
    ]
    async with target(tmp_path) as t:

        async def sampling() -> None:  # as the sampler tells its listeners, on the loop
            for snap in snaps:
                update(snap)
                await asyncio.sleep(0.25)

        async def timed() -> tuple[int, float]:
            # The wall clock: a stalled loop also stalls the scraper's own timeout.
            started = time.monotonic()
            status = await scrape(t)
            return status, time.monotonic() - started

        task = asyncio.ensure_future(sampling())
        answers = []
        while not task.done():
            answers.append(await timed())
            await asyncio.sleep(0.05)
        await task
        answers.append(await timed())
        assert all(status == 200 and took < 1.0 for status, took in answers), answers
    assert await asyncio.to_thread(update.updater.settled, 30)
    assert parse(out.read_text(encoding="utf-8"))["vgpumon.io/license"] == "unlicensed"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--output", "/nonexistent-dir/f", "--sim", "capacity-a100-mig"], "no directory"),
        (["--output", "-", "--sim", "no-such-scenario"], "no-such-scenario"),
        (["--output", "-", "--url", "ftp://x"], "bad exporter URL"),
    ],
)
def test_bad_input_is_one_line(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["node-features", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and "Traceback" not in err


def test_driver_health_and_cc_labels(tmp_path: Path) -> None:
    # recovery-reset at t ~ 0: GPU 1 has a TPC repair pending; nothing asked yet
    got = features_of(tmp_path, "--sim", "recovery-reset")
    assert got["vgpumon.io/repair.pending"] == "true"
    assert "vgpumon.io/recovery.action" not in got  # asked only from 2 s on
    assert "vgpumon.io/memory.unrepairable" not in got  # from 20 s on
    got = features_of(tmp_path, "--sim", "confidential-computing")
    assert got["vgpumon.io/cc.enabled"] == "true"
    assert got["vgpumon.io/cc.ready"] == "false"  # attestation sets it ready at 20 s
    got = features_of(tmp_path, "--sim", "baremetal-8xh100")
    assert not any(k.split("/")[1].startswith(("cc.", "repair", "recovery")) for k in got)


def test_recovery_action_label() -> None:
    from vgpumon.model import Recovery

    snap = Snapshot(
        timestamp=0.0,
        gpus=(
            Gpu(index=0, uuid="GPU-0", recovery=Recovery(action="gpu_reset")),
            Gpu(index=1, uuid="GPU-1", recovery=Recovery(action="none")),
        ),
    )
    assert node_features(snap)["recovery.action"] == "gpu_reset"


def test_a_starved_vgpu_is_a_node_label_from_the_collectors_verdict() -> None:
    """vgpumon.io/vgpu.starved follows the one verdict (docs/verdicts.md): true on
    vgpu-contention once the window is long enough, none before (no verdict is not false)."""
    assert node_features(sampled(CONTENTION, 65.0))["vgpu.starved"] == "true"
    assert "vgpu.starved" not in node_features(sampled(CONTENTION, 10.0))
    assert node_features(sampled("capacity-l40s-homogeneous", 65.0))["vgpu.starved"] == "false"
