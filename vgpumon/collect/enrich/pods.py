"""Which container holds which GPU, MIG device or vGPU, from the kubelet's pod-resources answers.

Device plugins report device ids in their own spelling; :func:`merge` ties each to this host's
snapshot by the first that matches:

* a GPU UUID (``GPU-…``), as the NVIDIA device plugin reports whole GPUs, with its time-slicing
  replica suffix (``GPU-…::3``) removed;
* a MIG device UUID (``MIG-…``), as it reports MIG devices;
* an mdev UUID, as KubeVirt's mediated-device plugin reports vGPUs;
* a PCI address, as KubeVirt's PCI host-device plugin reports whole GPUs and SR-IOV VFs (a GPU's
  ``pci_bus_id``, or a vGPU's ``vf_pci_bus_id`` once libvirt has named it).

Devices a pod claims through Dynamic Resource Allocation (DRA) come in the same ``List`` answer, as
each container's dynamic resources: a ResourceClaim's devices, each named by its DRA driver
(``gpu.nvidia.com``), pool and device name, with the CDI devices the runtime injects. They match
the snapshot by a GPU or MIG UUID in a CDI device name where the driver writes one, else by the
NVIDIA DRA driver's device names: ``gpu-<minor>`` for a whole GPU (the GPU's ``/dev/nvidia<minor>``)
and ``gpu-<minor>-mig-…`` for a MIG device, which carries the GPU instance's profile and
placement (:func:`_dra_mig_names`).

KubeVirt runs each VM in a ``virt-launcher-<vm>-<5 characters>`` pod; the VM name is taken from the
pod name, or from the pod's ``kubevirt.io/domain`` annotation where the API server was asked
(:mod:`vgpumon.collect.enrich.kubeapi`). Pure functions over plain data: the gRPC side is
:mod:`vgpumon.collect.enrich.kubelet`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from vgpumon.collect.enrich.domains import pci_address
from vgpumon.model import (
    DeviceAllocation,
    Gpu,
    MigGpuInstance,
    Snapshot,
    VgpuInstance,
    VirtualMachine,
)

VIRT_LAUNCHER = re.compile(r"^virt-launcher-(?P<vm>.+)-[a-z0-9]{5}$")
# DRA drivers whose claims are attributed (fnmatch patterns against the driver's name), beside
# the configured device-plugin resource names: NVIDIA's DRA driver is gpu.nvidia.com.
DRA_DRIVERS = ("*nvidia.com",)


@dataclass(frozen=True)
class PodDevice:
    """One device id of one resource, and the container it was given to (None: not given)."""

    resource: str
    device_id: str
    namespace: str | None = None
    pod: str | None = None
    container: str | None = None
    vm_name: str | None = None  # from the API server's kubevirt.io/domain annotation, when asked
    # DRA: the claim that holds the device, and the CDI device names the runtime injected.
    claim_namespace: str | None = None
    claim_name: str | None = None
    cdi_devices: tuple[str, ...] = ()


def vm_name_of(pod: str | None) -> str | None:
    """The KubeVirt VM a virt-launcher pod runs, from the pod's name."""
    match = VIRT_LAUNCHER.match(pod or "")
    return match.group("vm") if match else None


def wanted(resource: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(resource, p) for p in patterns)


def pod_devices(listed: Any, allocatable: Any, patterns: Sequence[str]) -> tuple[PodDevice, ...]:
    """Devices of the wanted resources from a ``List`` and a ``GetAllocatableResources`` answer.

    Every allocated device once (the first container that lists it), then the allocatable ones
    no container holds. Entries without a name or id are skipped, not trusted.
    """
    seen: dict[tuple[str, str], PodDevice] = {}
    for pod in listed.pod_resources:
        if not pod.name or not pod.namespace:
            continue
        for container in pod.containers:
            for devices in container.devices:
                if not wanted(devices.resource_name, patterns):
                    continue
                for device_id in devices.device_ids:
                    key = (devices.resource_name, device_id)
                    if device_id and key not in seen:
                        seen[key] = PodDevice(
                            devices.resource_name,
                            device_id,
                            pod.namespace,
                            pod.name,
                            container.name or None,
                        )
            for claim in getattr(container, "dynamic_resources", ()):
                for res in claim.claim_resources:
                    driver, device = res.driver_name, res.device_name
                    if not driver or not device:
                        continue
                    if not (wanted(driver, DRA_DRIVERS) or wanted(driver, patterns)):
                        continue
                    key = (driver, device)
                    if key not in seen:
                        seen[key] = PodDevice(
                            driver,
                            device,
                            pod.namespace,
                            pod.name,
                            container.name or None,
                            claim_namespace=claim.claim_namespace or None,
                            claim_name=claim.claim_name or None,
                            cdi_devices=tuple(c.name for c in res.cdi_devices if c.name),
                        )
    if allocatable is not None:
        for devices in allocatable.devices:
            if wanted(devices.resource_name, patterns):
                for device_id in devices.device_ids:
                    key = (devices.resource_name, device_id)
                    if device_id and key not in seen:
                        seen[key] = PodDevice(devices.resource_name, device_id)
    return tuple(sorted(seen.values(), key=lambda d: (d.resource, d.device_id)))


