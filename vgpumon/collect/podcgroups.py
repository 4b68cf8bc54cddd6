"""Which Kubernetes container a GPU process runs in: ``/proc/PID/cgroup``, then the runtime's names.

NVML lists the host PIDs that hold a GPU; on a GPU shared by time-slicing or MPS several pods'
processes share one device, and the kubelet's pod-resources API (which names the pods a device is
given to) cannot tell them apart. The process's cgroup can:

* cgroup v2 has one line ``0::PATH``; v1 has one line per hierarchy (``N:controllers:PATH``), and
  any hierarchy's path carries the same pod and container;
* the kubelet's path holds the pod UID (``pod<uid>``; the systemd driver writes its dashes as
  underscores: ``kubepods-burstable-pod<uid_with_underscores>.slice``) and the runtime's last
  component the container id: ``cri-containerd-<id>.scope`` (containerd), ``crio-<id>.scope``
  (CRI-O), ``docker-<id>.scope`` (Docker) under the systemd driver, or the bare 64-hex id under
  the cgroupfs driver.

The container id is then named from the runtime's own record of the container, the annotations
the kubelet's CRI call put on it (containerd's OCI bundle ``config.json``, CRI-O's
``userdata/config.json``, Docker's ``config.v2.json`` labels). Where those files are not
readable (they are root's), the kubelet's pod-resources names the containers each GPU is given
to, and the process's ``/proc/PID/mountinfo`` (readable by anyone) the container's own name: the
kubelet mounts ``/var/lib/kubelet/pods/<uid>/containers/<name>/...`` as its termination log. A
process maps to the one allocated container of that name on its GPU, or to the only container
on it (:func:`name_from_allocations`). Reading needs the host PID namespace (``hostPID`` in the
DaemonSet; docs/metering.md, "Pods").
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

# The kubelet's pod UID in a cgroup path, with dashes (cgroupfs driver) or underscores (systemd).
_POD_RE = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
# The runtime's container scope (systemd driver) or bare id (cgroupfs driver).
_CONTAINER_RE = re.compile(r"^(?:(cri-containerd|crio|docker)-)?([0-9a-f]{64})(?:\.scope)?$")
_RUNTIMES = {"cri-containerd": "containerd", "crio": "cri-o", "docker": "docker", None: None}
MAX_CGROUP_BYTES = 64 * 1024  # a process's cgroup file is a few hundred bytes
MAX_MOUNTINFO_BYTES = 1 << 20  # a container's mount table is a few kB
# The kubelet's per-container directory in a mount's root (the termination log's source).
_KUBELET_CONTAINER_RE = re.compile(r"/pods/([0-9a-f-]{36})/containers/([^/\s]+)/")

# Where each runtime keeps a container's record, relative to the host root, and the annotation
# (or label) keys of the names the kubelet gave it: (namespace, pod, container).
CONTAINERD_BUNDLE = "run/containerd/io.containerd.runtime.v2.task/k8s.io/{id}/config.json"
CRIO_CONFIG = "run/containers/storage/overlay-containers/{id}/userdata/config.json"
DOCKER_CONFIG = "var/lib/docker/containers/{id}/config.v2.json"
CRI_KEYS = (
    "io.kubernetes.cri.sandbox-namespace",
    "io.kubernetes.cri.sandbox-name",
    "io.kubernetes.cri.container-name",
)
KUBE_KEYS = (
    "io.kubernetes.pod.namespace",
    "io.kubernetes.pod.name",
    "io.kubernetes.container.name",
)
# The pod UID the kubelet put on the record (containerd's annotation; CRI-O's and Docker's):
# a record whose UID is not the one of the process's own pod cgroup names another pod.
CRI_UID_KEY = "io.kubernetes.cri.sandbox-uid"
KUBE_UID_KEY = "io.kubernetes.pod.uid"
# The kubelet's log directory of each pod on the node: NAMESPACE_NAME_UID (neither a namespace
# nor a pod name may hold "_"). It ties a pod UID to the pod's names.
POD_LOGS = "var/log/pods"
POD_LOGS_REREAD_SECONDS = 10.0


@dataclass(frozen=True)
class CgroupIdentity:
    """What a process's cgroup says: its pod's UID, its container's id and runtime."""

    pod_uid: str | None
    container_id: str | None
    runtime: str | None  # containerd | cri-o | docker | None (cgroupfs driver: not in the path)


