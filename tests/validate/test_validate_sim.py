"""The whole validate ladder against the simulator, whose load follows the ladder live.

The simulator's clock is a ManualClock moved by the run's own sleeps, so a full ladder (about 50
scenario seconds) takes a fraction of a second. The readers are the exporter's, untouched, except
in the test that swaps one for a deliberately wrong one to show that the check can fail.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections.abc import Mapping
from typing import Any

import pytest
from rich.console import Console
from validate_helpers import SimRun

from vgpumon.collect.base import FunctionReader, GpuBuilder, GpuContext
from vgpumon.collect.registry import all_readers
from vgpumon.errors import ConfigError, VgpumonError
from vgpumon.loadgen.runner import WorkerInfo
from vgpumon.model import Utilization
from vgpumon.sim import parse_scenario
from vgpumon.validate.display import RichProgress, print_report
from vgpumon.validate.drivers import SimDriver
from vgpumon.validate.readings import GPM, UTILIZATION, Target
from vgpumon.validate.report import report_json
from vgpumon.validate.run import NOT_RUN, Timing
from vgpumon.validate.steps import ERROR, FAIL, PASS, SKIP, StepLoad

GIB = 1024**3

MIG_SPLIT = parse_scenario(
    """
name: validate-mig-split
seed: 3
gpus:
  - model: h100-sxm-80gb
    mig:
      enabled: true
      instances:
        - profile: 3g.40gb
          compute_instances: [1, 1, 1]
        - profile: 1g.10gb
""",
    "validate-mig-split",
)

LOST_AT_12S = parse_scenario(
    """
name: validate-lost
seed: 4
gpus:
  - model: h200-nvl-141gb
faults:
  - kind: gpu_lost
    gpus: [0]
    from: 12s
""",
    "validate-lost",
)


def statuses(report) -> dict[str, str]:
    return {s.step.name: s.status for s in report.steps}


async def test_every_step_passes_on_the_simulated_h200():
    run = SimRun("passthrough-guest")
    report = await run.run("0")
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert len(report.steps) == 9
    assert set(statuses(report).values()) == {PASS}
    counts = report.counts()
    assert counts[FAIL] == counts[ERROR] == counts[SKIP] == 0
    # idle 2; six one-process steps and memory 5 each; two processes: 3 + listed per process
    # + one check of their summed SM utilization
    assert counts[PASS] == 2 + 6 * 5 + 5 + 3 + 2 + 1
    # the scenario's own process (pid 403, 874 MiB) is the baseline, not our load
    assert report.baseline_memory == 925_696_000
    # scenario seconds, not wall seconds: 9 steps x (2 s settle + 3 s window)
    assert run.timer.slept == pytest.approx(9 * 5.0, abs=0.5)
    duty = next(s for s in report.steps if s.step.name == "duty-0.75")
    assert duty.measurement is not None and duty.measurement.utilization == 0.75
    assert duty.measurement.readings == 6
    sm = next(s for s in report.steps if s.step.name == "sm-0.25")
    assert [w.blocks for w in sm.workers] == [33]
    assert sm.measurement is not None and sm.measurement.gpm_sm_active == pytest.approx(0.25)
    # the duty/SM steps keep their PIDs; memory and multi-process start new ones
    pids = {s.step.name: tuple(w.pid for w in s.workers) for s in report.steps}
    assert pids["duty-0.25"] == pids["sm-0.25"]
    assert pids["memory"] != pids["duty-0.25"] and len(pids["multi-process"]) == 2


def _halving_utilization_reader() -> list[Any]:
    """The exporter's readers with utilization replaced by one that reports half of it."""
    readers = all_readers()
    original = next(r for r in readers if r.name == "utilization")

    def wrong(ctx: GpuContext, out: GpuBuilder) -> None:
        original.read(ctx, out)
        util = out.get("utilization")
        if isinstance(util, Utilization) and util.gpu is not None:
            out.set(utilization=dataclasses.replace(util, gpu=util.gpu * 0.5))

    return [FunctionReader("utilization", wrong) if r is original else r for r in readers]


async def test_a_reader_reporting_half_the_utilization_fails_validate():
    run = SimRun("passthrough-guest", readers=_halving_utilization_reader())
    report = await run.run("0", steps="idle,duty")
    assert report.exit_code == 1
    failed = report.failures()
    assert {c.check for c in failed} == {UTILIZATION}
    assert [c.step for c in failed] == ["duty-0.25", "duty-0.50", "duty-0.75", "duty-1.00"]
    assert failed[1].message == (
        "step duty-0.50: NVML utilization: expected 50.0% ± 2.0 pp, measured 25.0% "
        "(23.0 pp below the tolerance band): FAIL"
    )
    assert statuses(report)["idle"] == PASS  # half of nothing is still nothing
    out = io.StringIO()
    print_report(report, stream=out, width=160)
    text = out.getvalue()
    assert "FAIL: " in text and failed[1].message in text
    row = next(line for line in text.splitlines() if "duty-0.50" in line)
    cells = [cell.strip() for cell in row.strip("│┃| ").split("│")]
    assert cells[:3] == ["duty-0.50", "NVML utilization", "50.0% ± 2.0 pp"], cells
    assert "25.0%" in cells[3] and cells[4] == "FAIL"
    data = json.loads(report_json(report))
    assert data["report_version"] == 1
    assert data["status"] == "fail" and data["exit_code"] == 1
    assert failed[1].message in data["failures"]