# --------------------------------------------------------------------------- merging


@dataclass(frozen=True)
class _Target:
    kind: str
    gpu: Gpu
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    vgpu_id: int | None = None


def _dra_mig_names(minor: int, gi: MigGpuInstance) -> list[str]:
    """The names NVIDIA's DRA driver has given a MIG device over its releases: by GPU minor,
    profile id and placement, and with the profile's name (without its dots) in front."""
    if gi.profile_id is None or gi.placement_start is None:
        return []
    start, size = gi.placement_start, gi.placement_size
    names = [f"gpu-{minor}-mig-{gi.profile_id}-{start}-{size}"]
    if gi.profile_name:
        profile = re.sub(r"[^a-z0-9-]", "", gi.profile_name.lower().replace("+", "-"))
        names += [
            f"gpu-{minor}-mig-{profile}-{gi.profile_id}-{start}",
            f"gpu-{minor}-mig-{profile}-{start}-{size}",
        ]
    return names


def _targets(snapshot: Snapshot) -> dict[str, _Target]:
    """Every id a device plugin or DRA driver may use for something in the snapshot, lower case."""
    out: dict[str, _Target] = {}
    for g in snapshot.gpus:
        out[g.uuid.lower()] = _Target("gpu", g)
        address = pci_address(g.pci_bus_id)
        if address is not None:
            out[address] = _Target("gpu", g)
        if g.minor_number is not None:
            out.setdefault(f"gpu-{g.minor_number}", _Target("gpu", g))
        for gi in g.mig_instances:
            for ci in gi.compute_instances:
                if ci.mig_uuid:
                    out[ci.mig_uuid.lower()] = _Target("mig", g, gi.id, ci.id)
            if g.minor_number is not None:
                first_ci = gi.compute_instances[0].id if gi.compute_instances else None
                for name in _dra_mig_names(g.minor_number, gi):
                    out.setdefault(name, _Target("mig", g, gi.id, first_ci))
        for v in g.vgpu_instances:
            target = _Target("vgpu", g, v.gpu_instance_id, None, v.vgpu_id)
            if v.mdev_uuid:
                out[v.mdev_uuid.lower()] = target
            if v.vf_pci_bus_id:
                out[v.vf_pci_bus_id] = target
    return out


def _key(device_id: str) -> str:
    """A device id as :func:`_targets` spells it."""
    text = device_id.strip().split("::", 1)[0].lower()  # NVIDIA time-slicing replicas
    if text.startswith(("gpu-", "mig-")):
        return text
    return (pci_address(text) or text) if ":" in text else text


def allocations(snapshot: Snapshot, devices: Iterable[PodDevice]) -> tuple[DeviceAllocation, ...]:
    targets = _targets(snapshot)
    out: list[DeviceAllocation] = []
    for d in devices:
        # A UUID in a CDI device name ("nvidia.com/gpu=GPU-…") names the device exactly; the
        # DRA device name only by the driver's convention.
        cdi = (targets.get(_key(c.rpartition("=")[2])) for c in d.cdi_devices)
        t = next((x for x in cdi if x is not None), None) or targets.get(_key(d.device_id))
        out.append(
            DeviceAllocation(
                resource=d.resource,
                device_id=d.device_id,
                namespace=d.namespace,
                pod=d.pod,
                container=d.container,
                vm_name=d.vm_name or vm_name_of(d.pod),
                kind=t.kind if t else None,
                gpu_uuid=t.gpu.uuid if t else None,
                gpu_instance_id=t.gpu_instance_id if t else None,
                compute_instance_id=t.compute_instance_id if t else None,
                vgpu_id=t.vgpu_id if t else None,
                claim_namespace=d.claim_namespace,
                claim_name=d.claim_name,
            )
        )
    return tuple(out)


def _name_vgpus(g: Gpu, vms: dict[int, str]) -> Gpu:
    if not any(v.vgpu_id in vms and v.vm is None for v in g.vgpu_instances):
        return g
    vgpus: list[VgpuInstance] = [
        dataclasses.replace(v, vm=VirtualMachine(name=vms[v.vgpu_id]))
        if v.vm is None and v.vgpu_id in vms
        else v
        for v in g.vgpu_instances
    ]
    return dataclasses.replace(g, vgpu_instances=tuple(vgpus))


def merge(snapshot: Snapshot, devices: Iterable[PodDevice]) -> Snapshot:
    """The snapshot with its allocations; a vGPU in a virt-launcher pod gets the VM's name
    where libvirt did not give one (on KubeVirt libvirt runs inside each pod, not on the host)."""
    allocs = allocations(snapshot, devices)
    vms: dict[str, dict[int, str]] = {}
    for a in allocs:
        if a.kind == "vgpu" and a.vm_name and a.gpu_uuid and a.vgpu_id is not None:
            vms.setdefault(a.gpu_uuid, {})[a.vgpu_id] = a.vm_name
    gpus = tuple(_name_vgpus(g, vms[g.uuid]) if g.uuid in vms else g for g in snapshot.gpus)
    return dataclasses.replace(snapshot, gpus=gpus, allocations=allocs)
