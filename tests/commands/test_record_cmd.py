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


def test_mask_replaces_vm_and_pod_names() -> None:
    from vgpumon.model import DeviceAllocation, VirtualMachine

    vm = VirtualMachine(
        name="secret-vm-name",
        uuid="secret-vm-uuid",
        state="running",
        title="secret title",
        description="secret description",
    )
    vgpu = VgpuInstance(
        vgpu_id=1,
        mdev_uuid="Secret-Mdev",
        vm_id="secret-vm-uuid",
        vm_id_type="uuid",
        vm=vm,
        vf_pci_bus_id="0000:18:00.4",
    )
    gpu = Gpu(index=0, uuid="GPU-secret", vgpu_instances=(vgpu,))
    allocations = (
        DeviceAllocation(
            resource="nvidia.com/NVIDIA_L40S-2B",
            device_id="secret-mdev",
            namespace="secret-ns",
            pod="virt-launcher-secret-vm-name-abcde",
            container="compute",
            vm_name="secret-vm-name",
            kind="vgpu",
            gpu_uuid="GPU-secret",
            vgpu_id=1,
        ),
        DeviceAllocation(
            resource="nvidia.com/gpu", device_id="GPU-secret::2", kind="gpu", gpu_uuid="GPU-secret"
        ),
        DeviceAllocation(resource="nvidia.com/x", device_id="0000:2a:00.0"),
        DeviceAllocation(resource="nvidia.com/x", device_id="secret-other"),
    )
    masked = mask(Snapshot(timestamp=0.0, gpus=(gpu,), allocations=allocations))
    assert "secret" not in repr(masked).lower()
    mvgpu = masked.gpus[0].vgpu_instances[0]
    assert mvgpu.vm is not None and mvgpu.vm.state == "running"
    assert mvgpu.vm.uuid == mvgpu.vm_id  # still the same VM as NVML's id says
    assert mvgpu.vf_pci_bus_id == "0000:18:00.4"  # an address, not an identity
    held, whole, pci, other = masked.allocations
    assert held.device_id == mvgpu.mdev_uuid and held.gpu_uuid == masked.gpus[0].uuid
    assert held.vm_name == mvgpu.vm.name  # the pod's VM and the vGPU's VM stay one VM
    assert (held.namespace, held.pod) == ("namespace-1", "pod-1")
    assert whole.device_id == masked.gpus[0].uuid and whole.pod is None
    assert pci.device_id == "0000:2a:00.0"
    assert other.device_id == "device-4"
