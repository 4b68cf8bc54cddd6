"""Probe the driver surfaces of R550-R610 on a real GPU: each call reads or says why not.

Run from the repository root on a GPU host (pass-through or bare metal, with or without vGPU)::

    python3 bench/device/driver_surfaces.py --out OUTDIR

For every call vgpumon's new collectors make (recovery action, repair status, unrepairable memory,
confidential computing, accounting, vGPU migration payload, per-type reservations, per-GPU-instance
vGPU capacity, encoder scheduler logs) it prints one line per GPU: ``read`` and the value, or
``unsupported`` and NVML's code and name, or ``missing`` when the installed nvidia-ml-py has no
such function. Calls that need a vGPU instance, a vGPU type or a GPU instance the host does not
have are made with an id NVML must refuse (0), which still tells whether the driver has the
symbol (INVALID_ARGUMENT, NOT_FOUND or NOT_SUPPORTED) or not (FUNCTION_NOT_FOUND). Nothing here
changes the card's settings: accounting mode is read, and when it is off the per-process records
are skipped with a line that says so.

Then it runs ``vgpumon snapshot --json`` (the collectors themselves, through vgpumon's own
session) and prints what they made of it: the new fields per GPU and each collector's status,
with the reasons it gave for reading nothing. Everything goes to standard output and, with
``--out``, to OUTDIR/driver_surfaces.txt and OUTDIR/snapshot.json. Exit 0 unless the probe itself
cannot start (no NVML); a call that fails is a finding, not a failure. Takes about 10 seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
from collections.abc import Callable
from importlib import metadata
from typing import Any

LINES: list[str] = []


def say(text: str) -> None:
    LINES.append(text)
    print(text, flush=True)


def describe(value: Any) -> str:
    """A short, readable form of what a call returned (ctypes structures by their fields)."""
    fields = getattr(value, "_fields_", None)
    if fields is not None:
        parts = []
        for name, _type in fields:
            field = getattr(value, name, None)
            if isinstance(field, (int, float, str, bytes)):
                parts.append(f"{name}={field!r}")
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(describe(v) for v in value[:16]) + ("…]" if len(value) > 16 else "]")
    return repr(value)


def probe(pynvml: Any, label: str, call: Callable[[], Any], function: str) -> Any:
    if not callable(getattr(pynvml, function, None)):
        say(f"  {label}: missing (nvidia-ml-py has no {function})")
        return None
    try:
        value = call()
    except pynvml.NVMLError as err:
        code = getattr(err, "value", None)
        say(f"  {label}: {verdict(code)} (code {code} {err})")
        return None
    except Exception as err:  # noqa: BLE001 - a wrapper's own bug is a finding too
        say(f"  {label}: wrapper error {type(err).__name__}: {err}")
        return None
    say(f"  {label}: read {describe(value)}")
    return value


def verdict(code: int | None) -> str:
    """unsupported: the driver lacks the call here (3, 13); refused: it has the call and turned
    down the argument (2, 6: the id 0 the probe passes where the host has no such object)."""
    if code in (3, 13):
        return "unsupported"
    if code == 4:
        return "no permission"
    return "refused"


def raw(pynvml: Any, symbol: str, *args: Any) -> int | None:
    """A C symbol's return code (0: SUCCESS), None when the driver has no such symbol."""
    try:
        fn = pynvml._nvmlGetFunctionPointer(symbol)
    except pynvml.NVMLError:
        return None
    return int(fn(*args))


def probe_raw(
    pynvml: Any, label: str, symbol: str, *args: Any, out: Any = None, plain: tuple[Any, ...] = ()
) -> None:
    """The C symbol on real pynvml; on a module without C symbols (the simulator, for a rehearsal)
    its Python function of the same name with ``plain`` arguments."""
    if not hasattr(pynvml, "_nvmlGetFunctionPointer"):
        probe(pynvml, label, lambda: getattr(pynvml, symbol)(*plain), symbol)
        return
    code = raw(pynvml, symbol, *args)
    if code is None:
        say(f"  {label}: unsupported (code 13 Function Not Found)")
    elif code == 0:
        value = out.value if hasattr(out, "value") else describe(out)
        say(f"  {label}: read {value}")
    else:
        say(f"  {label}: {verdict(code)} (code {code} {pynvml.nvmlErrorString(code)})")


