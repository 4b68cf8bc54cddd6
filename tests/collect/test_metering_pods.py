"""Pods of GPU processes from /proc/PID/cgroup, on a fake /proc and runtime state tree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from vgpumon.collect.metering import MeteringConfig, MeteringStage
from vgpumon.collect.podcgroups import (
    CgroupIdentity,
    ContainerName,
    PodResolver,
    parse_cgroup,
)
from vgpumon.model import DeviceAllocation, Gpu, Process, Snapshot

UID_A = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
UID_B = "6ba7b810-9dad-11d1-80b4-00c04fd430c8"
CID_A = "a" * 64
CID_B = "b" * 64
GIB = 1 << 30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # cgroup v2, systemd driver, containerd
        (
            "0::/kubepods.slice/kubepods-burstable.slice/"
            f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
            CgroupIdentity(UID_A, CID_A, "containerd"),
        ),
        # cgroup v2, systemd driver, CRI-O
        (
            "0::/kubepods.slice/kubepods-besteffort.slice/"
            f"kubepods-besteffort-pod{UID_B.replace('-', '_')}.slice/crio-{CID_B}.scope\n",
            CgroupIdentity(UID_B, CID_B, "cri-o"),
        ),
        # cgroup v1, systemd driver, Docker: any hierarchy's line names the container
        (
            "12:pids:/kubepods.slice/kubepods-pod"
            f"{UID_A.replace('-', '_')}.slice/docker-{CID_A}.scope\n"
            "11:memory:/kubepods.slice/kubepods-pod"
            f"{UID_A.replace('-', '_')}.slice/docker-{CID_A}.scope\n",
            CgroupIdentity(UID_A, CID_A, "docker"),
        ),
        # cgroup v1, cgroupfs driver: dashes, bare container id, no runtime prefix
        (
            f"4:devices:/kubepods/burstable/pod{UID_B}/{CID_B}\n1:name=systemd:/\n",
            CgroupIdentity(UID_B, CID_B, None),
        ),
        # kind / nested kubelet under its own slice
        (
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
            f"kubelet-kubepods-besteffort-pod{UID_A.replace('-', '_')}.slice/"
            f"cri-containerd-{CID_A}.scope\n",
            CgroupIdentity(UID_A, CID_A, "containerd"),
        ),
    ],
)
def test_cgroup_path_forms(text: str, expected: CgroupIdentity) -> None:
    assert parse_cgroup(text) == expected


@pytest.mark.parametrize(
    "text",
    ["0::/user.slice/user-1000.slice/session-3.scope\n", "0::/system.slice/ssh.service\n", ""],
)
def test_processes_outside_pods(text: str) -> None:
    assert parse_cgroup(text) is None


def _process(root: Path, pid: int, cgroup: str) -> None:
    d = root / "proc" / str(pid)
    d.mkdir(parents=True)
    (d / "cgroup").write_text(cgroup)
    stat = f"{pid} (python3) S" + " 0" * 17 + " 4242" + " 0" * 20
    (d / "stat").write_text(stat)


def _containerd_record(
    root: Path, cid: str, namespace: str, pod: str, container: str, uid: str | None = None
) -> None:
    """The bundle config containerd keeps for container ``cid`` (with the pod UID if given)."""
    annotations = {
        "io.kubernetes.cri.sandbox-namespace": namespace,
        "io.kubernetes.cri.sandbox-name": pod,
        "io.kubernetes.cri.container-name": container,
    }
    if uid is not None:
        annotations["io.kubernetes.cri.sandbox-uid"] = uid
    bundle = root / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / cid
    bundle.mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"annotations": annotations}))


def fake_host(tmp_path: Path) -> Path:
    """Two pods on one GPU: a containerd one (cgroup v2) and a CRI-O one (cgroup v1)."""
    _process(
        tmp_path,
        101,
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope\n",
    )
    _process(tmp_path, 202, f"9:memory:/kubepods/besteffort/pod{UID_B}/crio-{CID_B}.scope\n")
    _process(tmp_path, 303, "0::/system.slice/xorg.service\n")  # a host process, no pod
    _containerd_record(tmp_path, CID_A, "team-a", "trainer-0", "main")
    crio = tmp_path / "run/containers/storage/overlay-containers" / CID_B / "userdata"
    crio.mkdir(parents=True)
    (crio / "config.json").write_text(
        json.dumps(
            {
                "annotations": {
                    "io.kubernetes.pod.namespace": "team-b",
                    "io.kubernetes.pod.name": "infer-7c9",
                    "io.kubernetes.container.name": "server",
                }
            }
        )
    )
    return tmp_path


def _gpu(processes: tuple[Process, ...], energy: float) -> Gpu:
    return Gpu(index=0, uuid="GPU-0", processes=processes, energy_joules=energy)


def _snap(t: float, gpu: Gpu, allocations: tuple[DeviceAllocation, ...] = ()) -> Snapshot:
    return Snapshot(timestamp=t, gpus=(gpu,), allocations=allocations)


PROCESSES = (
    Process(pid=101, name="python3", used_memory_bytes=10 * GIB, sm_utilization=0.6),
    Process(pid=202, name="python3", used_memory_bytes=6 * GIB, sm_utilization=0.2),
    Process(pid=303, name="Xorg", used_memory_bytes=1 * GIB, sm_utilization=0.0),
)


def stage_for(root: Path) -> MeteringStage:
    config = MeteringConfig(proc=str(root / "proc"), host_root=str(root), host_pid=True)
    return MeteringStage(config)


def test_two_pods_on_one_gpu(tmp_path: Path) -> None:
    root = fake_host(tmp_path)
    stage = stage_for(root)
    snap = None
    for i in range(101):  # 100 s at 1 s, the GPU at a constant 250 W
        snap = stage.apply(_snap(float(i), _gpu(PROCESSES, 1000.0 + 250.0 * i)))
    assert snap is not None and snap.gpus[0].metering is not None
    m = snap.gpus[0].metering
    pods = {(p.namespace, p.pod, p.container): p.usage for p in m.pods}
    assert set(pods) == {("team-a", "trainer-0", "main"), ("team-b", "infer-7c9", "server")}
    a, b = pods[("team-a", "trainer-0", "main")], pods[("team-b", "infer-7c9", "server")]
    assert a.busy_seconds == pytest.approx(60.0)
    assert b.busy_seconds == pytest.approx(20.0)
    assert a.memory_byte_seconds == pytest.approx(10 * GIB * 100)
    # Energy: 25 000 J over 100 s. Busy time is 80 % of the interval: 0.6 and 0.2 of it go to
    # the pods; the idle 20 % is shared by memory held (10, 6 and 1 GiB; Xorg is no pod).
    assert m.energy_joules_metered == pytest.approx(25_000.0)
    expected_a = 25_000.0 * (0.6 + 0.2 * 10 / 17)
    expected_b = 25_000.0 * (0.2 + 0.2 * 6 / 17)
    assert a.energy_joules == pytest.approx(expected_a)
    assert b.energy_joules == pytest.approx(expected_b)
    unattributed = m.unattributed_energy_joules["pod"]
    assert unattributed == pytest.approx(25_000.0 * 0.2 / 17)
    total = (a.energy_joules or 0) + (b.energy_joules or 0) + unattributed
    assert total == pytest.approx(m.energy_joules_metered, rel=1e-9)
    by_pid = {p.pid: p for p in m.processes}
    assert (by_pid[101].namespace, by_pid[101].pod) == ("team-a", "trainer-0")
    assert by_pid[303].pod is None
    assert all(p.alive for p in m.processes)
    assert m.dead_holders == 0


def _pod_logs(root: Path, *pods: tuple[str, str, str]) -> None:
    """The kubelet's /var/log/pods/NAMESPACE_NAME_UID directories."""
    for namespace, pod, uid in pods:
        (root / "var/log/pods" / f"{namespace}_{pod}_{uid}").mkdir(parents=True)