async def test_mig_device_checks_its_gpu_instance_and_skips_utilization():
    run = SimRun("h100-mig-gpm")
    await run.source.open()
    snap = run.source.sampler.latest
    assert snap is not None
    gi4 = next(gi for gi in snap.gpus[0].mig_instances if gi.id == 4)
    mig_uuid = gi4.compute_instances[0].mig_uuid
    assert mig_uuid is not None
    report = await run.run(mig_uuid)
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert report.target is not None and report.target.gpu_instance_id == 4
    checks = report.checks()
    util = [c for c in checks if c.check == UTILIZATION]
    assert util and all(c.status == SKIP for c in util)
    assert "no utilization for MIG devices" in util[0].reason
    gpm = [c for c in checks if c.check == GPM]
    assert all(c.status == PASS and c.subject == "GPU instance 4" for c in gpm)
    sm = next(s for s in report.steps if s.step.name == "sm-0.25")
    assert [w.blocks for w in sm.workers] == [4]  # 1g.10gb: 16 SMs
    # the other GPU instances' loads (100 %, 25 %, a square wave) do not leak into the check
    assert sm.measurement is not None and sm.measurement.gpm_sm_active == pytest.approx(0.25)


async def test_a_compute_instance_sharing_its_gpu_instance_counts_its_share():
    run = SimRun(MIG_SPLIT)
    await run.source.open()
    snap = run.source.sampler.latest
    assert snap is not None
    gi = snap.gpus[0].mig_instances[0]
    small = next(ci for ci in gi.compute_instances if ci.placement_size == 1)
    assert small.mig_uuid is not None
    report = await run.run(small.mig_uuid, steps="duty-1.00,sm-0.50")
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert report.target is not None and report.target.mig_share == pytest.approx(1 / 3)
    full = next(s for s in report.steps if s.step.name == "duty-1.00")
    # every SM of one compute slice of three, at full duty: a third of the GPU instance
    assert full.measurement is not None
    assert full.measurement.gpm_sm_active == pytest.approx(1 / 3, abs=0.01)


async def test_vgpu_guest_checks_what_the_guest_sees():
    run = SimRun("vgpu-guest")
    report = await run.run("1", steps="idle,duty-0.50,multi-process")
    assert report.exit_code == 0, [c.message for c in report.failures()]
    gpm = [c for c in report.checks() if c.check == GPM]
    assert gpm and all(c.status == SKIP for c in gpm)
    assert "vGPU guest" in gpm[0].reason
    assert all(c.status == PASS for c in report.checks() if c.check == UTILIZATION)


async def test_memory_baseline_without_the_idle_step():
    run = SimRun("passthrough-guest")
    report = await run.run("0", steps="memory")
    assert report.exit_code == 0, [c.message for c in report.failures()]
    assert report.baseline_memory == 925_696_000


async def test_a_gpu_lost_during_the_ladder_is_an_error_not_a_skip():
    run = SimRun(LOST_AT_12S)
    report = await run.run("0")
    assert report.exit_code == 1
    errors = [s for s in report.steps if s.status == ERROR]
    assert errors and "down" in (errors[0].checks[0].reason)
    assert statuses(report)["idle"] == PASS


class _Wrapped:
    """A SimDriver with one behaviour changed, to drive the error paths."""

    def __init__(self, inner: SimDriver, **overrides: Any) -> None:
        self.inner = inner
        self.overrides = overrides
        self.name = "wrapped " + inner.name
        self.closed = False

    async def apply(self, load: StepLoad | None) -> list[WorkerInfo]:
        hook = self.overrides.get("apply")
        if hook is not None:
            return await hook(self.inner, load)
        return await self.inner.apply(load)

    def problem(self) -> str | None:
        hook = self.overrides.get("problem")
        return hook() if hook is not None else None

    def measured_duty(self) -> Mapping[int, float]:
        return {}

    async def close(self) -> None:
        self.closed = True
        await self.inner.close()