def probe_gpu(pynvml: Any, index: int) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    say(f"GPU {index}: {pynvml.nvmlDeviceGetName(h)} {pynvml.nvmlDeviceGetUUID(h)}")
    mode = probe(
        pynvml,
        "virtualization mode",
        lambda: pynvml.nvmlDeviceGetVirtualizationMode(h),
        "nvmlDeviceGetVirtualizationMode",
    )
    del mode

    # recovery and repair
    def recovery_field() -> Any:
        entry = pynvml.nvmlDeviceGetFieldValues(h, [230])[0]
        if entry.nvmlReturn != 0:
            raise pynvml.NVMLError(entry.nvmlReturn)
        return entry.value.uiVal

    probe(pynvml, "recovery action (field 230)", recovery_field, "nvmlDeviceGetFieldValues")
    probe(
        pynvml,
        "repair status [channel, tpc]",
        lambda: pynvml.nvmlDeviceGetRepairStatus(h),
        "nvmlDeviceGetRepairStatus",
    )
    probe(
        pynvml,
        "unrepairable memory flag",
        lambda: pynvml.nvmlDeviceGetUnrepairableMemoryFlag_v1(h),
        "nvmlDeviceGetUnrepairableMemoryFlag_v1",
    )

    # confidential computing: the device part (the system part is probed once, below)
    probe(
        pynvml,
        "CC memory sizes",
        lambda: pynvml.nvmlDeviceGetConfComputeMemSizeInfo(h),
        "nvmlDeviceGetConfComputeMemSizeInfo",
    )
    probe(
        pynvml,
        "CC protected memory usage",
        lambda: pynvml.nvmlDeviceGetConfComputeProtectedMemoryUsage(h),
        "nvmlDeviceGetConfComputeProtectedMemoryUsage",
    )

    # accounting: read, never set
    enabled = probe(
        pynvml,
        "accounting mode",
        lambda: pynvml.nvmlDeviceGetAccountingMode(h),
        "nvmlDeviceGetAccountingMode",
    )
    if enabled:
        pids = probe(
            pynvml,
            "accounting PIDs",
            lambda: pynvml.nvmlDeviceGetAccountingPids(h),
            "nvmlDeviceGetAccountingPids",
        )
        for pid in (pids or [])[:4]:
            probe(
                pynvml,
                f"accounting stats v2 of {pid}",
                lambda pid=pid: pynvml.nvmlDeviceGetAccountingStats_v2(h, pid),
                "nvmlDeviceGetAccountingStats_v2",
            )
            probe(
                pynvml,
                f"accounting stats v1 of {pid}",
                lambda pid=pid: pynvml.nvmlDeviceGetAccountingStats(h, pid),
                "nvmlDeviceGetAccountingStats",
            )
        if not pids:
            say("  accounting stats: no process in the accounting buffer (nothing to read)")
    elif enabled is not None:
        say("  accounting stats: accounting mode is off; skipped (the probe never turns it on)")

    # vGPU: the host's instances and types where there are any, else id 0 (refused by NVML)
    vgpus = probe(
        pynvml,
        "active vGPUs",
        lambda: pynvml.nvmlDeviceGetActiveVgpus(h),
        "nvmlDeviceGetActiveVgpus",
    )
    vi = int((vgpus or [0])[0])
    types = probe(
        pynvml,
        "supported vGPU types",
        lambda: pynvml.nvmlDeviceGetSupportedVgpus(h),
        "nvmlDeviceGetSupportedVgpus",
    )
    type_id = int((types or [0])[0])
    probe(
        pynvml,
        f"runtime state size of vGPU {vi}",
        lambda: pynvml.nvmlVgpuInstanceGetRuntimeStateSize(vi),
        "nvmlVgpuInstanceGetRuntimeStateSize",
    )
    for symbol in ("nvmlVgpuTypeGetFbReservation", "nvmlVgpuTypeGetGspHeapSize"):
        value = ctypes.c_ulonglong(0)
        probe_raw(
            pynvml,
            f"{symbol} of type {type_id} (C symbol)",
            symbol,
            ctypes.c_uint(type_id),
            ctypes.byref(value),
            out=value,
            plain=(type_id,),
        )
    probe(
        pynvml,
        f"BAR1 of type {type_id}",
        lambda: pynvml.nvmlVgpuTypeGetBAR1Info(type_id),
        "nvmlVgpuTypeGetBAR1Info",
    )

    # per GPU instance: the first GPU instance where MIG is on, else a null handle
    gi = None
    try:
        if pynvml.nvmlDeviceGetMigMode(h)[0]:
            count = ctypes.c_uint(0)
            array = (pynvml.c_nvmlGpuInstance_t * 8)()
            for profile in range(16):
                try:
                    pynvml.nvmlDeviceGetGpuInstances(h, profile, array, ctypes.byref(count))
                except pynvml.NVMLError:
                    continue
                if count.value:
                    gi = array[0]
                    break
    except pynvml.NVMLError:
        pass
    if gi is None:
        gi = pynvml.c_nvmlGpuInstance_t()
        say("  (no GPU instance: per-instance calls get a null handle, which NVML must refuse)")

    def creatable() -> Any:
        info = pynvml.c_nvmlVgpuTypeIdInfo_v1_t()
        info.version = pynvml.nvmlVgpuTypeIdInfo_v1
        return pynvml.nvmlGpuInstanceGetCreatableVgpus(gi, info).vgpuCount

    def placements() -> Any:
        info = pynvml.c_nvmlVgpuCreatablePlacementInfo_v1_t()
        info.version = pynvml.nvmlVgpuCreatablePlacementInfo_v1
        info.vgpuTypeId = type_id
        return pynvml.nvmlGpuInstanceGetVgpuTypeCreatablePlacements(gi, info).count

    probe(pynvml, "GI creatable vGPU types", creatable, "nvmlGpuInstanceGetCreatableVgpus")
    probe(
        pynvml,
        "GI creatable placements",
        placements,
        "nvmlGpuInstanceGetVgpuTypeCreatablePlacements",
    )
    probe(
        pynvml,
        "GI heterogeneous mode",
        lambda: pynvml.nvmlGpuInstanceGetVgpuHeterogeneousMode(gi),
        "nvmlGpuInstanceGetVgpuHeterogeneousMode",
    )

    # the scheduler log per engine (R590+ _v2 with engineId; the encoder engines)
    for engine, name in ((1, "graphics"), (3, "nvenc0"), (2, "nvenc1")):

        def log(engine: int = engine) -> Any:
            info = pynvml.c_nvmlVgpuSchedulerLogInfo_v2_t()
            info.engineId = engine
            return pynvml.nvmlDeviceGetVgpuSchedulerLog_v2(h, info).entriesCount

        probe(pynvml, f"scheduler log v2, {name}", log, "nvmlDeviceGetVgpuSchedulerLog_v2")


