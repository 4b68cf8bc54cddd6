"""Enrichers: name what NVML only numbers (VMs from libvirt, pods from the kubelet).

Each enricher asks another system on its own thread and keeps the answer; the sampler merges the
kept answer into every snapshot at the end of a cycle, so a slow or missing libvirt or kubelet
never delays a cycle or a scrape. See :mod:`vgpumon.collect.enrich.base`.

The names and defaults below live here, not in the enrichers' modules, so that a command can
offer the flags (and the sampler can import :mod:`~vgpumon.collect.enrich.base`) without importing
the enrichers and what they need (XML, HTTP and TLS clients): ``serve`` without ``--libvirt-uri``
or ``--kubelet-socket`` never loads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher

LIBVIRT = "libvirt"
KUBELET = "kubelet"
# Collector names of the enrichers' success series, in the order the sampler applies them
# (libvirt first: the kubelet matches KubeVirt's VF addresses that libvirt found).
# The metering stage (vgpumon.collect.metering) runs last, after the names are merged.
METERING = "metering"
ENRICHER_NAMES = (LIBVIRT, KUBELET, METERING)

DEFAULT_LIBVIRT_URI = "qemu:///system"
DEFAULT_KUBELET_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Everything under nvidia.com/: the NVIDIA device plugin's nvidia.com/gpu and
# nvidia.com/mig-<profile>, and the names KubeVirt's GPU and vGPU device plugins are configured with
# (nvidia.com/<device> for pass-through GPUs, nvidia.com/<vGPU type> for mediated devices). Ids
# that match no GPU of the snapshot are kept in the JSON snapshot but get no series.
DEFAULT_KUBERNETES_RESOURCES = ("nvidia.com/*",)


def build(
    *,
    libvirt_uri: str | None = None,
    kubelet_socket: str | None = None,
    resources: Sequence[str] = (),
    kubernetes_api: bool = False,
) -> list[Enricher]:
    """The enrichers asked for, libvirt first (the kubelet uses the VF addresses it finds).

    None leaves an enricher off; empty ``resources`` means the kubelet enricher's defaults. A
    missing binding (the libvirt or kubernetes extra) is a one-line ``ConfigError``.
    """
    enrichers: list[Enricher] = []
    # Each enricher's module (and the clients it needs) is imported only when it is asked for.
    if libvirt_uri is not None:
        from vgpumon.collect.enrich.libvirt import LibvirtConfig, LibvirtEnricher

        enrichers.append(LibvirtEnricher(LibvirtConfig(uri=libvirt_uri)))
    if kubelet_socket is not None:
        from vgpumon.collect.enrich.kubelet import KubeletConfig, KubeletEnricher

        config = KubeletConfig(
            socket=kubelet_socket,
            resources=tuple(resources) or DEFAULT_KUBERNETES_RESOURCES,
            kubevirt_api=kubernetes_api,
        )
        enrichers.append(KubeletEnricher(config))
    return enrichers
