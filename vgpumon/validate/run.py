"""Run the validate ladder: for each step change the load, let it settle, measure, compare.

The order within a step is what keeps a reading about one load only: the load is applied (the
driver returns once every worker runs it), then ``settle_s`` passes, then the source starts a
window (an in-process sampler cycles so that GPM intervals begin here; an exporter is waited on
for two fresh samples), then readings are taken every ``sample_interval_s`` for ``window_s``.

Memory is checked as growth over the memory used before any of our load ran: the idle step's
reading, or a single reading taken before the first load when the idle step is not selected.

A load that fails (out of memory, a worker that dies) fails its step and the ladder goes on; a
source that fails (the exporter went away) ends the run, since no later step could be read either.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.loadgen.runner import WorkerInfo
from vgpumon.validate.drivers import LoadDriver, same_device
from vgpumon.validate.readings import Measurement, Reading, Target, aggregate
from vgpumon.validate.sources import ReadingSource, RealTimer, SourceError, Timer
from vgpumon.validate.steps import (
    ERROR,
    FAIL,
    PASS,
    SKIP,
    CheckContext,
    CheckResult,
    Step,
    Tolerances,
    evaluate,
    step_status,
)

NOT_RUN = "not run"
MAX_SLEEP_CHUNK_S = 0.25  # progress updates while settling
MIN_SAMPLE_INTERVAL_S = 0.1  # GPM reads nothing from two samples closer than this


@dataclass(frozen=True)
class Timing:
    settle_s: float = 2.0
    window_s: float = 3.0
    sample_interval_s: float = 0.5
    # A window without a single reading is extended by at most this long before it fails.
    grace_s: float = 10.0

    def validate(self) -> Timing:
        if not (self.settle_s >= 0 and self.window_s > 0):
            raise ConfigError("settle time must be >= 0 and the measurement window > 0 seconds")
        if not self.sample_interval_s >= MIN_SAMPLE_INTERVAL_S:
            raise ConfigError(
                f"the sample interval must be at least {MIN_SAMPLE_INTERVAL_S * 1000:g} ms "
                f"(GPM needs that between two samples), got {self.sample_interval_s:g} s"
            )
        if self.sample_interval_s > self.window_s:
            raise ConfigError(
                f"the sample interval ({self.sample_interval_s:g} s) is longer than the "
                f"measurement window ({self.window_s:g} s)"
            )
        return self

    def to_dict(self) -> dict[str, float]:
        return {
            "settle_s": self.settle_s,
            "window_s": self.window_s,
            "sample_interval_s": self.sample_interval_s,
        }


@dataclass(frozen=True)
class Plan:
    device: str
    steps: tuple[Step, ...]
    timing: Timing = field(default_factory=Timing)
    tolerances: Tolerances = field(default_factory=Tolerances)
    # The workers must report the target's UUID (off when an exporter elsewhere names the GPU).
    check_load_device: bool = True
    # An exporter in another PID namespace lists the load under other PIDs.
    pids_may_differ: bool = False


@dataclass(frozen=True)
class StepResult:
    step: Step
    status: str  # PASS, FAIL, SKIP, ERROR, NOT_RUN
    checks: tuple[CheckResult, ...] = ()
    measurement: Measurement | None = None
    workers: tuple[WorkerInfo, ...] = ()
    worker_duty: Mapping[int, float] = field(default_factory=dict)
    error: str | None = None
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, object]:
        return {
            **self.step.to_dict(),
            "status": self.status,
            "error": self.error,
            "elapsed_s": round(self.elapsed_s, 3),
            "workers": [
                {
                    "pid": w.pid,
                    "uuid": w.uuid,
                    "sm_count": w.sm_count,
                    "blocks": w.blocks,
                    "memory_bytes": w.memory_bytes,
                    "measured_duty": self.worker_duty.get(w.pid),
                }
                for w in self.workers
            ],
            "measurement": None if self.measurement is None else self.measurement.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
        }


@dataclass
class Report:
    source: str
    driver: str
    plan: Plan
    target: Target | None = None
    steps: list[StepResult] = field(default_factory=list)
    baseline_memory: int | None = None
    aborted: str | None = None
    notes: list[str] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    elapsed_s: float = 0.0

    def checks(self) -> list[CheckResult]:
        return [c for s in self.steps for c in s.checks]

    def counts(self) -> dict[str, int]:
        out = {PASS: 0, FAIL: 0, SKIP: 0, ERROR: 0}
        for c in self.checks():
            out[c.status] = out.get(c.status, 0) + 1
        out[NOT_RUN] = sum(1 for s in self.steps if s.status == NOT_RUN)
        return out

    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks() if c.status in (FAIL, ERROR)]

    @property
    def ok(self) -> bool:
        return self.aborted is None and not self.failures() and bool(self.steps)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def to_dict(self) -> dict[str, object]:
        from vgpumon import __version__

        return {
            "vgpumon_version": __version__,
            "status": "pass" if self.ok else "fail",
            "exit_code": self.exit_code,
            "source": self.source,
            "load": self.driver,
            "target": None if self.target is None else self.target.to_dict(),
            "settings": {
                "device": self.plan.device,
                **self.plan.timing.to_dict(),
                "tolerances": self.plan.tolerances.to_dict(),
            },
            "baseline_memory_bytes": self.baseline_memory,
            "counts": self.counts(),
            "aborted": self.aborted,
            "notes": list(self.notes),
            "started_at": self.started_at,
            "elapsed_s": round(self.elapsed_s, 3),
            "steps": [s.to_dict() for s in self.steps],
            "failures": [c.message for c in self.failures()],
        }


class Progress:
    """What a display hears while the ladder runs; this base class shows nothing."""

    def started(self, report: Report) -> None:
        """The target is known; the ladder is about to start."""

    def step_started(self, index: int, step: Step) -> None:
        """Step ``index`` (0-based) of the plan begins."""

    def phase(self, step: Step, text: str, fraction: float | None = None) -> None:
        """What the step does now (``fraction`` of it done, when that is known)."""

    def reading(self, step: Step, reading: Reading, fraction: float) -> None:
        """A reading arrived; ``fraction`` of the window has passed."""

    def step_finished(self, result: StepResult) -> None:
        """A step has its checks."""

    def finished(self, report: Report) -> None:
        """The run is over (also after an abort)."""


class Validation:
    """One run of the ladder against a source, with a driver putting the load on the device."""

    def __init__(
        self,
        plan: Plan,
        source: ReadingSource,
        driver: LoadDriver | Callable[[Target], LoadDriver],
        *,
        timer: Timer | None = None,
        progress: Progress | None = None,
    ) -> None:
        """``driver`` may be a factory called with the resolved target (the simulator's driver
        needs to know which simulated device it loads)."""
        self.plan = plan
        self.source = source
        self._driver_or_factory = driver
        self.driver: LoadDriver | None = None
        self.timer: Timer = timer or RealTimer()
        self.progress = progress or Progress()
        self._baseline_taken = False
        self._baseline_pids: frozenset[int] = frozenset()

    async def run(self) -> Report:
        """Open the source, resolve the target, run every step; the load is always stopped.

        Errors before the first step (no GPU, a bad ``--device``, an unreachable exporter) are
        raised; errors during the ladder end up in the report.
        """
        report = Report(source=self.source.name, driver="", plan=self.plan)
        started = self.timer.now()
        try:
            await self.source.open()
            report.target = await self.source.resolve(self.plan.device)
            report.source = self.source.name
            report.notes.extend(self.source.notes())  # before the ladder: the display says them
            made = self._driver_or_factory
            driver = made if isinstance(made, LoadDriver) else made(report.target)
            self.driver = driver
            report.driver = driver.name
            self.progress.started(report)
            try:
                await self._ladder(report)
            finally:
                await driver.close()
        finally:
            await self.source.close()
            report.elapsed_s = self.timer.now() - started
        self.progress.finished(report)
        return report

    async def _ladder(self, report: Report) -> None:
        assert report.target is not None
        for index, step in enumerate(self.plan.steps):
            if report.aborted is not None:
                report.steps.append(StepResult(step, NOT_RUN, error=report.aborted))
                continue
            self.progress.step_started(index, step)
            try:
                result = await self._step(step, report)
            except VgpumonError as err:
                if isinstance(err, SourceError):
                    report.aborted = str(err)
                result = self._error(step, str(err), self.timer.now())
            report.steps.append(result)
            self.progress.step_finished(result)

    async def _step(self, step: Step, report: Report) -> StepResult:
        target = report.target
        assert target is not None and self.driver is not None
        began = self.timer.now()

        if step.load is not None and not self._baseline_taken:
            await self._baseline(step, report)

        verb = "stopping the load" if step.load is None else "applying the load"
        self.progress.phase(step, verb)
        try:
            workers = tuple(await self.driver.apply(step.load))
        except VgpumonError as err:
            return self._error(step, f"load: {err}", began)
        if self.plan.check_load_device:
            # CUDA names a MIG device by its own UUID (cuDeviceGetUuid_v2) or, through the older
            # call, by its GPU's: either is the target.
            accepted = {target.load_device, target.gpu_uuid}
            for w in workers:
                if w.uuid and not any(same_device(w.uuid, u) for u in accepted):
                    return self._error(
                        step,
                        f"the load ran on device {w.uuid}, not on the target {target.load_device}",
                        began,
                        workers,
                    )

        await self._settle(step)
        self.progress.phase(step, "waiting for fresh samples")
        await self.source.start_window()
        readings = await self._window(step, target)

        problem = self.driver.problem()
        if problem is not None:
            return self._error(step, f"load: {problem}", began, workers)
        measurement = aggregate(readings)
        if step.load is None and not self._baseline_taken:
            self._take_baseline(report, measurement, readings)
        ctx = CheckContext(
            target=target,
            baseline_memory=report.baseline_memory,
            baseline_pids=self._baseline_pids,
            pids_may_differ=self.plan.pids_may_differ,
        )
        checks = evaluate(step, measurement, workers, ctx, self.plan.tolerances)
        return StepResult(
            step,
            step_status(checks),
            checks,
            measurement,
            workers,
            dict(self.driver.measured_duty()),
            elapsed_s=self.timer.now() - began,
        )

    def _error(
        self, step: Step, message: str, began: float, workers: Sequence[WorkerInfo] = ()
    ) -> StepResult:
        check = CheckResult(step.name, "step", ERROR, reason=message, unit="none")
        return StepResult(
            step,
            ERROR,
            (check,),
            workers=tuple(workers),
            error=message,
            elapsed_s=self.timer.now() - began,
        )

    async def _settle(self, step: Step) -> None:
        total = self.plan.timing.settle_s
        end = self.timer.now() + total
        while True:
            left = end - self.timer.now()
            done = 1.0 - left / total if total > 0 else 1.0
            self.progress.phase(step, f"settling ({max(0.0, left):.1f} s)", min(1.0, done))
            if left <= 0:
                return
            await self.timer.sleep(min(MAX_SLEEP_CHUNK_S, left))

    async def _window(self, step: Step, target: Target) -> list[Reading]:
        timing = self.plan.timing
        start = self.timer.now()
        end = start + timing.window_s
        readings: list[Reading] = []
        k = 0
        self.progress.phase(step, "measuring", 0.0)
        while True:
            k += 1
            wake = start + k * timing.sample_interval_s
            await self.timer.sleep(wake - self.timer.now())
            reading = await self.source.read(target)
            now = self.timer.now()
            fraction = min(1.0, (now - start) / timing.window_s)
            if reading is not None:
                readings.append(reading)
                self.progress.reading(step, reading, fraction)
            if now >= end - 1e-9 and readings:
                return readings
            if now >= end + timing.grace_s:
                return readings

    async def _baseline(self, step: Step, report: Report) -> None:
        """Memory used (and PIDs listed) before our load, when no idle step measured them."""
        assert report.target is not None and self.driver is not None
        self.progress.phase(step, "reading the idle baseline")
        await self.driver.apply(None)
        await self.source.start_window()
        readings: list[Reading] = []
        deadline = self.timer.now() + self.plan.timing.grace_s
        while not readings and self.timer.now() < deadline:
            await self.timer.sleep(self.plan.timing.sample_interval_s)
            reading = await self.source.read(report.target)
            if reading is not None:
                readings.append(reading)
        self._take_baseline(report, aggregate(readings), readings)

    def _take_baseline(
        self, report: Report, measurement: Measurement, readings: Sequence[Reading]
    ) -> None:
        self._baseline_taken = True
        report.baseline_memory = measurement.memory_used_bytes
        pids: set[int] = set()
        for r in readings:
            pids.update(p.pid for p in r.processes or ())
        self._baseline_pids = frozenset(pids)
        if pids:
            report.notes.append(
                "before the load the device already listed pids "
                + ", ".join(str(p) for p in sorted(pids))
            )
