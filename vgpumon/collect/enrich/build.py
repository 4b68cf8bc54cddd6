"""The enrichers asked for, made from plain values (flags, a config file, the sampler recipe).

Its own module, not the package's: the package holds the names and defaults that the enrichers'
modules import, and this imports those modules (each only when it is asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from vgpumon.collect.enrich import DEFAULT_KUBERNETES_RESOURCES

if TYPE_CHECKING:
    from vgpumon.collect.enrich.base import Enricher


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
