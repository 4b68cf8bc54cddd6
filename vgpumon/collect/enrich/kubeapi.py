"""KubeVirt VM names from the Kubernetes API server (optional, in-cluster only).

KubeVirt names a VM's pod ``virt-launcher-<vm>-<5 characters>``, cutting long VM names to fit the
63-character pod name limit; the pod's ``kubevirt.io/domain`` annotation keeps the full name. When
vgpumon runs in a pod with a service account allowed to ``get`` pods, the kubelet enricher asks
the API server for that annotation once per virt-launcher pod. Only the in-cluster configuration
is read (the service account's token and CA, ``KUBERNETES_SERVICE_HOST`` / ``_PORT``); kubeconfig
files are not.

Plain ``urllib`` over TLS verified against the service account's CA, on the enricher's thread,
each request bounded by the enricher's timeout.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from vgpumon.errors import ConfigError

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DOMAIN_ANNOTATION = "kubevirt.io/domain"
MAX_BODY_BYTES = 1 << 20  # a pod object is a few kB; more is not a pod


@dataclass(frozen=True)
class ApiServer:
    url: str  # https://HOST:PORT
    token_file: str
    ca_file: str

    @classmethod
    def in_cluster(
        cls, env: Mapping[str, str] | None = None, root: str = SERVICE_ACCOUNT
    ) -> ApiServer:
        """The API server as a pod sees it, or a :class:`ConfigError` saying what is missing."""
        env = os.environ if env is None else env
        host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
        if not host or not port:
            raise ConfigError(
                "--kubernetes.api needs to run in a pod: KUBERNETES_SERVICE_HOST/PORT are not set"
            )
        token, ca = os.path.join(root, "token"), os.path.join(root, "ca.crt")
        for path in (token, ca):
            if not os.path.isfile(path):
                raise ConfigError(f"--kubernetes.api: no service account file {path}")
        name = f"[{host}]" if ":" in host else host
        return cls(f"https://{name}:{port}", token, ca)

    def pod_annotation(self, namespace: str, pod: str, key: str, timeout: float) -> str | None:
        """One annotation of one pod; None when the pod has no such annotation.

        Raises ``OSError`` (network, TLS, HTTP errors) or ``ValueError`` (not a pod object).
        """
        # The token is read for each request: projected service account tokens are rotated.
        with open(self.token_file, encoding="utf-8") as f:
            token = f.read().strip()
        path = "/api/v1/namespaces/{}/pods/{}".format(
            urllib.parse.quote(namespace, safe=""), urllib.parse.quote(pod, safe="")
        )
        request = urllib.request.Request(
            self.url + path,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
        context = ssl.create_default_context(cafile=self.ca_file)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            body = response.read(MAX_BODY_BYTES + 1)
        if len(body) > MAX_BODY_BYTES:
            raise ValueError(f"pod {namespace}/{pod}: answer larger than {MAX_BODY_BYTES} bytes")
        try:
            data = json.loads(body)
        except RecursionError:  # nested beyond the parser: not a pod object either
            raise ValueError(f"pod {namespace}/{pod}: the answer is nested too deeply") from None
        metadata = data.get("metadata") if isinstance(data, dict) else None
        if not isinstance(metadata, dict):
            raise ValueError(f"pod {namespace}/{pod}: the answer is not a pod object")
        annotations = metadata.get("annotations") or {}
        value = annotations.get(key) if isinstance(annotations, dict) else None
        return value if isinstance(value, str) and value else None