@dataclass(frozen=True)
class ContainerName:
    namespace: str
    pod: str
    container: str


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """The pod and container of a ``/proc/PID/cgroup`` text; None for a process outside a pod.

    The pod is the first component that names one, the container the component right below it:
    both are made by the kubelet and the runtime, not by the process. A process may make cgroups
    below its own (cgroup delegation) and name them as it likes, after another pod's container
    for one: what lies deeper than the container's own cgroup is never read.
    """
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        components = parts[2].strip("/").split("/")
        for i, component in enumerate(components):
            pod = _POD_RE.search(component)
            if pod is None:
                continue
            container_id = runtime = None
            below = components[i + 1] if i + 1 < len(components) else ""
            match = _CONTAINER_RE.match(below)
            if match is not None:
                runtime = _RUNTIMES.get(match.group(1))
                container_id = match.group(2)
            return CgroupIdentity(pod.group(1).replace("_", "-"), container_id, runtime)
    return None


def _read(path: str, limit: int) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read(limit)
    except OSError:
        return None


def _names(mapping: object, keys: tuple[str, str, str]) -> ContainerName | None:
    if not isinstance(mapping, dict):
        return None
    values = [mapping.get(k) for k in keys]
    if not all(isinstance(v, str) and v for v in values):
        return None
    namespace, pod, container = (str(v) for v in values)
    return ContainerName(namespace, pod, container)


def _uid(mapping: object, key: str) -> str | None:
    value = mapping.get(key) if isinstance(mapping, dict) else None
    return value if isinstance(value, str) and value else None


