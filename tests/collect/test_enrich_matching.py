"""Matching names to devices, on plain data: id spellings, old libvirt, malformed answers."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from vgpumon.collect.enrich.domains import (
    Domain,
    Inventory,
    merge,
    parse_domain,
    parse_node_device,
    pci_address,
)
from vgpumon.collect.enrich.pods import PodDevice, allocations, pod_devices, vm_name_of
from vgpumon.model import Gpu, Snapshot, VgpuInstance


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("00000000:18:00.0", "0000:18:00.0"),  # NVML
        ("0000:2A:00.4", "0000:2a:00.4"),
        ("pci_0000_2a_00_4", "0000:2a:00.4"),  # libvirt node device name
        ("2a:00.4", "0000:2a:00.4"),
        ("not-an-address", None),
        ("", None),
        (None, None),
    ],
)
def test_pci_addresses_compare_in_one_spelling(text: str | None, expected: str | None) -> None:
    assert pci_address(text) == expected


def test_domain_xml_without_name_is_refused() -> None:
    with pytest.raises(ValueError, match="name or UUID"):
        parse_domain("<domain><uuid>x</uuid></domain>")


def test_old_libvirt_names_the_mdev_only_in_the_device_name() -> None:
    xml = (
        "<device><name>mdev_9b481ae0_40c3_fedd_061b_61b42689e109</name>"
        "<parent>pci_0000_18_00_4</parent><capability type='mdev'><type id='nvidia-1'/>"
        "</capability></device>"
    )
    assert parse_node_device(xml) == (
        "9b481ae0-40c3-fedd-061b-61b42689e109",
        "0000:18:00.4",
        None,
    )
    assert parse_node_device("<device><name>net_eth0</name></device>") == (None, None, None)


def _host(*vgpus: VgpuInstance) -> Snapshot:
    gpu = Gpu(index=0, uuid="GPU-a", pci_bus_id="00000000:18:00.0", vgpu_instances=vgpus)
    return Snapshot(timestamp=0.0, gpus=(gpu,))


def test_domain_ids_match_running_domains_only() -> None:
    running = Domain(name="xen-guest", uuid="u1", id=7, state="running")
    stopped = Domain(name="off", uuid="u2", id=None, state="shutoff")
    inv = Inventory.build([running, stopped])
    snap = merge(
        _host(
            VgpuInstance(vgpu_id=1, vm_id="7", vm_id_type="domain_id"),
            VgpuInstance(vgpu_id=2, vm_id="not-a-number", vm_id_type="domain_id"),
            VgpuInstance(vgpu_id=3, vm_id="U2", vm_id_type="uuid"),  # UUIDs ignore case
        ),
        inv,
    )
    v1, v2, v3 = snap.gpus[0].vgpu_instances
    assert v1.vm is not None and v1.vm.name == "xen-guest"
    assert v2.vm is None
    assert v3.vm is not None and v3.vm.state == "shutoff"


def test_two_vfs_of_one_gpu_in_one_domain_are_not_guessed() -> None:
    domain = Domain(name="big", uuid="u", pci_addresses=("0000:18:00.4", "0000:18:00.5"))
    inv = Inventory.build(
        [domain], physfn={"0000:18:00.4": "0000:18:00.0", "0000:18:00.5": "0000:18:00.0"}
    )
    snap = merge(_host(VgpuInstance(vgpu_id=1, vm_id="u", vm_id_type="uuid")), inv)
    assert snap.gpus[0].vgpu_instances[0].vf_pci_bus_id is None


@pytest.mark.parametrize(
    ("pod", "vm"),
    [
        ("virt-launcher-win11-desk-x7k2p", "win11-desk"),
        ("virt-launcher-a-abcde", "a"),
        ("virt-launcher-abcde", None),
        ("trainer-0", None),
        (None, None),
    ],
)
def test_vm_name_from_virt_launcher_pods(pod: str | None, vm: str | None) -> None:
    assert vm_name_of(pod) == vm


def test_time_slicing_replicas_and_case_match_the_gpu() -> None:
    snap = _host()
    (got,) = allocations(snap, [PodDevice("nvidia.com/gpu", "gpu-A::3", "ns", "p", "c")])
    assert (got.kind, got.gpu_uuid) == ("gpu", "GPU-a")
    (pci,) = allocations(snap, [PodDevice("nvidia.com/X", "0000:18:00.0")])
    assert pci.kind == "gpu"
    (other,) = allocations(snap, [PodDevice("nvidia.com/gpu", "GPU-elsewhere")])
    assert other.kind is None and other.gpu_uuid is None


def _devices(resource: str, *ids: str) -> NS:
    return NS(resource_name=resource, device_ids=list(ids))


def test_malformed_pods_are_skipped_not_trusted() -> None:
    listed = NS(
        pod_resources=[
            NS(
                name="",
                namespace="ns",
                containers=[NS(name="c", devices=[_devices("nvidia.com/gpu", "GPU-1")])],
            ),
            NS(
                name="p",
                namespace="",
                containers=[NS(name="c", devices=[_devices("nvidia.com/gpu", "GPU-2")])],
            ),
            NS(
                name="ok",
                namespace="ns",
                containers=[
                    NS(name="", devices=[_devices("nvidia.com/gpu", "", "GPU-3")]),
                    NS(name="dup", devices=[_devices("nvidia.com/gpu", "GPU-3")]),
                ],
            ),
        ]
    )
    allocatable = NS(devices=[_devices("nvidia.com/gpu", "GPU-1", "GPU-3", "")])
    got = pod_devices(listed, allocatable, ("nvidia.com/*",))
    assert got == (
        PodDevice("nvidia.com/gpu", "GPU-1"),  # its pod had no name: free as far as we know
        PodDevice("nvidia.com/gpu", "GPU-3", "ns", "ok", None),
    )


def test_snapshots_without_names_still_read_and_names_round_trip() -> None:
    """Names are optional fields: the schema version stays, older JSON reads as 'no names'."""
    import json

    from vgpumon.model import SCHEMA_VERSION, DeviceAllocation, VirtualMachine, from_json, to_json

    vgpu = VgpuInstance(vgpu_id=1, vm=VirtualMachine(name="vm-a", state="paused"))
    snap = Snapshot(
        timestamp=1.0,
        gpus=(Gpu(index=0, uuid="GPU-a", vgpu_instances=(vgpu,)),),
        allocations=(DeviceAllocation("nvidia.com/gpu", "GPU-a", "ns", "p", "c", kind="gpu"),),
    )
    assert from_json(to_json(snap)) == snap
    old = json.loads(to_json(snap))
    del old["allocations"]
    for key in ("vm", "vf_pci_bus_id"):
        del old["gpus"][0]["vgpu_instances"][0][key]
    assert old["schema_version"] == SCHEMA_VERSION == 2
    read = from_json(json.dumps(old))
    assert read.allocations == () and read.gpus[0].vgpu_instances[0].vm is None