def test_pod_named_from_pod_resources_when_the_runtime_has_no_record(tmp_path: Path) -> None:
    root = fake_host(tmp_path)
    bundle = root / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / CID_A / "config.json"
    bundle.unlink()
    _pod_logs(root, ("team-a", "trainer-0", UID_A))  # what ties the process's pod UID to a name
    alloc = DeviceAllocation(
        resource="nvidia.com/gpu",
        device_id="GPU-0",
        namespace="team-a",
        pod="trainer-0",
        container="main",
        gpu_uuid="GPU-0",
    )
    stage = stage_for(root)
    gpu = _gpu(PROCESSES[:1], 0.0)
    stage.apply(_snap(0.0, gpu, (alloc,)))
    snap = stage.apply(_snap(1.0, gpu, (alloc,)))
    m = snap.gpus[0].metering
    assert m is not None
    assert [(p.namespace, p.pod, p.container) for p in m.pods] == [("team-a", "trainer-0", "main")]


def test_resolver_names_one_container_of_several(tmp_path: Path) -> None:
    resolver = PodResolver(str(fake_host(tmp_path) / "proc"), str(tmp_path))
    ident, names = resolver.resolve(
        202, [ContainerName("x", "y", "z"), ContainerName("p", "q", "r")]
    )
    assert ident is not None and ident.pod_uid == UID_B
    assert names == ContainerName("team-b", "infer-7c9", "server")


