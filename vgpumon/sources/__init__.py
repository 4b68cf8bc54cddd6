"""Where consumers get snapshots: one protocol, any snapshot feed as one host (``feed_source``:
the local sampler, a remote exporter, an agentless host), fleets of hosts, and history.

Consumers (``top``, ``validate --url``) import from here and never from ``collect`` or ``sim``.
"""

from vgpumon.sources.base import HostState, HostUpdate, SnapshotSource, UpdateHub

__all__ = ["HostState", "HostUpdate", "SnapshotSource", "UpdateHub"]
