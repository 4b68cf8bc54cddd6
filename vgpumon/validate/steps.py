"""The validate ladder and what each step expects: pure logic, no GPU, no I/O.

Each expectation follows from how the load generator works and what a real GPU showed
(``bench/results/loadgen-device.md``, ``docs/validation.md``), with the spin kernel only:

* NVML utilization counts time with any kernel running: it reads the duty cycle.
* GPM SM activity counts busy SMs: duty × blocks / SMs, one block per SM. On a MIG device it is
  read for the GPU instance, whose SMs the MIG device may share with sibling compute instances.
* Memory used grows by the footprint plus one CUDA context per process (its size depends on the
  GPU and driver, smaller on MIG devices); the allowance per process is a tolerance.
* NVML lists each worker PID with at least its footprint share (plus its context).
* Per-process SM utilization reads the process's own busy time (its duty); NVML gives it as
  coarse samples about once a second, so its tolerance is looser.
* Several processes time-slice the GPU: their busy phases neither add up nor exclude each other.
  The GPU is busy for the union of the phases, which is at least the longest one and at most
  their sum, and each process gets between an equal share of its own busy time and all of it.
  These are ranges, not points.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from vgpumon.errors import ConfigError
from vgpumon.loadgen.runner import WorkerInfo
from vgpumon.loadgen.spec import format_bytes
from vgpumon.validate.readings import (
    GPM,
    MEMORY,
    PROCESS_UTILIZATION,
    PROCESSES,
    UTILIZATION,
    Measurement,
    ProcessMeasurement,
    Target,
)

MIB = 1024**2
GIB = 1024**3

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
ERROR = "error"

DEFAULT_MEMORY = 256 * MIB
DEFAULT_MEMORY_STEP = 1 * GIB
DEFAULT_PROCESSES = 2
DEFAULT_CONTEXT_ALLOWANCE = 1 * GIB

CHECK_LABELS = {
    UTILIZATION: "NVML utilization",
    GPM: "GPM SM activity",
    MEMORY: "memory used",
    PROCESSES: "process listed",
    PROCESS_UTILIZATION: "process SM utilization",
}
_EPS = 1e-9


@dataclass(frozen=True)
class Tolerances:
    """How far a reading may be from its expectation.

    Ratios are absolute (0.02 = 2 percentage points). ``context_bytes`` is what each process
    may hold beyond its footprint: the CUDA context, whose size depends on the GPU and driver.
    """

    utilization: float = 0.02
    gpm: float = 0.02
    process_utilization: float = 0.10
    context_bytes: int = DEFAULT_CONTEXT_ALLOWANCE

    def validate(self) -> Tolerances:
        for name, value in (
            ("utilization", self.utilization),
            ("GPM", self.gpm),
            ("process utilization", self.process_utilization),
        ):
            if not (math.isfinite(value) and 0.0 <= value <= 1.0):
                raise ConfigError(
                    f"{name} tolerance must be between 0 and 1 (a ratio: 0.02 = 2 points), "
                    f"got {value:g}"
                )
        if self.context_bytes < 0:
            raise ConfigError(f"memory tolerance must not be negative, got {self.context_bytes}")
        return self

    def to_dict(self) -> dict[str, float | int]:
        return {
            "utilization": self.utilization,
            "gpm": self.gpm,
            "process_utilization": self.process_utilization,
            "context_bytes": self.context_bytes,
        }


@dataclass(frozen=True)
class StepLoad:
    """The load of one step: ``memory_bytes`` is the total over ``processes`` (equal shares)."""

    duty: float
    sm_fraction: float = 1.0
    memory_bytes: int = 0
    processes: int = 1

    def to_dict(self) -> dict[str, float | int]:
        return {
            "duty": self.duty,
            "sm_fraction": self.sm_fraction,
            "memory_bytes": self.memory_bytes,
            "processes": self.processes,
        }


@dataclass(frozen=True)
class Step:
    name: str
    description: str
    load: StepLoad | None  # None: nothing runs (the idle step)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "description": self.description,
            "load": None if self.load is None else self.load.to_dict(),
        }


def default_ladder(
    *,
    memory_bytes: int = DEFAULT_MEMORY,
    memory_step_bytes: int = DEFAULT_MEMORY_STEP,
    processes: int = DEFAULT_PROCESSES,
) -> tuple[Step, ...]:
    """Idle; duty 0.25 → 1 on every SM; full duty on half and a quarter of the SMs; a larger
    footprint; several processes. One load runs through the duty and SM steps (changed live, the
    PIDs stay); the memory and multi-process steps start their own."""
    if memory_bytes < 0 or memory_step_bytes < 0:
        raise ConfigError("memory footprints must not be negative")
    if processes < 2:
        raise ConfigError(f"the multi-process step needs at least 2 processes, got {processes}")
    mem = format_bytes(memory_bytes)
    steps = [Step("idle", "no load: nothing of ours runs on the device", None)]
    for duty in (0.25, 0.5, 0.75, 1.0):
        steps.append(
            Step(
                f"duty-{duty:.2f}",
                f"one process, duty {duty:g} on every SM, {mem} held",
                StepLoad(duty=duty, sm_fraction=1.0, memory_bytes=memory_bytes),
            )
        )
    for fraction in (0.5, 0.25):
        steps.append(
            Step(
                f"sm-{fraction:.2f}",
                f"one process, duty 1 on {fraction:g} of the SMs, {mem} held",
                StepLoad(duty=1.0, sm_fraction=fraction, memory_bytes=memory_bytes),
            )
        )
    steps.append(
        Step(
            "memory",
            f"one process holding {format_bytes(memory_step_bytes)}, duty 0.5",
            StepLoad(duty=0.5, memory_bytes=memory_step_bytes),
        )
    )
    steps.append(
        Step(
            "multi-process",
            f"{processes} processes, duty 0.5 each, {mem} each",
            StepLoad(duty=0.5, memory_bytes=memory_bytes * processes, processes=processes),
        )
    )
    return tuple(steps)


def select_steps(ladder: Sequence[Step], selection: str | None) -> tuple[Step, ...]:
    """Steps named in a comma list, in ladder order (the idle step is the memory baseline, so it
    stays first). A name also selects its group: ``duty`` is every ``duty-…`` step."""
    if selection is None or selection.strip() in ("", "all"):
        return tuple(ladder)
    wanted = [s.strip() for s in selection.split(",") if s.strip()]
    if not wanted:
        raise ConfigError(f"--steps {selection!r} names no step")
    chosen: set[str] = set()
    for token in wanted:
        hits = {s.name for s in ladder if s.name == token or s.name.startswith(token + "-")}
        if not hits:
            names = ", ".join(s.name for s in ladder)
            raise ConfigError(f"unknown step {token!r}: choose from {names} (or duty, sm, all)")
        chosen |= hits
    return tuple(s for s in ladder if s.name in chosen)


# ---------------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class CheckResult:
    """One comparison of a step: expected vs measured, and whether it passed."""

    step: str
    check: str  # UTILIZATION, GPM, MEMORY, PROCESSES, PROCESS_UTILIZATION, or "step"
    status: str  # PASS, FAIL, SKIP, ERROR
    expected: str = ""
    measured: str = ""
    subject: str | None = None  # "pid 1234", "GPU instance 3"
    reason: str = ""
    unit: str = "ratio"  # ratio | bytes | none
    value: float | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float | None = None

    @property
    def label(self) -> str:
        base = CHECK_LABELS.get(self.check, self.check)
        return f"{base} ({self.subject})" if self.subject else base

    @property
    def message(self) -> str:
        """One readable line: step, check, expected, measured, tolerance, why."""
        head = f"step {self.step}: {self.label}"
        if self.status == SKIP:
            return f"{head}: skipped: {self.reason}"
        if self.status == ERROR:
            return f"{head}: error: {self.reason}"
        text = f"{head}: expected {self.expected}, measured {self.measured}"
        if self.reason:
            text += f" ({self.reason})"
        return f"{text}: {self.status.upper()}"

    def to_dict(self) -> dict[str, object]:
        return {
            "step": self.step,
            "check": self.check,
            "subject": self.subject,
            "status": self.status,
            "expected": self.expected,
            "measured": self.measured,
            "reason": self.reason,
            "unit": self.unit,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "tolerance": self.tolerance,
            "message": self.message,
        }


@dataclass(frozen=True)
class CheckContext:
    """Facts about the run that expectations need beyond the step and its workers.

    ``baseline_memory``: memory used before any of our load ran (the idle step). With
    ``pids_may_differ`` (an exporter on another host or PID namespace), a worker whose PID is not
    listed may be matched to a new process holding at least its footprint.
    """

    target: Target
    baseline_memory: int | None = None
    baseline_pids: frozenset[int] = field(default_factory=frozenset)
    pids_may_differ: bool = False


def pct(ratio: float) -> str:
    return f"{ratio * 100:.1f}%"


def pp(ratio: float) -> str:
    return f"{ratio * 100:.1f} pp"


def _band_text(low: float, high: float, tol: float) -> str:
    if high <= _EPS:
        return f"≤ {pct(tol)}"
    if abs(high - low) <= _EPS:
        return f"{pct(low)} ± {pp(tol)}"
    return f"{pct(low)} … {pct(high)} ± {pp(tol)}"


def ratio_check(
    step: str,
    check: str,
    value: float | None,
    low: float,
    high: float,
    tol: float,
    *,
    absent_reason: str,
    subject: str | None = None,
    note: str = "",
) -> CheckResult:
    """``value`` within [low − tol, high + tol]; skipped (with the reason) when it is absent."""
    expected = _band_text(low, high, tol)
    if value is None:
        return CheckResult(
            step,
            check,
            SKIP,
            expected,
            "—",
            subject,
            f"not supported: {absent_reason}",
            low=low,
            high=high,
            tolerance=tol,
        )
    below = (low - tol) - value
    above = value - (high + tol)
    ok = below <= _EPS and above <= _EPS
    reason = note
    if not ok:
        off = below if below > 0 else above
        side = "below" if below > 0 else "above"
        reason = f"{pp(off)} {side} the tolerance band" + (f"; {note}" if note else "")
    return CheckResult(
        step,
        check,
        PASS if ok else FAIL,
        expected,
        pct(value),
        subject,
        reason,
        value=value,
        low=low,
        high=high,
        tolerance=tol,
    )


def expected_utilization(load: StepLoad | None) -> tuple[float, float]:
    """NVML utilization band: the duty; for several processes the union of their busy phases."""
    if load is None:
        return 0.0, 0.0
    return load.duty, min(1.0, load.duty * load.processes)


def worker_sm_share(worker: WorkerInfo, target: Target) -> float | None:
    """Fraction of the GPM scope's SMs one worker keeps busy while it runs."""
    if worker.sm_count <= 0:
        return None
    share = min(1.0, worker.blocks / worker.sm_count)
    if target.is_mig:
        if target.mig_share is None:
            return None
        share *= target.mig_share
    return share


