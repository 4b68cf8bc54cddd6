"""Where consumers get snapshots: one protocol, local / remote / fleet sources, and history.

Consumers (``top``, ``validate --url``) import from here and never from ``collect`` or ``sim``.
"""

from vgpumon.sources.base import HostState, HostUpdate, SnapshotSource, UpdateHub

__all__ = ["HostState", "HostUpdate", "SnapshotSource", "UpdateHub"]