def test_dead_holder(tmp_path: Path) -> None:
    root = fake_host(tmp_path)
    stage = stage_for(root)
    gone = Process(pid=999, name="crashed", used_memory_bytes=4 * GIB, sm_utilization=0.0)
    snap = stage.apply(_snap(0.0, _gpu((*PROCESSES, gone), 0.0)))
    m = snap.gpus[0].metering
    assert m is not None
    assert m.dead_holders == 1 and m.dead_holder_memory_bytes == 4 * GIB
    assert {p.pid for p in m.processes if p.alive is False} == {999}


def test_without_the_host_pid_namespace_nothing_is_called_dead(tmp_path: Path) -> None:
    config = MeteringConfig(proc=str(tmp_path / "proc"), host_pid=False)
    snap = MeteringStage(config).apply(_snap(0.0, _gpu(PROCESSES, 0.0)))
    m = snap.gpus[0].metering
    assert m is not None and m.dead_holders is None
    assert all(p.alive is None for p in m.processes)


def test_process_idle_holder_seconds() -> None:
    stage = MeteringStage()
    snap = None
    for i in range(11):
        snap = stage.apply(_snap(float(i), _gpu(PROCESSES, 0.0)))
    assert snap is not None and snap.gpus[0].metering is not None
    idle = {p.pid: p.idle_seconds for p in snap.gpus[0].metering.processes}
    assert idle == {101: 0.0, 202: 0.0, 303: 10.0}


def test_a_new_entity_starts_at_zero() -> None:
    stage = MeteringStage()
    old = Process(pid=5, name="a", used_memory_bytes=GIB, sm_utilization=1.0)
    for i in range(5):
        stage.apply(_snap(float(i), _gpu((old,), 0.0)))
    # PID 5 exits; a new process under the same PID and another name appears.
    new = Process(pid=5, name="b", used_memory_bytes=GIB, sm_utilization=1.0)
    snap = stage.apply(_snap(5.0, _gpu((new,), 0.0)))
    m = snap.gpus[0].metering
    assert m is not None
    assert [p.usage.busy_seconds for p in m.processes] == [pytest.approx(1.0)]


def _mountinfo(root: Path, pid: int, uid: str, container: str) -> None:
    # The kubelet's termination-log bind mount, as /proc/PID/mountinfo shows it.
    (root / "proc" / str(pid) / "mountinfo").write_text(
        "1510 1492 0:412 / / rw,relatime - overlay overlay rw,lowerdir=/x\n"
        f"1530 1510 253:1 /var/lib/kubelet/pods/{uid}/containers/{container}/8f1c2b3a "
        "/dev/termination-log rw,relatime - ext4 /dev/vda1 rw\n"
    )


def _allocation(namespace: str, pod: str, container: str) -> DeviceAllocation:
    return DeviceAllocation(
        resource="nvidia.com/gpu",
        device_id="GPU-0::0",
        namespace=namespace,
        pod=pod,
        container=container,
        gpu_uuid="GPU-0",
    )


def test_two_pods_named_without_runtime_records(tmp_path: Path) -> None:
    """Runtime records unreadable (root's): pod-resources plus each process's container name."""
    root = fake_host(tmp_path)
    shutil.rmtree(root / "run")
    _mountinfo(root, 101, UID_A, "main")
    _mountinfo(root, 202, UID_B, "server")
    allocations = (
        _allocation("team-a", "trainer-0", "main"),
        _allocation("team-b", "infer-7c9", "server"),
    )
    stage = stage_for(root)
    stage.apply(_snap(0.0, _gpu(PROCESSES, 0.0), allocations))
    snap = stage.apply(_snap(1.0, _gpu(PROCESSES, 250.0), allocations))
    m = snap.gpus[0].metering
    assert m is not None
    pods = {(p.namespace, p.pod, p.container): p.usage.busy_seconds for p in m.pods}
    assert pods == {
        ("team-a", "trainer-0", "main"): pytest.approx(0.6),
        ("team-b", "infer-7c9", "server"): pytest.approx(0.2),
    }