def expected_gpm(
    load: StepLoad | None, workers: Sequence[WorkerInfo], target: Target
) -> tuple[float, float] | None:
    """GPM SM activity band: duty × blocks / SMs; several processes: from the busiest one's to
    the sum of them all. ``None`` when a share of SMs cannot be told."""
    if load is None:
        return 0.0, 0.0
    shares = [worker_sm_share(w, target) for w in workers]
    if not shares or any(s is None for s in shares):
        return None
    busy = [load.duty * float(s or 0.0) for s in shares]
    return max(busy), min(1.0, sum(busy))


def expected_process_utilization(load: StepLoad) -> tuple[float, float]:
    """Per-process SM utilization band; for several processes, the band of their *sum*.

    Processes time-slice the GPU, and NVML splits the samples between them unevenly (one of two
    sometimes reads 0 for a whole window; docs/validation.md has the readings). Only the
    sum follows the load: from one process's duty (busy phases fully overlapping) to the sum of
    the duties (not overlapping at all).
    """
    if load.processes <= 1:
        return load.duty, load.duty
    return load.duty, min(1.0, load.duty * load.processes)


def evaluate(
    step: Step,
    measurement: Measurement,
    workers: Sequence[WorkerInfo],
    ctx: CheckContext,
    tol: Tolerances,
) -> tuple[CheckResult, ...]:
    """Every check of one step against its measurement."""
    if measurement.error is not None:
        return (CheckResult(step.name, "step", ERROR, reason=measurement.error, unit="none"),)
    results: list[CheckResult] = []
    absent = measurement.absent
    target = ctx.target
    load = step.load

    low, high = expected_utilization(load)
    results.append(
        ratio_check(
            step.name,
            UTILIZATION,
            measurement.utilization,
            low,
            high,
            tol.utilization,
            absent_reason=absent.get(UTILIZATION, "no utilization reading"),
        )
    )

    gpm_subject = f"GPU instance {target.gpu_instance_id}" if target.is_mig else None
    band = expected_gpm(load, workers, target)
    if band is None:
        results.append(
            CheckResult(
                step.name,
                GPM,
                SKIP,
                "—",
                "—",
                gpm_subject,
                "cannot tell what share of the GPU instance's SMs the MIG device has"
                if target.is_mig
                else "the load's workers did not report their SM count",
            )
        )
    else:
        results.append(
            ratio_check(
                step.name,
                GPM,
                measurement.gpm_sm_active,
                band[0],
                band[1],
                tol.gpm,
                absent_reason=absent.get(GPM, "no GPM reading"),
                subject=gpm_subject,
                note="" if load is None else _blocks_note(workers),
            )
        )

    if load is not None:
        results.append(_memory_check(step, measurement, workers, ctx, tol))
        results.extend(_process_checks(step, load, measurement, workers, ctx, tol))
    return tuple(results)


