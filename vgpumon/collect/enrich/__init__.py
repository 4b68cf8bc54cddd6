"""Enrichers: name what NVML only numbers (VMs from libvirt, pods from the kubelet).

Each enricher asks another system on its own thread and keeps the answer; the sampler merges the
kept answer into every snapshot at the end of a cycle, so a slow or missing libvirt or kubelet
never delays a cycle or a scrape. See :mod:`vgpumon.collect.enrich.base`.
"""

from __future__ import annotations

from vgpumon.collect.enrich import kubelet, libvirt

# Collector names of the enrichers' success series, in the order the sampler applies them
# (libvirt first: the kubelet matches KubeVirt's VF addresses that libvirt found).
ENRICHER_NAMES = (libvirt.NAME, kubelet.NAME)
