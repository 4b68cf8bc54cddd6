"""vgpumon's Grafana dashboards, built with the Grafana Foundation SDK.

One module per dashboard, each defining ``BOARD``; :mod:`.common` holds what they share.(scenario
kinds, variables, selectors, colours, panel helpers). To add a dashboard, add its module: every
module here with a ``BOARD`` is a dashboard, written by ``dashboards/generate.py`` and checked by
tests/dashboards and tests/e2e like the others.
"""

from __future__ import annotations

import importlib
import pkgutil

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


def _boards() -> tuple[Board, ...]:
    boards = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{info.name}")
        board = getattr(module, "BOARD", None)
        if isinstance(board, Board):
            boards.append(board)
    return tuple(boards)


DASHBOARDS: tuple[Board, ...] = _boards()

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