def _blocks_note(workers: Sequence[WorkerInfo]) -> str:
    parts = sorted({f"{w.blocks}/{w.sm_count} SMs" for w in workers})
    return ", ".join(parts)


def _memory_check(
    step: Step,
    m: Measurement,
    workers: Sequence[WorkerInfo],
    ctx: CheckContext,
    tol: Tolerances,
) -> CheckResult:
    footprint = sum(w.memory_bytes for w in workers)
    low = float(footprint)
    high = float(footprint + tol.context_bytes * max(1, len(workers)))
    subject = f"GPU instance {ctx.target.gpu_instance_id}" if ctx.target.is_mig else None
    expected = f"+{format_bytes(footprint)} … +{format_bytes(int(high))}"
    if m.memory_used_bytes is None:
        return CheckResult(
            step.name,
            MEMORY,
            SKIP,
            expected,
            "—",
            subject,
            f"not supported: {m.absent.get(MEMORY, 'no memory reading')}",
            unit="bytes",
            low=low,
            high=high,
        )
    if ctx.baseline_memory is None:
        return CheckResult(
            step.name,
            MEMORY,
            SKIP,
            expected,
            format_bytes(m.memory_used_bytes),
            subject,
            "no baseline: memory used before the load could not be read",
            unit="bytes",
            low=low,
            high=high,
        )
    grown = m.memory_used_bytes - ctx.baseline_memory
    ok = low <= grown <= high
    sign = "+" if grown >= 0 else "-"
    measured = f"{sign}{format_bytes(abs(grown))}"
    reason = f"{format_bytes(m.memory_used_bytes)} used, {format_bytes(ctx.baseline_memory)} idle"
    if not ok:
        reason = (
            "grew by less than the footprint; "
            if grown < low
            else "grew by more than the footprint plus one context allowance per process; "
        ) + reason
    return CheckResult(
        step.name,
        MEMORY,
        PASS if ok else FAIL,
        expected,
        measured,
        subject,
        reason,
        unit="bytes",
        value=float(grown),
        low=low,
        high=high,
        tolerance=float(tol.context_bytes),
    )