def test_ambiguous_containers_stay_unattributed(tmp_path: Path) -> None:
    """Two pods whose containers share a name: never guessed, their energy is unattributed."""
    root = fake_host(tmp_path)
    shutil.rmtree(root / "run")
    _mountinfo(root, 101, UID_A, "main")
    _mountinfo(root, 202, UID_B, "main")
    allocations = (_allocation("team-a", "a", "main"), _allocation("team-b", "b", "main"))
    stage = stage_for(root)
    stage.apply(_snap(0.0, _gpu(PROCESSES, 0.0), allocations))
    snap = stage.apply(_snap(1.0, _gpu(PROCESSES, 250.0), allocations))
    m = snap.gpus[0].metering
    assert m is not None and m.pods == ()
    assert m.unattributed_energy_joules["pod"] == pytest.approx(250.0)


def test_longest_idle_holder_is_zero_with_no_processes_and_absent_without_a_list() -> None:
    stage = MeteringStage()
    none_running = stage.apply(_snap(0.0, _gpu((), 0.0))).gpus[0].metering
    assert none_running is not None and none_running.longest_idle_holder_seconds == 0.0
    unreadable = Gpu(index=0, uuid="GPU-9", processes=None)
    m = stage.apply(Snapshot(timestamp=1.0, gpus=(unreadable,))).gpus[0].metering
    assert m is not None and m.longest_idle_holder_seconds is None


# -- issue 33, finding 6: billing cannot be redirected to another pod ---------------------------


def test_a_sub_cgroup_named_after_another_pods_container_is_not_billed_to_it(
    tmp_path: Path,
) -> None:
    """A process of pod A makes a cgroup below its own (delegation lets it) named after pod B's
    container: the container id was read from the last component, so A's usage went to B."""
    root = fake_host(tmp_path)
    _process(
        root,
        404,
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{CID_A}.scope/"
        f"cri-containerd-{CID_B}.scope\n",
    )
    # B's record as containerd would keep it, had B been a containerd pod too.
    _containerd_record(root, CID_B, "team-b", "infer-7c9", "server", uid=UID_B)
    ident, names = PodResolver(str(root / "proc"), str(root)).resolve(404)
    assert ident == CgroupIdentity(UID_A, CID_A, "containerd")
    assert names == ContainerName("team-a", "trainer-0", "main")


def test_a_runtime_record_of_another_pod_is_not_believed(tmp_path: Path) -> None:
    """The record found for the container names a pod whose UID is not the process's own pod
    cgroup's: the process is left unattributed."""
    root = fake_host(tmp_path)
    bundle = root / "run/containerd/io.containerd.runtime.v2.task/k8s.io" / CID_A / "config.json"
    doc = json.loads(bundle.read_text())
    doc["annotations"]["io.kubernetes.cri.sandbox-uid"] = UID_B
    bundle.write_text(json.dumps(doc))
    _ident, names = PodResolver(str(root / "proc"), str(root)).resolve(101)
    assert names is None
    doc["annotations"]["io.kubernetes.cri.sandbox-uid"] = UID_A
    bundle.write_text(json.dumps(doc))
    _ident, names = PodResolver(str(root / "proc"), str(root)).resolve(101)
    assert names == ContainerName("team-a", "trainer-0", "main")


def test_a_gpu_given_to_another_pod_is_not_billed_for_this_ones_process(tmp_path: Path) -> None:
    """Runtime records unreadable; the GPU is given to pod B's container "main" only, and a
    process of pod A whose container is also "main" uses it: by name alone it went to B."""
    root = fake_host(tmp_path)
    shutil.rmtree(root / "run")
    _mountinfo(root, 101, UID_A, "main")
    _pod_logs(root, ("team-a", "trainer-0", UID_A), ("team-b", "infer-7c9", UID_B))
    resolver = PodResolver(str(root / "proc"), str(root))
    only_b = [ContainerName("team-b", "infer-7c9", "main")]
    assert resolver.resolve(101, only_b)[1] is None
    both = [*only_b, ContainerName("team-a", "trainer-0", "main")]
    assert resolver.resolve(101, both)[1] == ContainerName("team-a", "trainer-0", "main")


def test_a_process_that_nothing_ties_to_a_pod_is_not_given_the_only_one(tmp_path: Path) -> None:
    """No runtime record, no container name in its mounts, no readable pod logs: the process
    was billed to the only container the GPU is given to, whichever pod it was in."""
    root = fake_host(tmp_path)
    shutil.rmtree(root / "run")
    resolver = PodResolver(str(root / "proc"), str(root))
    assert resolver.resolve(101, [ContainerName("team-b", "infer-7c9", "server")])[1] is None
