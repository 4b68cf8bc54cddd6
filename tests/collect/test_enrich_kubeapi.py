"""KubeVirt VM names from the API server's kubevirt.io/domain annotation (in-cluster, over TLS)."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import os
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trustme
from enrich_helpers import wait_for
from kubelet_helpers import FakeKubelet, pod, socket_dir  # noqa: F401 - fixture
from vgpu_helpers import by_id

from vgpumon.collect.enrich.kubeapi import ApiServer
from vgpumon.collect.enrich.kubelet import KubeletConfig, KubeletEnricher
from vgpumon.errors import ConfigError
from vgpumon.testing import sim_host

MDEV_3 = "fe4138f0-efff-9274-4579-142902701cd9"  # kvm-vgpu-timesliced vGPU 3
# KubeVirt cut the VM name to fit the pod name; the annotation has all of it.
POD = "virt-launcher-win11-desktop-for-the-design-te-x7k2p"
FULL = "win11-desktop-for-the-design-team-in-building-seven"


class _Api(http.server.BaseHTTPRequestHandler):
    pods: ClassVar[dict[str, dict[str, Any]]] = {}
    status = 200
    delay = 0.0
    requests: ClassVar[list[str]] = []
    raw: ClassVar[bytes | None] = None  # an answer as it is

    def do_GET(self) -> None:
        _Api.requests.append(self.path)
        if _Api.delay:
            time.sleep(_Api.delay)
        if self.headers.get("Authorization") != "Bearer secret-token":
            self.send_error(401)
            return
        if _Api.status != 200:
            self.send_error(_Api.status)
            return
        name = self.path.rsplit("/", 1)[-1]
        body = json.dumps(_Api.pods.get(name, {"kind": "Status"})).encode()
        if _Api.raw is not None:
            body = _Api.raw
        self.send_response(200 if name in _Api.pods else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        # The client stops reading an oversized answer.
        with contextlib.suppress(OSError, ssl.SSLError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ApiServer]:
    ca = trustme.CA()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    (tmp_path / "token").write_text("secret-token\n")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(server.server_port),
    }
    _Api.pods = {POD: {"metadata": {"annotations": {"kubevirt.io/domain": FULL}}}}
    _Api.status = 200
    _Api.delay = 0.0
    _Api.requests = []
    _Api.raw = None
    yield ApiServer.in_cluster(env, root=str(tmp_path))
    server.shutdown()
    server.server_close()


@pytest.fixture
def kubelet(socket_dir: str) -> Iterator[FakeKubelet]:  # noqa: F811 - the fixture
    k = FakeKubelet(os.path.join(socket_dir, "kubelet.sock"))
    k.pods = [pod(POD, "vdi", "nvidia.com/NVIDIA_L40S-2B", MDEV_3, container="compute")]
    k.start()
    yield k
    k.stop()


async def _snapshot(kubelet: FakeKubelet, api: ApiServer, reads: int, timeout: float = 2.0) -> Any:
    host = sim_host("kvm-vgpu-timesliced")
    config = KubeletConfig(socket=kubelet.path, interval_seconds=0.02, timeout_seconds=timeout)
    enricher = KubeletEnricher(config, api=api)
    host.sampler.enrichers = [enricher]
    try:
        await host.cycle()
        await asyncio.to_thread(wait_for, lambda: enricher.refreshes >= reads, "kubelet reads")
        return await host.cycle()
    finally:
        host.close()


async def test_the_annotation_gives_the_full_name_once_per_pod(
    kubelet: FakeKubelet, api: ApiServer
) -> None:
    snap = await _snapshot(kubelet, api, reads=5)
    (allocation,) = snap.allocations
    assert allocation.vm_name == FULL
    assert by_id(snap.gpus[0])[3].vm.name == FULL
    assert _Api.requests == [f"/api/v1/namespaces/vdi/pods/{POD}"]  # asked once, then kept


async def test_a_refusing_api_server_leaves_the_pod_name_guess(
    kubelet: FakeKubelet, api: ApiServer
) -> None:
    _Api.status = 403
    snap = await _snapshot(kubelet, api, reads=3)
    (allocation,) = snap.allocations
    assert allocation.vm_name == "win11-desktop-for-the-design-te"
    assert next(c.success for c in snap.collectors if c.name == "kubelet") is True
    assert len(_Api.requests) >= 2  # asked again on later reads


async def test_a_slow_api_server_never_fails_the_kubelet_read(
    kubelet: FakeKubelet, api: ApiServer
) -> None:
    _Api.delay = 2.0  # ten times the timeout below
    snap = await _snapshot(kubelet, api, reads=2, timeout=0.2)
    (allocation,) = snap.allocations
    assert allocation.vm_name == "win11-desktop-for-the-design-te"
    assert next(c.success for c in snap.collectors if c.name == "kubelet") is True


def test_in_cluster_needs_a_pod(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        ApiServer.in_cluster({}, root=str(tmp_path))
    env = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ConfigError, match="service account file"):
        ApiServer.in_cluster(env, root=str(tmp_path))


@pytest.mark.parametrize(
    ("raw", "says"),
    [(b"[" * 100_000 + b"]" * 100_000, "nested too deeply"), (b" " * (2 << 20), "larger than")],
    ids=["nested", "oversized"],
)
def test_a_hostile_api_answer_is_a_value_error(api: ApiServer, raw: bytes, says: str) -> None:
    """What the enricher's refresher catches (issue 33): nested JSON raised RecursionError."""
    _Api.raw = raw
    with pytest.raises(ValueError, match=says):
        api.pod_annotation("vdi", POD, "kubevirt.io/domain", timeout=10)
