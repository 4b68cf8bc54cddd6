"""The kubelet enricher against a real gRPC pod-resources server on a unix socket.

Device ids are those of the simulator scenarios: ``a100-mig-mixed`` (GPU 0 in MIG mode, GPU 1 a
whole GPU) and ``kvm-vgpu-timesliced`` (mdev vGPUs, for KubeVirt's virt-launcher pods).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest
from enrich_helpers import wait_for
from export_helpers import samples_by_name
from kubelet_helpers import Claim, FakeKubelet, Pod, pod, socket_dir  # noqa: F401 - fixture
from vgpu_helpers import by_id

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.enrich.kubelet import KubeletConfig, KubeletEnricher
from vgpumon.collect.registry import enabled_readers
from vgpumon.metrics.exposition import render
from vgpumon.metrics.table import ExportOptions
from vgpumon.model import DeviceAllocation, Snapshot, from_json, to_json
from vgpumon.testing import sim_host

WHOLE = "GPU-74e04dbe-7b42-d2f4-877b-8e8caaf3e904"  # a100-mig-mixed GPU 1
MIG_1G = "MIG-cf0d29ce-6fbc-9368-e5c1-429acfad6868"  # GPU 0, GPU instance 1
MIG_FREE = "MIG-5c646ab9-7857-b378-6b1d-e71445ad9dd8"  # GPU 0, GPU instance 2
MIG_ALL = (
    MIG_1G,
    "MIG-a2b72eca-a986-5736-3ae2-7c626b81be00",
    MIG_FREE,
    "MIG-321b318c-a6fe-c69d-c85c-1e3c7f3ca8e3",
    "MIG-49a4313b-9309-bf07-d30b-3dbc9aedd0d5",
    "MIG-921fc40a-9d41-794f-a564-7ee148d83210",
    "MIG-d11b03ea-21fa-d9b4-30ef-b97e39d31476",
)
MDEV_3 = "fe4138f0-efff-9274-4579-142902701cd9"  # kvm-vgpu-timesliced vGPU 3 (GPU 0)
GPU1_PCI = "0000:2a:00.0"  # kvm-vgpu-timesliced GPU 1 as KubeVirt's PCI plugin names it


def _host(scenario: str) -> Any:
    return sim_host(scenario, readers=enabled_readers(SamplerConfig()))


@pytest.fixture
def kubelet(socket_dir: str) -> Iterator[FakeKubelet]:  # noqa: F811 - the fixture
    k = FakeKubelet(os.path.join(socket_dir, "kubelet.sock"))
    yield k
    k.stop()


def _enricher(k: FakeKubelet, **config: Any) -> KubeletEnricher:
    return KubeletEnricher(KubeletConfig(socket=k.path, **{"interval_seconds": 0.05, **config}))


async def _read(host: Any, enricher: KubeletEnricher, after: int | None = None) -> Snapshot:
    host.sampler.enrichers = [enricher]
    await host.cycle()
    target = enricher.refreshes + 1 if after is None else after
    await asyncio.to_thread(wait_for, lambda: enricher.refreshes >= target, "a kubelet read")
    return await host.cycle()


def _success(snap: Snapshot) -> bool | None:
    return next((c.success for c in snap.collectors if c.name == "kubelet"), None)


def _by_device(snap: Snapshot) -> dict[str, DeviceAllocation]:
    return {a.device_id: a for a in snap.allocations}


async def test_whole_gpus_and_mig_devices_get_their_pods(kubelet: FakeKubelet) -> None:
    kubelet.pods = [
        pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE),
        pod("infer-a", "serving", "nvidia.com/mig-1g.5gb", MIG_1G, container="server"),
        pod("fpga-job", "hw", "example.com/fpga", "fpga0"),  # not a wanted resource
        Pod("cpu-only", "web", {"nginx": []}),
    ]
    kubelet.allocatable = [
        ("nvidia.com/gpu", [WHOLE]),
        ("nvidia.com/mig-1g.5gb", [MIG_1G, MIG_FREE]),
    ]
    kubelet.start()
    host = _host("a100-mig-mixed")
    try:
        snap = await _read(host, _enricher(kubelet))
    finally:
        host.close()
    got = _by_device(snap)
    assert set(got) == {WHOLE, MIG_1G, MIG_FREE}
    whole = got[WHOLE]
    assert (whole.namespace, whole.pod, whole.container) == ("ml", "trainer-0", "main")
    assert (whole.kind, whole.gpu_uuid) == ("gpu", snap.gpus[1].uuid)
    mig = got[MIG_1G]
    assert (mig.kind, mig.gpu_instance_id, mig.compute_instance_id) == ("mig", 1, 0)
    assert (mig.pod, mig.container) == ("infer-a", "server")
    assert got[MIG_FREE].pod is None and got[MIG_FREE].gpu_instance_id == 2
    assert _success(snap) is True
    assert from_json(to_json(snap)) == snap

    series = samples_by_name(render(snap).decode())
    info = {s[0]["device_id"]: s[0] for s in series["vgpumon_gpu_allocation_info"]}
    assert info[WHOLE]["pod"] == "trainer-0" and info[WHOLE]["gpu"] == "1"
    assert info[MIG_1G]["gpu_instance"] == "1" and info[MIG_1G]["device_kind"] == "mig"
    assert info[MIG_FREE]["pod"] == "" and info[MIG_FREE]["namespace"] == ""
    assert ({"collector": "kubelet"}, 1.0) in series["vgpumon_scrape_collector_success"]
    assert "vgpumon_pod_gpu_utilization_ratio" not in series  # not opted in

    opted = samples_by_name(render(snap, options=ExportOptions(pod_series=True)).decode())
    util = {s[0]["pod"]: s[1] for s in opted["vgpumon_pod_gpu_utilization_ratio"]}
    assert util == {"trainer-0": snap.gpus[1].utilization.gpu}
    memory = {s[0]["pod"]: s[1] for s in opted["vgpumon_pod_gpu_memory_used_bytes"]}
    assert memory["infer-a"] == snap.gpus[0].mig_instances[0].memory_used_bytes
    assert memory["trainer-0"] == snap.gpus[1].memory.used_bytes


async def test_virt_launcher_pods_name_their_vm(kubelet: FakeKubelet) -> None:
    kubelet.pods = [
        pod(
            "virt-launcher-win11-desk-x7k2p",
            "vdi",
            "nvidia.com/NVIDIA_L40S-2B",
            MDEV_3,
            container="compute",
        ),
        pod(
            "virt-launcher-cad-01-abcde",
            "eng",
            "nvidia.com/AD102GL_L40S",
            GPU1_PCI,
            container="compute",
        ),
    ]
    kubelet.start()
    host = _host("kvm-vgpu-timesliced")
    try:
        snap = await _read(host, _enricher(kubelet))
    finally:
        host.close()
    got = _by_device(snap)
    vgpu = got[MDEV_3]
    assert (vgpu.kind, vgpu.vgpu_id, vgpu.vm_name) == ("vgpu", 3, "win11-desk")
    assert by_id(snap.gpus[0])[3].vm.name == "win11-desk"  # no libvirt on KubeVirt hosts
    assert by_id(snap.gpus[0])[1].vm is None
    passthrough = got[GPU1_PCI]
    assert (passthrough.kind, passthrough.gpu_uuid) == ("gpu", snap.gpus[1].uuid)
    assert passthrough.vm_name == "cad-01"
    text = render(snap).decode()
    info = {s[0]["vgpu_id"]: s[0] for s in samples_by_name(text)["vgpumon_vgpu_info"]}
    assert info["3"]["vm_name"] == "win11-desk"


async def test_500_pods_give_exactly_the_opted_in_series(kubelet: FakeKubelet) -> None:
    holders = [pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE)] + [
        pod(f"mig-{i}", "ml", "nvidia.com/mig-1g.5gb", uuid) for i, uuid in enumerate(MIG_ALL)
    ]
    others = [
        Pod(f"web-{i}", f"ns-{i % 7}", {"app": [("example.com/nic", [f"vf{i}"])]})
        for i in range(500 - len(holders))
    ]
    kubelet.pods = holders + others
    kubelet.allocatable = [("nvidia.com/gpu", [WHOLE]), ("nvidia.com/mig-1g.5gb", list(MIG_ALL))]
    kubelet.start()
    host = _host("a100-mig-mixed")
    try:
        snap = await _read(host, _enricher(kubelet))
    finally:
        host.close()
    assert len(snap.allocations) == 8

    def pod_series(options: ExportOptions) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for name, samples in samples_by_name(render(snap, options=options).decode()).items():
            for labels, _ in samples:
                if "pod" in labels:
                    out.setdefault(name, set()).add(labels["pod"])
        return out

    holder_names = {p.name for p in holders}
    assert pod_series(ExportOptions()) == {"vgpumon_gpu_allocation_info": holder_names}
    opted = pod_series(ExportOptions(pod_series=True))
    assert opted["vgpumon_gpu_allocation_info"] == holder_names
    assert opted["vgpumon_pod_gpu_memory_used_bytes"] == holder_names
    # MIG devices of an A100 have no utilization (no GPM); the whole GPU has.
    assert opted["vgpumon_pod_gpu_utilization_ratio"] == {"trainer-0"}
    assert set(opted) == {
        "vgpumon_gpu_allocation_info",
        "vgpumon_pod_gpu_memory_used_bytes",
        "vgpumon_pod_gpu_utilization_ratio",
    }


async def test_a_slow_kubelet_is_reported_and_never_holds_a_cycle(kubelet: FakeKubelet) -> None:
    kubelet.pods = [pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE)]
    kubelet.start()
    host = _host("a100-mig-mixed")
    enricher = _enricher(kubelet, timeout_seconds=0.2)
    try:
        snap = await _read(host, enricher)
        assert _success(snap) is True
        kubelet.delay = 60.0  # far past the call timeout: DEADLINE_EXCEEDED
        await asyncio.to_thread(wait_for, lambda: enricher.status() is False, "the timeout")
        snap = await host.cycle()
        assert _success(snap) is False
        assert snap.gpus[1].up and snap.gpus[1].memory.used_bytes is not None
        assert _by_device(snap)[WHOLE].pod == "trainer-0"  # the last answer stays
        kubelet.delay = 0.0
        await asyncio.to_thread(wait_for, lambda: enricher.status() is True, "recovery")
    finally:
        host.close()


async def test_malformed_answers_are_survived(kubelet: FakeKubelet) -> None:
    kubelet.start(garbage=True)
    host = _host("a100-mig-mixed")
    enricher = _enricher(kubelet)
    try:
        host.sampler.enrichers = [enricher]
        await host.cycle()
        await asyncio.to_thread(wait_for, lambda: enricher.status() is False, "the failure")
        snap = await host.cycle()
        assert _success(snap) is False
        assert snap.allocations == ()
        assert all(g.up for g in snap.gpus)
        kubelet.stop()
        kubelet.pods = [pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE)]
        kubelet.start()
        await asyncio.to_thread(wait_for, lambda: enricher.status() is True, "recovery")
        snap = await host.cycle()
        assert _by_device(snap)[WHOLE].pod == "trainer-0"
    finally:
        host.close()


async def test_a_vanished_socket_is_survived(kubelet: FakeKubelet) -> None:
    kubelet.pods = [pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE)]
    kubelet.start()
    host = _host("a100-mig-mixed")
    enricher = _enricher(kubelet)
    try:
        snap = await _read(host, enricher)
        assert _success(snap) is True
        kubelet.stop()  # the kubelet restarts: its socket is gone for a while
        assert not os.path.exists(kubelet.path)
        await asyncio.to_thread(wait_for, lambda: enricher.status() is False, "the failure")
        snap = await host.cycle()
        assert _success(snap) is False
        assert _by_device(snap)[WHOLE].pod == "trainer-0"
        kubelet.pods = [pod("trainer-1", "ml", "nvidia.com/gpu", WHOLE)]
        kubelet.start()
        await asyncio.to_thread(wait_for, lambda: enricher.status() is True, "the new kubelet")
        await asyncio.to_thread(
            wait_for, lambda: enricher.devices and enricher.devices[0].pod == "trainer-1", "pods"
        )
        snap = await host.cycle()
        assert _by_device(snap)[WHOLE].pod == "trainer-1"
    finally:
        host.close()


async def test_no_socket_means_off_with_one_log_line(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vgpumon.collect.enrich.kubelet")
    host = _host("a100-mig-mixed")
    enricher = _enricher(kubelet)
    try:
        snap = await _read(host, enricher, after=5)
    finally:
        host.close()
    assert _success(snap) is None
    assert 'collector="kubelet"' not in render(snap).decode()
    lines = [r for r in caplog.records if "pod-resources socket" in r.getMessage()]
    assert len(lines) == 1


async def test_kubelet_without_allocatable_resources(kubelet: FakeKubelet) -> None:
    kubelet.pods = [pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE)]
    kubelet.allocatable = None  # UNIMPLEMENTED, as before Kubernetes 1.23
    kubelet.start()
    host = _host("a100-mig-mixed")
    try:
        snap = await _read(host, _enricher(kubelet))
    finally:
        host.close()
    assert _success(snap) is True
    assert [a.pod for a in snap.allocations] == ["trainer-0"]


async def test_resource_names_are_configurable(kubelet: FakeKubelet) -> None:
    kubelet.pods = [
        pod("trainer-0", "ml", "nvidia.com/gpu", WHOLE),
        pod("infer-a", "serving", "nvidia.com/mig-1g.5gb", MIG_1G),
    ]
    kubelet.start()
    host = _host("a100-mig-mixed")
    try:
        snap = await _read(host, _enricher(kubelet, resources=("nvidia.com/mig-*",)))
    finally:
        host.close()
    assert [a.device_id for a in snap.allocations] == [MIG_1G]


async def test_dra_claims_are_attributed_like_device_plugin_pods(kubelet: FakeKubelet) -> None:
    """Devices a pod claims through DRA: by NVIDIA's DRA device names (GPU minor; MIG profile and
    placement) or by a UUID in a CDI device name; other drivers' claims are left out."""
    gi4_ci0 = "MIG-49a4313b-9309-bf07-d30b-3dbc9aedd0d5"  # GPU 0, GPU instance 4 (3g.20gb @4)
    driver, pool = "gpu.nvidia.com", "node-a"
    kubelet.pods = [
        Pod(
            "dra-train",
            "ml",
            {"main": []},
            {
                "main": [
                    Claim(
                        "ml",
                        "one-gpu",
                        [(driver, pool, "gpu-1", ["k8s.gpu.nvidia.com/claim=u1-gpu-1"])],
                    )
                ]
            },
        ),
        Pod(
            "dra-infer",
            "serving",
            {"server": []},
            # GPU 0's GPU instance 1: profile 14 (2g.10gb), placement 0, size 2.
            {"server": [Claim("serving", "mig-2g", [(driver, pool, "gpu-0-mig-14-0-2", [])])]},
        ),
        Pod(
            "dra-cdi",
            "serving",
            {"main": []},
            {
                "main": [
                    Claim(
                        "serving",
                        "by-uuid",
                        [(driver, pool, "opaque-7", [f"nvidia.com/gpu={gi4_ci0}"])],
                    )
                ]
            },
        ),
        Pod(
            "fpga",
            "hw",
            {"main": []},
            {"main": [Claim("hw", "fpga", [("fpga.example.com", pool, "gpu-0", [])])]},
        ),
    ]
    kubelet.start()
    host = _host("a100-mig-mixed")
    try:
        snap = await _read(host, _enricher(kubelet))
    finally:
        host.close()
    got = {a.pod: a for a in snap.allocations}
    assert set(got) == {"dra-train", "dra-infer", "dra-cdi"}
    train = got["dra-train"]
    assert (train.resource, train.device_id) == (driver, "gpu-1")
    assert (train.kind, train.gpu_uuid) == ("gpu", WHOLE)
    assert (train.claim_namespace, train.claim_name) == ("ml", "one-gpu")
    infer = got["dra-infer"]
    assert (infer.kind, infer.gpu_instance_id, infer.compute_instance_id) == ("mig", 1, 0)
    assert infer.container == "server"
    cdi = got["dra-cdi"]
    assert (cdi.kind, cdi.gpu_instance_id, cdi.compute_instance_id) == ("mig", 4, 0)
    assert from_json(to_json(snap)) == snap

    series = samples_by_name(render(snap, options=ExportOptions(pod_series=True)).decode())
    info = {s[0]["pod"]: s[0] for s in series["vgpumon_gpu_allocation_info"]}
    assert info["dra-train"]["claim_name"] == "one-gpu" and info["dra-train"]["gpu"] == "1"
    assert info["dra-infer"]["gpu_instance"] == "1"
    util = {s[0]["pod"]: s[1] for s in series["vgpumon_pod_gpu_utilization_ratio"]}
    assert util["dra-train"] == snap.gpus[1].utilization.gpu
    memory = {s[0]["pod"]: s[1] for s in series["vgpumon_pod_gpu_memory_used_bytes"]}
    assert memory["dra-infer"] == snap.gpus[0].mig_instances[0].memory_used_bytes


def test_dra_gpu_names_follow_the_minor_number_not_the_index() -> None:
    from vgpumon.collect.enrich.pods import PodDevice, allocations
    from vgpumon.model import Gpu

    gpus = (
        Gpu(index=0, uuid="GPU-a", minor_number=3),
        Gpu(index=1, uuid="GPU-b", minor_number=0),
    )
    snap = Snapshot(timestamp=0, gpus=gpus)
    (alloc,) = allocations(snap, [PodDevice("gpu.nvidia.com", "gpu-0", "ns", "p")])
    assert alloc.gpu_uuid == "GPU-b"
