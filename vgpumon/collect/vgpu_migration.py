"""Live-migration payload: how many bytes moving each vGPU would take now.

``nvmlVgpuInstanceGetRuntimeStateSize`` (R565+) turns "ready to move" into "moves N GiB", the
figure a migration planner needs to estimate a move's duration. The size follows the VM's
framebuffer use, so it is read every cycle for every active vGPU (one call each). The vGPU
instances come from this cycle's ``vgpu`` reader, which runs first; where the driver lacks the
call, the size is absent and the collector status says why.
"""

from __future__ import annotations

import dataclasses

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext, note_unsupported
from vgpumon.collect.vgpu_raw import GONE, as_int

NAME = "vgpu_migration"


def read_migration_size(ctx: GpuContext, out: GpuBuilder) -> None:
    instances = out.get("vgpu_instances") or ()
    if not instances:
        return
    updated = []
    reason = None
    for v in instances:
        got = ctx.attempt("nvmlVgpuInstanceGetRuntimeStateSize", v.vgpu_id, no_data=GONE)
        size = as_int(getattr(got.value, "size", None)) if got.ok else None
        if got.status == "absent":
            reason = got.error
        updated.append(
            dataclasses.replace(v, migration_state_bytes=size) if size is not None else v
        )
    out.set(vgpu_instances=tuple(updated))
    if all(v.migration_state_bytes is None for v in updated):
        note_unsupported(out, NAME, reason)


READERS = [FunctionReader(NAME, read_migration_size)]
