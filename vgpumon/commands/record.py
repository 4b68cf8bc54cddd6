"""Write this host as a simulator scenario file, so a bug report becomes a test.

The snapshot is taken like ``vgpumon snapshot`` does; UUIDs (GPU, MIG, vGPU, mdev) and serial
numbers are replaced by stable placeholders before the scenario is written, so the file can be
shared. The scenario goes to stdout unless --output names a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

from vgpumon.commands.snapshot import add_snapshot_arguments, snapshot_from_args
from vgpumon.errors import VgpumonError
from vgpumon.model import (
    DeviceAllocation,
    Gpu,
    MigComputeInstance,
    MigGpuInstance,
    Snapshot,
    VgpuInstance,
    VirtualMachine,
)

_PCI = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_snapshot_arguments(parser, "record")
    parser.add_argument(
        "--output", "-o", metavar="FILE", help="write the scenario here (default: stdout)"
    )


def _uuid(prefix: str, kind: int, n: int) -> str:
    """A well-formed, obviously fake UUID: kind and number in the last group."""
    body = f"00000000-0000-0000-0000-{kind:04x}{n:08x}"
    return f"{prefix}-{body}" if prefix else body


def _vm_id(vm_id: str | None, vm_id_type: str | None, n: int) -> str | None:
    if vm_id is None:
        return None
    return str(n) if vm_id_type == "domain_id" else _uuid("", 5, n)


def _vm(
    vm: VirtualMachine | None, vm_id: str | None, vm_id_type: str | None, n: int
) -> VirtualMachine | None:
    """A libvirt / KubeVirt VM with its name, UUID and free-text metadata replaced; its state
    stays (it says nothing about whose VM it is)."""
    if vm is None:
        return None
    uuid = vm_id if vm_id_type == "uuid" and vm_id is not None else _uuid("", 5, n)
    return VirtualMachine(name=f"vm-{n}", uuid=uuid if vm.uuid else None, state=vm.state)


def _allocations(
    allocations: tuple[DeviceAllocation, ...], renamed: dict[str, str], vms: dict[str, str]
) -> tuple[DeviceAllocation, ...]:
    """Pods with namespace, pod, container and VM names replaced, device ids as masked above."""
    out: list[DeviceAllocation] = []
    for n, a in enumerate(allocations, start=1):
        device = renamed.get(a.device_id.split("::", 1)[0].lower())
        if device is None:  # a PCI address is not an identity (GPUs keep theirs); the rest is
            device = a.device_id if _PCI.fullmatch(a.device_id) else f"device-{n}"
        held = a.pod is not None
        out.append(
            dataclasses.replace(
                a,
                device_id=device,
                gpu_uuid=renamed.get(a.gpu_uuid.lower()) if a.gpu_uuid else None,
                namespace=f"namespace-{n}" if held else None,
                pod=f"pod-{n}" if held else None,
                container=f"container-{n}" if a.container is not None else None,
                vm_name=vms.get(a.vm_name, f"vm-pod-{n}") if a.vm_name else None,
            )
        )
    return tuple(out)


def mask(snapshot: Snapshot) -> Snapshot:
    """The snapshot with every UUID, serial number, VM id and name replaced by a placeholder.

    VM ids and names are the hypervisor's names for customers' machines (a libvirt domain UUID, a
    domain number, a name, its title and description), and pods, namespaces and containers are a
    cluster's; they leave the host no more than GPU serials do.
    """
    gpus: list[Gpu] = []
    renamed: dict[str, str] = {}  # lower-case identity -> its placeholder, for allocations
    vms: dict[str, str] = {}  # VM name -> its placeholder, so a pod's VM masks the same way
    mig_n = vgpu_n = 0
    for g in snapshot.gpus:
        instances: list[MigGpuInstance] = []
        for gi in g.mig_instances:
            cis: list[MigComputeInstance] = []
            for ci in gi.compute_instances:
                mig_n += 1
                if ci.mig_uuid is not None:
                    renamed[ci.mig_uuid.lower()] = _uuid("MIG", 2, mig_n)
                cis.append(
                    dataclasses.replace(
                        ci, mig_uuid=_uuid("MIG", 2, mig_n) if ci.mig_uuid is not None else None
                    )
                )
            instances.append(dataclasses.replace(gi, compute_instances=tuple(cis)))
        vgpus: list[VgpuInstance] = []
        for v in g.vgpu_instances:
            vgpu_n += 1
            if v.mdev_uuid is not None:
                renamed[v.mdev_uuid.lower()] = _uuid("", 4, vgpu_n)
            vm_id = _vm_id(v.vm_id, v.vm_id_type, vgpu_n)
            vm = _vm(v.vm, vm_id, v.vm_id_type, vgpu_n)
            if v.vm is not None and vm is not None:
                vms[v.vm.name] = vm.name
            vgpus.append(
                dataclasses.replace(
                    v,
                    uuid=_uuid("", 3, vgpu_n) if v.uuid is not None else None,
                    mdev_uuid=_uuid("", 4, vgpu_n) if v.mdev_uuid is not None else None,
                    vm_id=vm_id,
                    vm=vm,
                )
            )
        renamed[g.uuid.lower()] = _uuid("GPU", 1, g.index)
        gpus.append(
            dataclasses.replace(
                g,
                uuid=_uuid("GPU", 1, g.index),
                serial=f"{g.index + 1:013d}" if g.serial is not None else None,
                mig_instances=tuple(instances),
                vgpu_instances=tuple(vgpus),
            )
        )
    masked = {g.uuid: m.uuid for g, m in zip(snapshot.gpus, gpus, strict=True)}
    health = dataclasses.replace(
        snapshot.health, hung_gpus=tuple(masked.get(u, u) for u in snapshot.health.hung_gpus)
    )
    return dataclasses.replace(
        snapshot,
        gpus=tuple(gpus),
        health=health,
        allocations=_allocations(snapshot.allocations, renamed, vms),
    )


def run(args: argparse.Namespace) -> int:
    from vgpumon.sim.record import dump_scenario, scenario_from_snapshot

    snapshot = mask(snapshot_from_args(args))
    if not snapshot.gpus:
        raise VgpumonError("NVML reported no GPUs on this host; there is nothing to record")
    text = dump_scenario(scenario_from_snapshot(snapshot))
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise VgpumonError(f"cannot write {args.output}: {exc.strerror or exc}") from exc
        print(f"wrote {args.output} ({len(snapshot.gpus)} GPUs)", file=sys.stderr)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
