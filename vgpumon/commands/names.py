"""Flags that name who holds each GPU: VMs from libvirt, pods from the kubelet.

Shared by the commands that run a sampler in this process (``serve``; ``top`` on this host can use
the same functions): :func:`add_arguments` adds the flags, :func:`build` makes the enrichers
from their values, :func:`from_args` from parsed flags. The enrichers themselves are producers in
:mod:`vgpumon.collect.enrich`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from vgpumon.collect.enrich import (
    DEFAULT_KUBELET_SOCKET,
    DEFAULT_KUBERNETES_RESOURCES,
    DEFAULT_LIBVIRT_URI,
)

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the enrichers; ``serve`` checks their values like its other flags."""
    names = parser.add_argument_group(
        "names", "who holds each GPU: VMs from libvirt, pods from the kubelet (off by default)"
    )
    names.add_argument(
        "--libvirt-uri",
        nargs="?",
        const=DEFAULT_LIBVIRT_URI,
        metavar="URI",
        help="name the VM of each vGPU from libvirt, read-only "
        f"(URI default {DEFAULT_LIBVIRT_URI}; needs the libvirt extra)",
    )
    names.add_argument(
        "--kubelet-socket",
        nargs="?",
        const=DEFAULT_KUBELET_SOCKET,
        metavar="PATH",
        help="attach pods to GPUs through the kubelet's pod-resources socket "
        f"(default {DEFAULT_KUBELET_SOCKET}; needs the kubernetes extra)",
    )
    names.add_argument(
        "--kubernetes-resource",
        dest="kubernetes_resources",
        action="append",
        metavar="PATTERN",
        help="resource names to read, repeatable, shell patterns "
        f"(default {' '.join(DEFAULT_KUBERNETES_RESOURCES)})",
    )
    names.add_argument(
        "--kubernetes-pod-series",
        dest="kubernetes_pod_series",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="per-pod utilization and memory series (opt-in: pods churn the TSDB)",
    )
    names.add_argument(
        "--kubernetes-api",
        dest="kubernetes_api",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read KubeVirt VM names from the API server (in a pod, with 'get pods' rights)",
    )


def build(
    *,
    libvirt_uri: str | None = None,
    kubelet_socket: str | None = None,
    resources: Sequence[str] = (),
    kubernetes_api: bool = False,
) -> list[Enricher]:
    """The enrichers asked for, libvirt first (the kubelet uses the VF addresses it finds).

    None leaves an enricher off; empty ``resources`` means the kubelet enricher's defaults. A
    missing binding (the libvirt or kubernetes extra) is a one-line :class:`ConfigError`.
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


def from_args(args: argparse.Namespace) -> list[Enricher]:
    """The enrichers the flags ask for, the values checked as ``serve`` checks its flags."""
    from vgpumon.config.serve import check_patterns, check_text

    resources = getattr(args, "kubernetes_resources", None) or ()
    return build(
        libvirt_uri=None
        if args.libvirt_uri is None
        else check_text(args.libvirt_uri, "--libvirt-uri"),
        kubelet_socket=None
        if args.kubelet_socket is None
        else check_text(args.kubelet_socket, "--kubelet-socket"),
        resources=check_patterns(list(resources), "--kubernetes-resource") if resources else (),
        kubernetes_api=bool(args.kubernetes_api),
    )