class PodResolver:
    """Maps host PIDs to Kubernetes containers; caches per (PID, start time) and container id.

    ``proc`` is the host's ``/proc`` (seen from the host PID namespace) and ``host_root`` the
    directory under which the runtimes' state paths are found. Both are parameters so that tests
    run on a fake tree.
    """

    MAX_CACHE = 4096  # PIDs and containers remembered; a busy node's GPU processes fit easily

    def __init__(self, proc: str = "/proc", host_root: str = "/") -> None:
        self.proc = proc
        self.host_root = host_root
        self._pids: dict[tuple[int, str], CgroupIdentity | None] = {}
        self._containers: dict[str, tuple[ContainerName, str | None]] = {}
        self._pods: dict[str, tuple[str, str]] | None = None  # UID -> (namespace, pod)
        self._pods_read_at = -POD_LOGS_REREAD_SECONDS
        self._clock = time.monotonic

    def exists(self, pid: int) -> bool:
        return os.path.exists(os.path.join(self.proc, str(pid)))

    def identity(self, pid: int) -> CgroupIdentity | None:
        # The start time tells a reused PID from the process first seen under it.
        stat = _read(os.path.join(self.proc, str(pid), "stat"), 4096)
        started = stat.rsplit(")", 1)[-1].split()[19] if stat and ")" in stat else ""
        key = (pid, started)
        if key in self._pids:
            return self._pids[key]
        text = _read(os.path.join(self.proc, str(pid), "cgroup"), MAX_CGROUP_BYTES)
        found = parse_cgroup(text) if text is not None else None
        if len(self._pids) >= self.MAX_CACHE:
            self._pids.clear()
        self._pids[key] = found
        return found

    def container(self, container_id: str, pod_uid: str | None = None) -> ContainerName | None:
        """The names the kubelet gave a container, from the runtime's record of it; None when the
        record names a pod other than ``pod_uid`` (the UID of the process's own pod cgroup)."""
        found = self._containers.get(container_id)
        if found is None:
            found = self._from_runtime(container_id)
            if len(self._containers) >= self.MAX_CACHE:
                self._containers.clear()
            if found is not None:  # not found yet may be a container still being created
                self._containers[container_id] = found
        if found is None:
            return None
        names, uid = found
        if pod_uid is not None and uid is not None and uid != pod_uid:
            return None
        return names

    def _from_runtime(self, container_id: str) -> tuple[ContainerName, str | None] | None:
        for template, path, keys, uid_key in (
            (CONTAINERD_BUNDLE, ("annotations",), CRI_KEYS, CRI_UID_KEY),
            (CRIO_CONFIG, ("annotations",), KUBE_KEYS, KUBE_UID_KEY),
            (DOCKER_CONFIG, ("Config", "Labels"), KUBE_KEYS, KUBE_UID_KEY),
        ):
            text = _read(os.path.join(self.host_root, template.format(id=container_id)), 1 << 22)
            if text is None:
                continue
            try:
                node: object = json.loads(text)
            except (ValueError, RecursionError):
                continue
            for step in path:
                node = node.get(step) if isinstance(node, dict) else None
            names = _names(node, keys)
            if names is not None:
                return names, _uid(node, uid_key)
        return None

    def pod_of(self, pod_uid: str) -> tuple[str, str] | None:
        """(namespace, pod) of a pod UID from the kubelet's log directories; None where they
        cannot be read or do not name it (read again at most every few seconds on a miss)."""
        pods = self._pods
        now = self._clock()
        if (pods is None or pod_uid not in pods) and (
            now - self._pods_read_at >= POD_LOGS_REREAD_SECONDS
        ):
            self._pods_read_at = now
            self._pods = pods = self._read_pod_logs()
        return None if pods is None else pods.get(pod_uid)

    def _read_pod_logs(self) -> dict[str, tuple[str, str]] | None:
        try:
            entries = os.listdir(os.path.join(self.host_root, POD_LOGS))
        except OSError:
            return None
        out: dict[str, tuple[str, str]] = {}
        for entry in entries:
            parts = entry.split("_")
            if len(parts) == 3 and all(parts):
                out[parts[2]] = (parts[0], parts[1])
        return out

    def container_name(self, pid: int, pod_uid: str) -> str | None:
        """The container's name the kubelet's mounts into it carry, from /proc/PID/mountinfo."""
        text = _read(os.path.join(self.proc, str(pid), "mountinfo"), MAX_MOUNTINFO_BYTES)
        for line in (text or "").splitlines():
            fields = line.split(" ", 4)
            match = _KUBELET_CONTAINER_RE.search(fields[3]) if len(fields) > 3 else None
            if match and match.group(1) == pod_uid:
                return match.group(2)
        return None

    def resolve(
        self, pid: int, allocated: Iterable[ContainerName] = ()
    ) -> tuple[CgroupIdentity | None, ContainerName | None]:
        """The process's cgroup identity and, where it can be named, its container.

        Every name is cross-checked against the pod UID of the process's own pod cgroup: a
        runtime record must carry that UID (where it carries one), and a container pod-resources
        gives the GPU to must be of that pod (by the kubelet's log directories, where readable)
        and of the container name the process's own mounts carry (which hold that UID). A
        process that can be tied to its pod by neither is not named: its usage stays
        unattributed rather than billed to whichever pod holds the GPU.
        """
        ident = self.identity(pid)
        if ident is None:
            return None, None
        uid = ident.pod_uid
        names = self.container(ident.container_id, uid) if ident.container_id else None
        if names is None and uid is not None:
            candidates = list(allocated)
            name = self.container_name(pid, uid)
            if name is not None:
                candidates = [c for c in candidates if c.container == name]
            pod = self.pod_of(uid)
            if pod is not None:
                candidates = [c for c in candidates if (c.namespace, c.pod) == pod]
            elif name is None:
                candidates = []  # nothing ties the process to one of the GPU's pods
            names = name_from_allocations(candidates)
        return ident, names


def name_from_allocations(allocated: Iterable[ContainerName]) -> ContainerName | None:
    """The one container pod-resources gives the process's GPU to, if there is exactly one."""
    distinct = set(allocated)
    return next(iter(distinct)) if len(distinct) == 1 else None


# The inode of the initial PID namespace is fixed in the kernel (PROC_PID_INIT_INO): a process
# whose own PID namespace has it sees the host's PIDs, so a PID NVML lists and /proc lacks is gone.
INIT_PID_NAMESPACE = "pid:[4026531836]"


def in_host_pid_namespace(proc: str = "/proc") -> bool:
    try:
        return os.readlink(os.path.join(proc, "self", "ns", "pid")) == INIT_PID_NAMESPACE
    except OSError:
        return False
