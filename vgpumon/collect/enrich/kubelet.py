"""Pods, namespaces and containers of GPUs, MIG devices and vGPUs, from the kubelet.

The kubelet serves its pod-resources v1 gRPC API on a unix socket
(``/var/lib/kubelet/pod-resources/kubelet.sock``). On its own thread the enricher calls ``List``
(which container holds which device) and ``GetAllocatableResources`` (every device the node
offers) every ``interval_seconds``, each call bounded by ``timeout_seconds``, and keeps the
devices of the configured resource names (:mod:`vgpumon.collect.enrich.pods` matches them to the
snapshot at the end of each cycle).

* No socket at start: the node is not a Kubernetes node; the enricher stays off (one log line, no
  success series) until the socket appears.
* The socket vanishes, the kubelet answers late, garbage or an error: the last devices stay (pods
  keep their devices across a kubelet restart) and ``vgpumon_scrape_collector_success
  {collector="kubelet"}`` is 0 until a read works again; the channel is rebuilt for that read, so
  a restarted kubelet is found at once rather than after gRPC's reconnect backoff.

gRPC is the optional ``kubernetes`` extra, imported only when the enricher is configured.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import os
import stat
import time
from dataclasses import dataclass
from typing import Any

from vgpumon.collect.enrich import DEFAULT_KUBELET_SOCKET, DEFAULT_KUBERNETES_RESOURCES, KUBELET
from vgpumon.collect.enrich.base import Refresher
from vgpumon.collect.enrich.kubeapi import DOMAIN_ANNOTATION, ApiServer
from vgpumon.collect.enrich.pods import PodDevice, merge, pod_devices, vm_name_of
from vgpumon.errors import ConfigError
from vgpumon.install_hints import install_hint
from vgpumon.model import Snapshot

log = logging.getLogger(__name__)

NAME = KUBELET
DEFAULT_SOCKET = DEFAULT_KUBELET_SOCKET
DEFAULT_RESOURCES = DEFAULT_KUBERNETES_RESOURCES


@dataclass(frozen=True)
class KubeletConfig:
    socket: str = DEFAULT_SOCKET
    resources: tuple[str, ...] = DEFAULT_RESOURCES
    interval_seconds: float = 10.0
    timeout_seconds: float = 2.0  # per gRPC call (and per API server request)
    # Ask the API server (in-cluster) for virt-launcher pods' kubevirt.io/domain annotation.
    kubevirt_api: bool = False


# New virt-launcher pods asked about per read: a node starting many VMs at once is named over a
# few reads instead of holding one read for minutes.
MAX_LOOKUPS_PER_READ = 20


@dataclass(frozen=True)
class _Read:
    """What the last refresh found; ``present`` False: no socket has ever been seen."""

    devices: tuple[PodDevice, ...] = ()
    present: bool = True


def binding() -> tuple[Any, Any, Any]:
    """``(grpc, api_pb2, api_pb2_grpc)``, or a :class:`ConfigError` saying how to install them."""
    try:
        grpc = importlib.import_module("grpc")
        pb2 = importlib.import_module("vgpumon.collect.enrich.podresources.api_pb2")
        pb2_grpc = importlib.import_module("vgpumon.collect.enrich.podresources.api_pb2_grpc")
    except Exception as exc:
        # grpcio than the stubs' raises RuntimeError, an older protobuf its VersionError
        raise ConfigError(
            f"kubelet enrichment needs gRPC ({exc}): {install_hint('kubernetes')}"
        ) from exc
    return grpc, pb2, pb2_grpc


def _is_socket(path: str) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


class KubeletEnricher:
    """Attaches pods to devices; see the module docstring."""

    name = NAME

    def __init__(
        self, config: KubeletConfig | None = None, *, api: ApiServer | None = None
    ) -> None:
        self.config = config or KubeletConfig()
        self._grpc, self._pb2, self._pb2_grpc = binding()
        if api is None and self.config.kubevirt_api:
            api = ApiServer.in_cluster()
        self._api = api
        self._vm_names: dict[tuple[str, str], str | None] = {}
        self._api_failing = False
        self._channel: Any = None
        self._seen = False
        self._refresher: Refresher[_Read] = Refresher(
            NAME,
            self._fetch,
            interval=self.config.interval_seconds,
            # Two gRPC calls and the API server's share (one more timeout), plus slack.
            timeout=self.config.timeout_seconds * 3 + 1.0,
        )

    # ------------------------------------------------------------------ Enricher

    def start(self) -> None:
        self._refresher.start()

    def apply(self, snapshot: Snapshot) -> Snapshot:
        read = self._refresher.result
        if read is None or not read.present:
            return snapshot
        return merge(snapshot, read.devices)

    def status(self) -> bool | None:
        read = self._refresher.result
        if read is not None and not read.present and self._refresher.ok():
            return None  # off: not a Kubernetes node (yet)
        return self._refresher.ok()

    def close(self) -> None:
        self._refresher.stop()
        self._drop()

    def settled(self) -> bool:
        return self._refresher.settled()

    @property
    def refreshes(self) -> int:
        return self._refresher.refreshes

    @property
    def devices(self) -> tuple[PodDevice, ...]:
        read = self._refresher.result
        return read.devices if read is not None else ()

    # ------------------------------------------------------------------ the enricher's thread

    def _fetch(self) -> _Read:
        path = self.config.socket
        if not _is_socket(path):
            if not self._seen:
                if self._refresher.result is None:
                    log.info("no kubelet pod-resources socket at %s: pod names are off", path)
                return _Read(present=False)
            self._drop()
            raise FileNotFoundError(f"kubelet pod-resources socket {path} is gone")
        if not self._seen:
            log.info("reading pods from the kubelet at %s", path)
        self._seen = True
        try:
            devices = self._read()
        except Exception:
            self._drop()  # a fresh channel next time: no reconnect backoff after a restart
            raise
        return _Read(self._name_vms(devices))

    def _name_vms(self, devices: tuple[PodDevice, ...]) -> tuple[PodDevice, ...]:
        """virt-launcher pods' VM names from the API server, asked once per pod.

        Optional: a failing API server costs only the exact names (the pod-name guess stays), not
        the kubelet's success series.
        """
        if self._api is None:
            return devices
        pods = {
            (d.namespace, d.pod) for d in devices if d.namespace and d.pod and vm_name_of(d.pod)
        }
        self._vm_names = {k: v for k, v in self._vm_names.items() if k in pods}
        # All the lookups of one read share one timeout, so a slow API server cannot hold the read.
        deadline = time.monotonic() + self.config.timeout_seconds
        for key in sorted(pods - self._vm_names.keys())[:MAX_LOOKUPS_PER_READ]:
            left = deadline - time.monotonic()
            if left <= 0:
                break  # the rest next read
            try:
                self._vm_names[key] = self._api.pod_annotation(*key, DOMAIN_ANNOTATION, left)
            except (OSError, ValueError) as exc:
                (log.debug if self._api_failing else log.warning)(
                    "kubelet enricher: API server: %s", exc
                )
                self._api_failing = True
                break  # ask again next read
            else:
                self._api_failing = False
        return tuple(
            dataclasses.replace(d, vm_name=self._vm_names.get((d.namespace, d.pod)))
            if d.namespace and d.pod and self._vm_names.get((d.namespace, d.pod))
            else d
            for d in devices
        )

    def _read(self) -> tuple[PodDevice, ...]:
        if self._channel is None:
            self._channel = self._grpc.insecure_channel(f"unix://{self.config.socket}")
        stub = self._pb2_grpc.PodResourcesListerStub(self._channel)
        timeout = self.config.timeout_seconds
        listed = stub.List(self._pb2.ListPodResourcesRequest(), timeout=timeout)
        try:
            allocatable = stub.GetAllocatableResources(
                self._pb2.AllocatableResourcesRequest(), timeout=timeout
            )
        except self._grpc.RpcError as exc:
            if exc.code() != self._grpc.StatusCode.UNIMPLEMENTED:
                raise
            allocatable = None  # kubelets before 1.23 without the feature gate
        return pod_devices(listed, allocatable, self.config.resources)

    def _drop(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