def _match_processes(
    workers: Sequence[WorkerInfo], m: Measurement, ctx: CheckContext
) -> dict[int, tuple[ProcessMeasurement | None, str]]:
    """Each worker's entry in the process list (by PID; by footprint where PIDs may differ)."""
    listed = dict(m.processes or {})
    out: dict[int, tuple[ProcessMeasurement | None, str]] = {}
    taken = {w.pid for w in workers if w.pid in listed}
    for w in workers:
        if w.pid in listed:
            out[w.pid] = (listed[w.pid], "")
            continue
        if not ctx.pids_may_differ:
            out[w.pid] = (None, "")
            continue
        candidates = [
            p
            for pid, p in sorted(listed.items())
            if pid not in taken
            and pid not in ctx.baseline_pids
            and (p.used_memory_bytes is None or p.used_memory_bytes >= w.memory_bytes)
        ]
        if candidates:
            chosen = candidates[0]
            taken.add(chosen.pid)
            out[w.pid] = (
                chosen,
                f"matched by footprint to listed pid {chosen.pid} (another PID namespace)",
            )
        else:
            out[w.pid] = (None, "")
    return out


def _process_checks(
    step: Step,
    load: StepLoad,
    m: Measurement,
    workers: Sequence[WorkerInfo],
    ctx: CheckContext,
    tol: Tolerances,
) -> Iterable[CheckResult]:
    util_low, util_high = expected_process_utilization(load)
    util_text = _band_text(util_low, util_high, tol.process_utilization)
    if m.processes is None:
        why = f"not supported: {m.absent.get(PROCESSES, 'no process list')}"
        for w in workers:
            subject = f"pid {w.pid}"
            yield CheckResult(step.name, PROCESSES, SKIP, "listed", "—", subject, why, "none")
            yield CheckResult(step.name, PROCESS_UTILIZATION, SKIP, util_text, "—", subject, why)
        return
    matches = _match_processes(workers, m, ctx)
    summed = load.processes > 1
    shares: list[float | None] = []
    for w in workers:
        subject = f"pid {w.pid}"
        found, note = matches[w.pid]
        low = w.memory_bytes
        high = w.memory_bytes + tol.context_bytes
        expected = f"listed, {format_bytes(low)} … {format_bytes(high)}"
        if found is None:
            yield CheckResult(
                step.name,
                PROCESSES,
                FAIL,
                expected,
                "not listed",
                subject,
                f"NVML does not list the load's process (it lists {_pid_list(m.processes)})",
                "bytes",
                low=float(low),
                high=float(high),
            )
            yield CheckResult(
                step.name,
                PROCESS_UTILIZATION,
                SKIP,
                util_text,
                "—",
                subject,
                "the process is not listed",
            )
            continue
        mem = found.used_memory_bytes
        if mem is None:
            yield CheckResult(
                step.name,
                PROCESSES,
                PASS,
                expected,
                "listed, memory not reported",
                subject,
                note or "NVML gives no per-process memory here",
                "bytes",
                low=float(low),
                high=float(high),
            )
        else:
            ok = low <= mem <= high
            reason = note
            if not ok:
                reason = (
                    "holds less than its footprint"
                    if mem < low
                    else "holds more than its footprint plus the context allowance"
                ) + (f"; {note}" if note else "")
            yield CheckResult(
                step.name,
                PROCESSES,
                PASS if ok else FAIL,
                expected,
                f"listed, {format_bytes(mem)}",
                subject,
                reason,
                "bytes",
                value=float(mem),
                low=float(low),
                high=float(high),
                tolerance=float(tol.context_bytes),
            )
        if summed:
            shares.append(found.sm_utilization)
            continue
        sample_note = ""
        if found.zero_readings:
            sample_note = (
                f"mean of {found.sm_readings} readings with a sample, {found.zero_readings} without"
            )
        yield ratio_check(
            step.name,
            PROCESS_UTILIZATION,
            found.sm_utilization,
            util_low,
            util_high,
            tol.process_utilization,
            absent_reason=m.absent.get(
                PROCESS_UTILIZATION, "NVML gave no per-process utilization for this process"
            ),
            subject=subject,
            note=sample_note,
        )
    if summed and shares:
        values = [s for s in shares if s is not None]
        yield ratio_check(
            step.name,
            PROCESS_UTILIZATION,
            sum(values) if len(values) == len(shares) else None,
            util_low,
            util_high,
            tol.process_utilization,
            absent_reason=m.absent.get(
                PROCESS_UTILIZATION, "NVML gave no per-process utilization for a load process"
            ),
            subject="sum over " + ", ".join(f"pid {w.pid}" for w in workers),
            note="NVML splits time-sliced processes unevenly; their sum follows the load",
        )


def _pid_list(processes: object) -> str:
    pids = sorted(processes) if isinstance(processes, dict) else []
    if not pids:
        return "none"
    return "pids " + ", ".join(str(p) for p in pids[:8]) + (" …" if len(pids) > 8 else "")


def step_status(results: Sequence[CheckResult]) -> str:
    """ERROR or FAIL if any check is; PASS if any passed; SKIP if every check was skipped."""
    statuses = {r.status for r in results}
    for status in (ERROR, FAIL, PASS):
        if status in statuses:
            return status
    return SKIP
