"""A kubelet stand-in: the pod-resources v1 gRPC service on a unix socket, from fixtures.

The server is real gRPC built on the generated stubs (``PodResourcesListerServicer``); tests
change what it answers (``pods``, ``allocatable``), how late (``delay``) or stop it. A second kind
of server answers bytes that are not a valid message, for the malformed-answer tests.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import pytest
from ci_helpers import optional_binding

# The stubs refuse to import under a grpcio (or protobuf) older than the one that generated them:
# then these tests skip like any test of a missing extra (fail under CI=true), not a collection
# error of every test module that imports this one.
grpc = optional_binding("grpc", "kubernetes")
api_pb2 = optional_binding("vgpumon.collect.enrich.podresources.api_pb2", "kubernetes")
api_pb2_grpc = optional_binding("vgpumon.collect.enrich.podresources.api_pb2_grpc", "kubernetes")


@dataclass
class Claim:
    """A DRA ResourceClaim a container holds: (driver, pool, device, CDI names) per device."""

    namespace: str
    name: str
    devices: list[tuple[str, str, str, list[str]]]

    def message(self) -> Any:
        return api_pb2.DynamicResource(
            claim_name=self.name,
            claim_namespace=self.namespace,
            claim_resources=[
                api_pb2.ClaimResource(
                    driver_name=driver,
                    pool_name=pool,
                    device_name=device,
                    cdi_devices=[api_pb2.CDIDevice(name=c) for c in cdi],
                )
                for driver, pool, device, cdi in self.devices
            ],
        )


@dataclass
class Pod:
    name: str
    namespace: str
    containers: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    claims: dict[str, list[Claim]] = field(default_factory=dict)  # container -> DRA claims

    def message(self) -> Any:
        return api_pb2.PodResources(
            name=self.name,
            namespace=self.namespace,
            containers=[
                api_pb2.ContainerResources(
                    name=cname,
                    devices=[
                        api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                        for r, ids in devices
                    ],
                    dynamic_resources=[c.message() for c in self.claims.get(cname, [])],
                )
                for cname, devices in self.containers.items()
            ],
        )


def pod(name: str, namespace: str, resource: str, *ids: str, container: str = "main") -> Pod:
    return Pod(name, namespace, {container: [(resource, list(ids))]})


class Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> Any:  # the gRPC method name
        self.kubelet.wait()
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[p.message() for p in self.kubelet.pods]
        )

    def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        if self.kubelet.allocatable is None:  # an old kubelet without the call
            return super().GetAllocatableResources(request, context)
        self.kubelet.wait()
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in self.kubelet.allocatable
            ]
        )


class FakeKubelet:
    """Serves pod resources on ``path`` until :meth:`stop`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pods: list[Pod] = []
        self.allocatable: list[tuple[str, list[str]]] | None = []
        self.delay = 0.0
        self._release = threading.Event()
        self.server: Any = None

    def wait(self) -> None:
        if self.delay:
            self._release.wait(self.delay)

    def start(self, *, garbage: bool = False) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        if garbage:
            server.add_generic_rpc_handlers((_garbage_handler(),))
        else:
            api_pb2_grpc.add_PodResourcesListerServicer_to_server(Servicer(self), server)
        server.add_insecure_port(f"unix:{self.path}")
        server.start()
        self.server = server
        return self

    def stop(self, *, remove: bool = True) -> None:
        self._release.set()
        if self.server is not None:
            self.server.stop(grace=None).wait()
            self.server = None
        self._release.clear()
        if remove and os.path.exists(self.path):
            os.unlink(self.path)


def _garbage_handler() -> Any:
    """Answers every call with bytes that do not decode as any pod-resources message."""

    def answer(request: bytes, context: Any) -> bytes:
        return b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"

    handler = grpc.unary_unary_rpc_method_handler(
        answer, request_deserializer=None, response_serializer=None
    )
    return grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": handler, "GetAllocatableResources": handler}
    )


@pytest.fixture
def socket_dir() -> Iterator[str]:
    # A short path: unix socket paths are limited to about 100 bytes.
    path = tempfile.mkdtemp(prefix="vgk", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)