def probe_system(pynvml: Any) -> None:
    say("System:")
    probe(
        pynvml,
        "CC state",
        lambda: pynvml.nvmlSystemGetConfComputeState(),
        "nvmlSystemGetConfComputeState",
    )
    settings = pynvml.c_nvmlSystemConfComputeSettings_v1_t()
    # pynvml passes the structure by value and returns the code: call the C symbol (as vgpumon).
    probe_raw(
        pynvml,
        "CC settings (C symbol)",
        "nvmlSystemGetConfComputeSettings",
        ctypes.byref(settings),
        out=settings,
        plain=(settings,),
    )
    probe(
        pynvml,
        "CC capabilities",
        lambda: pynvml.nvmlSystemGetConfComputeCapabilities(),
        "nvmlSystemGetConfComputeCapabilities",
    )
    probe(
        pynvml,
        "CC GPUs ready state",
        lambda: pynvml.nvmlSystemGetConfComputeGpusReadyState(),
        "nvmlSystemGetConfComputeGpusReadyState",
    )


NEW_COLLECTORS = (
    "recovery",
    "confcompute",
    "accounting",
    "vgpu_migration",
    "vgpu_gpu_instances",
    "vgpu_type_reservations",
    "scheduler",
)


def snapshot(out: str | None, sim: str | None) -> None:
    """The collectors themselves: ``vgpumon snapshot --json`` and what it says of each surface."""
    say("vgpumon snapshot --json:")
    env = dict(os.environ)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "snapshot",
            "--json",
            *(["--sim", sim] if sim else []),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    say(f"  exit {done.returncode}" + (f": {done.stderr.strip()}" if done.returncode else ""))
    if done.returncode != 0:
        return
    if out:
        with open(os.path.join(out, "snapshot.json"), "w", encoding="utf-8") as f:
            f.write(done.stdout)
    snap = json.loads(done.stdout)
    for c in snap.get("collectors", []):
        if c["name"] in NEW_COLLECTORS:
            why = f" unsupported on {c['unsupported']}" if c.get("unsupported") else ""
            say(f"  collector {c['name']}: success={c['success']}{why}")
    for g in snap.get("gpus", []):
        say(f"  GPU {g['index']}: recovery {g.get('recovery')}")
        say(f"  GPU {g['index']}: conf_compute {g.get('conf_compute')}")
        say(
            f"  GPU {g['index']}: accounting_enabled {g.get('accounting_enabled')}, "
            f"records {len(g.get('accounting') or [])}, unsupported {g.get('unsupported')}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", help="folder for driver_surfaces.txt and snapshot.json")
    parser.add_argument("--no-snapshot", action="store_true", help="probe NVML only")
    parser.add_argument("--sim", help="rehearse on a simulated scenario instead of the GPU")
    args = parser.parse_args()
    try:
        if args.sim:
            from vgpumon.sim import create

            pynvml: Any = create(args.sim)
        else:
            import pynvml  # type: ignore[no-redef]

        pynvml.nvmlInit()
    except Exception as err:  # noqa: BLE001
        print(f"cannot start NVML: {err}", file=sys.stderr)
        return 2
    try:
        version = metadata.version("nvidia-ml-py") + (
            f" (simulated: {args.sim})" if args.sim else ""
        )
    except metadata.PackageNotFoundError:
        version = "unknown"
    say(f"nvidia-ml-py {version}, driver {pynvml.nvmlSystemGetDriverVersion()}")
    try:
        probe_system(pynvml)
        for index in range(pynvml.nvmlDeviceGetCount()):
            probe_gpu(pynvml, index)
    finally:
        pynvml.nvmlShutdown()
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    if not args.no_snapshot:
        snapshot(args.out, args.sim)
    if args.out:
        with open(os.path.join(args.out, "driver_surfaces.txt"), "w", encoding="utf-8") as f:
            f.write("\n".join(LINES) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