async def test_a_load_that_cannot_start_fails_its_step_and_the_ladder_goes_on():
    run = SimRun("passthrough-guest")
    made: list[_Wrapped] = []

    async def oom(inner: SimDriver, load: StepLoad | None) -> list[WorkerInfo]:
        if load is not None and load.memory_bytes >= GIB:
            raise VgpumonError("out of GPU memory on device 0 while allocating memory")
        return await inner.apply(load)

    def factory(target: Target) -> _Wrapped:
        made.append(_Wrapped(SimDriver(run.module, target), apply=oom))
        return made[0]

    report = await run.run("0", steps="duty-0.50,memory,multi-process", driver=factory)
    assert statuses(report) == {"duty-0.50": PASS, "memory": ERROR, "multi-process": PASS}
    bad = report.failures()
    assert [c.message for c in bad] == [
        "step memory: step: error: load: out of GPU memory on device 0 while allocating memory"
    ]
    assert report.exit_code == 1 and made[0].closed


async def test_a_worker_that_dies_during_the_step_is_an_error():
    run = SimRun("passthrough-guest")

    def factory(target: Target) -> _Wrapped:
        return _Wrapped(
            SimDriver(run.module, target),
            problem=lambda: "load worker 41000 exited with status 1 during the step",
        )

    report = await run.run("0", steps="duty-0.50", driver=factory)
    assert statuses(report) == {"duty-0.50": ERROR}
    assert "exited with status 1" in report.failures()[0].message


async def test_load_on_another_device_is_refused():
    run = SimRun("passthrough-guest")

    async def elsewhere(inner: SimDriver, load: StepLoad | None) -> list[WorkerInfo]:
        workers = await inner.apply(load)
        return [dataclasses.replace(w, uuid="ffffffff-0000") for w in workers]

    report = await run.run(
        "0",
        steps="duty-0.50",
        driver=lambda t: _Wrapped(SimDriver(run.module, t), apply=elsewhere),
    )
    assert statuses(report) == {"duty-0.50": ERROR}
    assert "ran on device ffffffff-0000, not on the target GPU-0000" in report.failures()[0].reason


async def test_a_worker_missing_from_the_process_list_fails():
    run = SimRun("passthrough-guest")

    async def ghost(inner: SimDriver, load: StepLoad | None) -> list[WorkerInfo]:
        workers = await inner.apply(load)
        return [dataclasses.replace(w, pid=999_999) for w in workers]

    report = await run.run(
        "0", steps="duty-0.50", driver=lambda t: _Wrapped(SimDriver(run.module, t), apply=ghost)
    )
    failed = report.failures()
    assert [c.check for c in failed] == ["processes"]
    assert "pid 999999" in failed[0].label and "not listed" in failed[0].measured


async def test_a_source_that_returns_nothing_ends_the_step_after_the_grace():
    run = SimRun("passthrough-guest")

    async def nothing(target: Target) -> None:
        return None

    run.source.read = nothing  # type: ignore[method-assign,assignment]
    timing = Timing(settle_s=0.5, window_s=1.0, sample_interval_s=0.5, grace_s=1.0)
    report = await run.run("0", steps="idle", timing=timing)
    assert statuses(report) == {"idle": ERROR}
    assert "no reading arrived" in report.failures()[0].reason
    assert run.timer.slept <= 0.5 + 1.0 + 1.0 + 0.51


async def test_a_source_failure_ends_the_run_and_marks_the_rest_not_run():
    from vgpumon.validate.sources import SourceError

    run = SimRun("passthrough-guest")
    calls = {"n": 0}
    real_read = run.source.read

    async def failing(target: Target):
        calls["n"] += 1
        if calls["n"] > 8:
            raise SourceError("cannot reach the exporter at http://x/metrics: refused")
        return await real_read(target)

    run.source.read = failing  # type: ignore[method-assign]
    report = await run.run("0", steps="idle,duty")
    assert report.aborted is not None and "refused" in report.aborted
    assert [s.status for s in report.steps] == [PASS, ERROR, NOT_RUN, NOT_RUN, NOT_RUN]
    assert report.counts()[NOT_RUN] == 3 and report.exit_code == 1


async def test_bad_device_is_a_usage_error_before_any_load():
    run = SimRun("h100-mig-gpm")
    applied: list[Any] = []

    async def record(inner: SimDriver, load: StepLoad | None) -> list[WorkerInfo]:
        applied.append(load)
        return await inner.apply(load)

    with pytest.raises(ConfigError, match="has MIG enabled"):
        await run.run("0", driver=lambda t: _Wrapped(SimDriver(run.module, t), apply=record))
    assert applied == []


async def test_live_progress_display_renders_every_step():
    run = SimRun("passthrough-guest")
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with RichProgress(console) as progress:
        report = await run.run("0", steps="idle,duty-0.50", progress=progress)
    text = out.getvalue()
    assert report.exit_code == 0
    assert "vgpumon validate: GPU 0 NVIDIA H200" in text
    assert "idle" in text and "duty-0.50" in text and "PASS" in text
