"""What the enrichers add to each sampling cycle: the cost of merging kept names into a snapshot.

The enrichers ask libvirt and the kubelet on their own threads; the cycle only pays for the
merge (:func:`vgpumon.collect.enrich.domains.merge` and :func:`vgpumon.collect.enrich.pods.merge`).
This times both on a synthetic large host: ``--gpus`` GPUs with ``--vgpus`` vGPUs each, one libvirt
domain per vGPU (mdev hostdev, SR-IOV VF node device) plus as many idle domains, and ``--pods``
pods of which one per vGPU holds its mdev (KubeVirt virt-launcher) and the rest hold other
resources. No NVML, no I/O: pure merge time, median of ``--repeat`` runs.

    python3 bench/enrich_merge_cost.py --gpus 8 --vgpus 32 --pods 500
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid as uuidlib

from vgpumon.collect.enrich import domains, pods
from vgpumon.model import Gpu, Snapshot, VgpuInstance


def _uuid(*parts: object) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, "/".join(map(str, parts))))


def build(
    n_gpus: int, n_vgpus: int, n_pods: int
) -> tuple[Snapshot, domains.Inventory, list[pods.PodDevice], int]:
    gpus = []
    doms = []
    mdev_parents: dict[str, str] = {}
    physfn: dict[str, str] = {}
    devices: list[pods.PodDevice] = []
    for g in range(n_gpus):
        pf = f"0000:{0x18 + g:02x}:00.0"
        vgpus = []
        for v in range(n_vgpus):
            vm, mdev = _uuid("vm", g, v), _uuid("mdev", g, v)
            vf = f"0000:{0x18 + g:02x}:{v // 8:02x}.{v % 8:x}"
            vgpus.append(
                VgpuInstance(vgpu_id=g * 1000 + v, vm_id=vm, vm_id_type="uuid", mdev_uuid=mdev)
            )
            doms.append(
                domains.Domain(
                    name=f"vm-{g}-{v}",
                    uuid=vm,
                    id=len(doms) + 1,
                    state="running",
                    mdev_uuids=(mdev,),
                )
            )
            mdev_parents[mdev] = vf
            physfn[vf] = pf
            devices.append(
                pods.PodDevice(
                    "nvidia.com/NVIDIA_L40S-4Q",
                    mdev,
                    "vdi",
                    f"virt-launcher-vm-{g}-{v}-abcde",
                    "compute",
                )
            )
        gpus.append(
            Gpu(
                index=g,
                uuid=f"GPU-{_uuid('gpu', g)}",
                pci_bus_id=f"0000{pf}",
                vgpu_instances=tuple(vgpus),
            )
        )
    doms += [
        domains.Domain(name=f"idle-{i}", uuid=_uuid("idle", i), state="shutoff")
        for i in range(len(doms))
    ]
    # The other pods hold resources the enricher does not read (filtered out by resource name
    # before the merge), so only the GPU holders reach it.
    others = max(0, n_pods - len(devices))
    inv = domains.Inventory.build(doms, mdev_parents, physfn)
    return Snapshot(timestamp=0.0, gpus=tuple(gpus)), inv, devices, others


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--vgpus", type=int, default=32)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    snap, inv, devices, others = build(args.gpus, args.vgpus, args.pods)
    named = domains.merge(snap, inv)
    assert all(v.vm is not None and v.vf_pci_bus_id for g in named.gpus for v in g.vgpu_instances)
    both = pods.merge(named, devices)
    assert sum(a.kind == "vgpu" for a in both.allocations) == args.gpus * args.vgpus
    times: dict[str, list[float]] = {"libvirt": [], "kubelet": []}
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        named = domains.merge(snap, inv)
        t1 = time.perf_counter()
        pods.merge(named, devices)
        t2 = time.perf_counter()
        times["libvirt"].append(t1 - t0)
        times["kubelet"].append(t2 - t1)
    print(
        f"host: {args.gpus} GPUs x {args.vgpus} vGPUs, {len(inv.domains)} domains, "
        f"{len(devices)} GPU-holding pods (+{others} others); median of {args.repeat}"
    )
    for name, values in times.items():
        print(
            f"  {name:8s} merge  median {statistics.median(values) * 1e3:7.3f} ms  "
            f"p95 {sorted(values)[int(len(values) * 0.95) - 1] * 1e3:7.3f} ms"
        )


if __name__ == "__main__":
    main()
