"""Keep the garbage collector's full passes off the scrape latency tail.

CPython's cyclic collector walks every tracked object in a full (oldest-generation) pass, while
the event loop that answers scrapes waits. A serving exporter holds tens of thousands of objects
that live as long as the process: the modules, classes and functions of vgpumon, asyncio, h11,
prometheus-client and pynvml, loaded at start. Walking them again in every full pass buys
nothing. Once the server is up, :func:`settle_after_startup` collects what start-up left behind
and moves everything still alive to the permanent generation (``gc.freeze``), so later passes
walk only what was made since: snapshots, bodies, connections.

Frozen objects are still freed by reference counting when they become unreachable; only a
reference cycle among them would stay, and what is alive at start-up (modules, the app, the
sampler) lives until exit anyway.
"""

from __future__ import annotations

import gc


def settle_after_startup() -> int:
    """Collect, then freeze what is left; returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
