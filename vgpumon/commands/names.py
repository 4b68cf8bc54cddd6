"""Flags that name who holds each GPU: VMs from libvirt, pods from the kubelet.

Shared by the commands that run a sampler in this process (``serve``; ``top`` on this host can use
the same functions): :func:`add_arguments` adds the flags, :func:`from_args` makes the enrichers
from parsed flags. The enrichers themselves, and what makes them from the flags' values
(:mod:`vgpumon.collect.enrich.build`), are producers in :mod:`vgpumon.collect.enrich`.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vgpumon.collect.enrich.build import build
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


def from_args(args: argparse.Namespace) -> list[Enricher]:
    """The enrichers the flags ask for, the values checked as ``serve`` checks its flags."""
    values = flag_values(args, NAMES_ROWS)
    return build(
        libvirt_uri=values.get("libvirt_uri"),
        kubelet_socket=values.get("kubelet_socket"),
        resources=values.get("kubernetes_resources", ()),
        kubernetes_api=bool(values.get("kubernetes_api")),
    )
