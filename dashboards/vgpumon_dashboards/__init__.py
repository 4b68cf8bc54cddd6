"""vgpumon's Grafana dashboards, built with the Grafana Foundation SDK.

One module per dashboard, each defining ``BOARD``; :mod:`.common` holds what they share. To add a
dashboard, write its module and list it in ``DASHBOARDS`` below: ``dashboards/generate.py`` writes
it, and tests/dashboards and tests/e2e check it like the others.
"""

from __future__ import annotations

from . import exporter, fleet, gpu, mig, vgpu_host
from .common import (
    ALL,
    BARE,
    GUEST,
    KINDS,
    LOST,
    MIG,
    NVLINK,
    SCHEMA_VERSION,
    VARIABLES,
    VGPU,
    Board,
    Panel,
    Query,
    Row,
    by_vm,
)

DASHBOARDS: tuple[Board, ...] = (
    fleet.BOARD,
    vgpu_host.BOARD,
    mig.BOARD,
    gpu.BOARD,
    exporter.BOARD,
)

__all__ = [
    "ALL",
    "BARE",
    "DASHBOARDS",
    "GUEST",
    "KINDS",
    "LOST",
    "MIG",
    "NVLINK",
    "SCHEMA_VERSION",
    "VARIABLES",
    "VGPU",
    "Board",
    "Panel",
    "Query",
    "Row",
    "by_vm",
]
