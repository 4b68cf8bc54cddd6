"""What the driver says a GPU needs: a recovery action, a pending repair, unrepairable memory.

* **Recovery action** (field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, 230, R565+): none, GPU
  reset, node reboot, drain P2P, drain and reset, ... (:data:`vgpumon.model.RECOVERY_ACTIONS`).
  It rides in the cycle's one batched field-value call; a driver that does not know the field
  answers it per entry, and the action is absent.
* **Repair status** (``nvmlDeviceGetRepairStatus``, R580+): a channel or TPC repair is pending
  (the GPU repairs itself at the next reset).
* **Unrepairable memory** (``nvmlDeviceGetUnrepairableMemoryFlag_v1``, R590+): memory the
  row remapper can no longer fix; the board needs service.

All three are read every cycle (each is one cheap call, and an action must reach ``check`` and
the alerts at once). Where the driver answers none of them, the collector status says why
(``vgpumon_scrape_collector_unsupported_gpus``); the series are absent, never 0.
"""

from __future__ import annotations

from vgpumon.collect.base import (
    FunctionReader,
    GpuBuilder,
    GpuContext,
    absent_reason,
    note_unsupported,
    nvml_int,
)
from vgpumon.collect.field_values import read_fields
from vgpumon.model import RECOVERY_ACTIONS, Recovery
from vgpumon.nvml.session import CallOutcome

NAME = "recovery"
FI_GPU_RECOVERY_ACTION = 230  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION


def recovery_action(value: object) -> str | None:
    code = nvml_int(value)
    if code is None or not 0 <= code < len(RECOVERY_ACTIONS):
        return None
    return RECOVERY_ACTIONS[code]


def _flag(value: object) -> bool | None:
    number = nvml_int(value)
    return None if number is None else bool(number)


def read_recovery(ctx: GpuContext, out: GpuBuilder) -> None:
    got = read_fields(ctx, [FI_GPU_RECOVERY_ACTION])
    action = recovery_action(got.get(FI_GPU_RECOVERY_ACTION))
    repair = ctx.attempt("nvmlDeviceGetRepairStatus", ctx.handle)
    channel = tpc = None
    if repair.ok and repair.value is not None:
        pending = [*list(repair.value), None, None]
        channel, tpc = _flag(pending[0]), _flag(pending[1])
    memory = ctx.attempt("nvmlDeviceGetUnrepairableMemoryFlag_v1", ctx.handle)
    unrepairable = _flag(memory.value) if memory.ok else None
    out.set(
        recovery=Recovery(
            action=action,
            channel_repair_pending=channel,
            tpc_repair_pending=tpc,
            unrepairable_memory=unrepairable,
        )
    )
    if action is None:
        # The field's answer is per entry; as a call outcome it is "absent" when the batch
        # had no value for it.
        field = CallOutcome(status="absent", error="not_supported")
        note_unsupported(out, NAME, absent_reason(repair, memory, field))


READERS = [FunctionReader(NAME, read_recovery)]
