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

from vgpumon.collect.enrich import DEFAULT_KUBERNETES_RESOURCES
from vgpumon.config.flags import add_flags, flag_values
from vgpumon.config.table import rows_for

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher

# The enrichers' rows every sampling command reads (serve reads more: pod series, NFD file).
NAMES_ROWS = rows_for("snapshot", "names")


def add_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of the enrichers ``command`` reads (rows of :mod:`vgpumon.config.table`), for
    the commands other than ``serve``, which adds them with the rest of its table."""
    add_flags(parser, rows_for(command, "names"), env=False)


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
    values = flag_values(args, NAMES_ROWS)
    return build(
        libvirt_uri=values.get("libvirt_uri"),
        kubelet_socket=values.get("kubelet_socket"),
        resources=values.get("kubernetes_resources", ()),
        kubernetes_api=bool(values.get("kubernetes_api")),
    )
