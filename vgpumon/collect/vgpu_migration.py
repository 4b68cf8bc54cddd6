"""Live-migration payload: how many bytes moving each vGPU would take now.

``nvmlVgpuInstanceGetRuntimeStateSize`` (R565+) turns "ready to move" into "moves N GiB", the
figure a migration planner needs to estimate a move's duration. The size follows the VM's
framebuffer use, which moves over minutes, and a planner looks at it before a move, not every
second: it is read every :data:`MIGRATION` seconds by default (one call per vGPU, 768 calls a
cycle on a 16 x 48 host), the last size standing between reads; a vGPU seen for the first time
(a VM that just started) is read at once. The vGPU instances come from this cycle's ``vgpu``
reader, which runs first; where the driver lacks the call, the size is absent and the collector
status says why.
"""

from __future__ import annotations

import dataclasses

from vgpumon.collect.base import (
    FunctionReader,
    GpuBuilder,
    GpuContext,
    cadence,
    note_unsupported,
)
from vgpumon.collect.vgpu_raw import GONE, as_int

NAME = "vgpu_migration"
# How often each vGPU's payload is read by default, in seconds (``--intervals.migration``).
MIGRATION = cadence("migration", 10.0)
REASON_KEY = "vgpu_migration.reason"  # why the last read had no size (replayed between reads)


def read_migration_size(ctx: GpuContext, out: GpuBuilder) -> None:
    """Cadenced (``SamplerConfig.cadences["migration"]``): between reads each vGPU keeps its
    last size; a vGPU not seen before is read at once."""
    instances = out.get("vgpu_instances") or ()
    if not instances:
        return
    known: dict[int, int | None] = {}
    if not ctx.due(MIGRATION) and ctx.previous is not None:
        known = {v.vgpu_id: v.migration_state_bytes for v in ctx.previous.vgpu_instances}
    updated = []
    reason = ctx.state.get(REASON_KEY) if known else None
    for v in instances:
        if v.vgpu_id in known:
            size = known[v.vgpu_id]
        else:
            got = ctx.attempt("nvmlVgpuInstanceGetRuntimeStateSize", v.vgpu_id, no_data=GONE)
            size = as_int(getattr(got.value, "size", None)) if got.ok else None
            if got.status == "absent":
                reason = got.error
        updated.append(
            dataclasses.replace(v, migration_state_bytes=size) if size is not None else v
        )
    out.set(vgpu_instances=tuple(updated))
    if all(v.migration_state_bytes is None for v in updated):
        ctx.state[REASON_KEY] = reason
        note_unsupported(out, NAME, reason)
    else:
        ctx.state.pop(REASON_KEY, None)


READERS = [FunctionReader(NAME, read_migration_size)]
