"""`vgpumon record`: a host becomes a scenario file that replays it, with identities masked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vgpumon.cli import main
from vgpumon.commands.record import mask
from vgpumon.model import (
    Gpu,
    MigComputeInstance,
    MigGpuInstance,
    Snapshot,
    VgpuInstance,
    from_json,
)
from vgpumon.sim import load_scenario


def _snapshot_of(scenario: str, capsys: pytest.CaptureFixture[str]) -> Snapshot:
    assert main(["snapshot", "--sim", scenario, "--json", "--interval", "0.2"]) == 0
    return from_json(capsys.readouterr().out)


@pytest.mark.parametrize("name", ["a100-mig-mixed", "baremetal-8xh100"])
def test_recorded_scenario_replays_the_host(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = load_scenario(name)
    out = tmp_path / "host.yaml"
    assert main(["record", "--sim", name, "--output", str(out), "--interval", "0.2"]) == 0
    assert f"wrote {out}" in capsys.readouterr().err
    text = out.read_text()
    for spec in original.gpus:
        assert spec.uuid not in text and spec.serial not in text
        for gi in spec.gpu_instances:
            for ci in gi.compute_instances:
                assert ci.uuid not in text

    recorded = load_scenario(str(out))
    assert len(recorded.gpus) == len(original.gpus)
    replay = _snapshot_of(str(out), capsys)
    for gpu, spec in zip(replay.gpus, original.gpus, strict=True):
        assert gpu.name == spec.name
        assert gpu.memory.total_bytes == spec.memory_total
        assert gpu.mig_mode_current == spec.mig_enabled
        assert [(gi.id, gi.profile_name, gi.placement_start) for gi in gpu.mig_instances] == sorted(
            (gi.id, gi.profile.name, gi.placement) for gi in spec.gpu_instances
        )
        assert sorted(p.pid for p in gpu.processes or ()) == sorted(p.pid for p in spec.processes)


def test_record_to_stdout_is_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--sim", "passthrough-guest", "--interval", "0"]) == 0
    data = yaml.safe_load(capsys.readouterr().out)
    assert len(data["gpus"]) == len(load_scenario("passthrough-guest").gpus)


def test_unwritable_output_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "missing-dir" / "host.yaml"
    assert main(["record", "--sim", "passthrough-guest", "--output", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vgpumon: error: cannot write") and err.count("\n") == 1


def test_mask_replaces_every_identity() -> None:
    gi = MigGpuInstance(
        id=1, compute_instances=(MigComputeInstance(id=0, mig_uuid="MIG-secret-0"),)
    )
    vms = (
        VgpuInstance(vgpu_id=1, uuid="secret-vgpu", vm_id="secret-vm-uuid", vm_id_type="uuid"),
        VgpuInstance(vgpu_id=2, mdev_uuid="secret-mdev", vm_id="4711", vm_id_type="domain_id"),
    )
    gpu = Gpu(index=0, uuid="GPU-secret", serial="1324", mig_instances=(gi,), vgpu_instances=vms)
    down = Gpu(index=1, uuid="GPU-secret-2")
    snap = Snapshot(timestamp=0.0, gpus=(gpu, down))
    masked = mask(snap)
    text = repr(masked)
    assert "secret" not in text and "1324" not in text and "4711" not in text
    assert [v.vm_id_type for v in masked.gpus[0].vgpu_instances] == ["uuid", "domain_id"]
    assert masked.gpus[1].serial is None  # absent stays absent
    assert masked.gpus[0].mig_instances[0].compute_instances[0].mig_uuid is not None
