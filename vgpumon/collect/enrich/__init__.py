"""Enrichers: name what NVML only numbers (VMs from libvirt, pods from the kubelet).

Each enricher asks another system on its own thread and keeps the answer; the sampler merges the
kept answer into every snapshot at the end of a cycle, so a slow or missing libvirt or kubelet
never delays a cycle or a scrape. See :mod:`vgpumon.collect.enrich.base`.

The names and defaults below live here, not in the enrichers' modules, so that a command can
offer the flags (and the sampler can import :mod:`~vgpumon.collect.enrich.base`) without importing
the enrichers and what they need (XML, HTTP and TLS clients): ``serve`` without ``--libvirt.uri``
or ``--kubernetes.socket`` never loads them.
"""

from __future__ import annotations

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
