"""The validate ladder, its expectations and tolerances: pure logic on hand-made measurements."""

from __future__ import annotations

import pytest

from vgpumon.errors import ConfigError
from vgpumon.loadgen.runner import WorkerInfo
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
from vgpumon.validate.steps import (
    ERROR,
    FAIL,
    PASS,
    SKIP,
    CheckContext,
    StepLoad,
    Tolerances,
    default_ladder,
    evaluate,
    expected_gpm,
    expected_process_utilization,
    expected_utilization,
    ratio_check,
    select_steps,
    step_status,
)

MIB = 1024**2
GIB = 1024**3
GPU = Target(gpu_index=0, gpu_uuid="GPU-aaaa", name="NVIDIA H200", architecture="hopper")
MIG = Target(
    gpu_index=0,
    gpu_uuid="GPU-aaaa",
    mig_uuid="MIG-bbbb",
    gpu_instance_id=3,
    compute_instance_id=0,
    profile_name="3g.40gb",
    mig_share=1.0,
)


def worker(
    pid: int = 100, *, blocks: int = 132, sm: int = 132, memory: int = 256 * MIB
) -> WorkerInfo:
    return WorkerInfo(
        rank=0,
        pid=pid,
        name="GPU",
        uuid="aaaa",
        sm_count=sm,
        compute_capability="9.0",
        blocks=blocks,
        threads_per_block=32,
        memory_bytes=memory,
        sm_clock_hz=1_980_000_000,
        ready_event={},
    )


def measured(
    util: float | None = 0.5,
    gpm: float | None = 0.5,
    memory: int | None = 2 * GIB,
    processes: dict[int, tuple[int | None, float | None]] | None = None,
    absent: dict[str, str] | None = None,
) -> Measurement:
    procs = None
    if processes is not None:
        procs = {
            pid: ProcessMeasurement(pid, mem, sm, 3 if sm else 0, 0)
            for pid, (mem, sm) in processes.items()
        }
    return Measurement(
        readings=6,
        utilization=util,
        gpm_sm_active=gpm,
        memory_used_bytes=memory,
        processes=procs,
        absent=absent or {},
    )


def step(name: str):
    return next(s for s in default_ladder() if s.name == name)


def by_check(results, check, subject=None):
    return next(
        r for r in results if r.check == check and (subject is None or r.subject == subject)
    )


# ---------------------------------------------------------------------------------- ladder


def test_default_ladder_has_the_issue_steps_in_order():
    names = [s.name for s in default_ladder()]
    assert names == [
        "idle",
        "duty-0.25",
        "duty-0.50",
        "duty-0.75",
        "duty-1.00",
        "sm-0.50",
        "sm-0.25",
        "memory",
        "multi-process",
    ]
    ladder = {s.name: s for s in default_ladder(memory_bytes=64 * MIB, processes=3)}
    assert ladder["idle"].load is None
    assert ladder["duty-0.75"].load == StepLoad(duty=0.75, sm_fraction=1.0, memory_bytes=64 * MIB)
    assert ladder["sm-0.25"].load == StepLoad(duty=1.0, sm_fraction=0.25, memory_bytes=64 * MIB)
    assert ladder["memory"].load.memory_bytes == GIB
    assert ladder["multi-process"].load == StepLoad(
        duty=0.5, memory_bytes=3 * 64 * MIB, processes=3
    )


def test_ladder_rejects_a_single_process_multi_step():
    with pytest.raises(ConfigError, match="at least 2 processes"):
        default_ladder(processes=1)


def test_select_steps_by_name_and_group_keeps_ladder_order():
    ladder = default_ladder()
    picked = select_steps(ladder, "multi-process, idle,sm")
    assert [s.name for s in picked] == ["idle", "sm-0.50", "sm-0.25", "multi-process"]
    assert next(s.name for s in select_steps(ladder, "duty")) == "duty-0.25"
    assert select_steps(ladder, None) == ladder
    assert select_steps(ladder, "all") == ladder


def test_select_steps_names_the_choices_for_an_unknown_step():
    with pytest.raises(ConfigError, match=r"unknown step 'dutty'.*duty-0\.25"):
        select_steps(default_ladder(), "dutty")


@pytest.mark.parametrize(
    "tol",
    [
        Tolerances(utilization=-0.01),
        Tolerances(gpm=1.5),
        Tolerances(process_utilization=float("nan")),
        Tolerances(context_bytes=-1),
    ],
)
def test_tolerances_refuse_nonsense(tol):
    with pytest.raises(ConfigError):
        tol.validate()


# ----------------------------------------------------------------------------- expectations


def test_expected_utilization_single_and_several_processes():
    assert expected_utilization(None) == (0.0, 0.0)
    assert expected_utilization(StepLoad(duty=0.25)) == (0.25, 0.25)
    # Two at 0.5 time-slice: the union of the busy phases, 0.5 … 1 (the H200 read 0.565).
    assert expected_utilization(StepLoad(duty=0.5, processes=2)) == (0.5, 1.0)
    assert expected_utilization(StepLoad(duty=0.75, processes=2)) == (0.75, 1.0)


def test_expected_gpm_uses_the_workers_actual_blocks():
    load = StepLoad(duty=0.5, sm_fraction=0.25)
    # 33 of 132 SMs at half duty: 12.5 % (what the H200 read)
    assert expected_gpm(load, [worker(blocks=33)], GPU) == (0.125, 0.125)
    # the blocks the worker reports win over the requested fraction
    assert expected_gpm(load, [worker(blocks=34)], GPU) == pytest.approx((0.5 * 34 / 132,) * 2)
    two = [worker(1, blocks=132), worker(2, blocks=132)]
    assert expected_gpm(StepLoad(duty=0.5, processes=2), two, GPU) == (0.5, 1.0)
    assert expected_gpm(None, [], GPU) == (0.0, 0.0)


def test_expected_gpm_on_a_mig_device_is_its_share_of_the_gpu_instance():
    half = Target(**{**MIG.to_dict(), "mig_share": 1 / 3})  # one of three compute slices
    load = StepLoad(duty=1.0)
    assert expected_gpm(load, [worker(blocks=20, sm=20)], half) == pytest.approx((1 / 3, 1 / 3))
    unknown = Target(**{**MIG.to_dict(), "mig_share": None})
    assert expected_gpm(load, [worker(blocks=20, sm=20)], unknown) is None


def test_expected_process_utilization():
    assert expected_process_utilization(StepLoad(duty=0.75)) == (0.75, 0.75)
    # several processes: the band of their summed utilization
    assert expected_process_utilization(StepLoad(duty=0.5, processes=2)) == (0.5, 1.0)
    assert expected_process_utilization(StepLoad(duty=0.75, processes=2)) == (0.75, 1.0)


def test_ratio_check_band_edges():
    inside = ratio_check("s", UTILIZATION, 0.52, 0.5, 0.5, 0.02, absent_reason="-")
    assert inside.status == PASS
    outside = ratio_check("s", UTILIZATION, 0.5201, 0.5, 0.5, 0.02, absent_reason="-")
    assert outside.status == FAIL
    assert "above the tolerance band" in outside.reason
    low = ratio_check("s", UTILIZATION, 0.47, 0.5, 1.0, 0.02, absent_reason="-")
    assert low.status == FAIL and "1.0 pp below" in low.reason
    assert low.expected == "50.0% … 100.0% ± 2.0 pp"
    idle = ratio_check("s", GPM, 0.019, 0.0, 0.0, 0.02, absent_reason="-")
    assert idle.status == PASS and idle.expected == "≤ 2.0%"


# ---------------------------------------------------------------------------------- evaluate


def test_a_step_that_matches_passes_every_check():
    m = measured(util=0.5, gpm=0.499, memory=GIB + 800 * MIB, processes={100: (776 * MIB, 0.5)})
    ctx = CheckContext(GPU, baseline_memory=GIB)
    results = evaluate(step("duty-0.50"), m, [worker()], ctx, Tolerances())
    assert [r.check for r in results] == [
        UTILIZATION,
        GPM,
        MEMORY,
        PROCESSES,
        PROCESS_UTILIZATION,
    ]
    assert {r.status for r in results} == {PASS}
    assert step_status(results) == PASS


def test_half_the_utilization_fails_with_a_readable_message():
    m = measured(util=0.25, gpm=0.5, memory=GIB + 800 * MIB, processes={100: (776 * MIB, 0.5)})
    results = evaluate(
        step("duty-0.50"), m, [worker()], CheckContext(GPU, baseline_memory=GIB), Tolerances()
    )
    bad = by_check(results, UTILIZATION)
    assert bad.status == FAIL
    assert bad.message == (
        "step duty-0.50: NVML utilization: expected 50.0% ± 2.0 pp, measured 25.0% "
        "(23.0 pp below the tolerance band): FAIL"
    )
    assert step_status(results) == FAIL


def test_idle_checks_only_that_nothing_runs():
    results = evaluate(
        step("idle"),
        measured(util=0.0, gpm=0.001, processes={}),
        [],
        CheckContext(GPU),
        Tolerances(),
    )
    assert [(r.check, r.status) for r in results] == [(UTILIZATION, PASS), (GPM, PASS)]
    busy = evaluate(step("idle"), measured(util=0.3, gpm=0.3), [], CheckContext(GPU), Tolerances())
    assert [r.status for r in busy] == [FAIL, FAIL]


def test_unsupported_readings_are_skipped_with_their_reason():
    m = measured(
        util=None,
        gpm=None,
        memory=None,
        processes={100: (None, None)},
        absent={
            UTILIZATION: "NVML has no utilization for MIG devices",
            GPM: "GPM needs a Hopper or newer GPU; this one is ampere",
            MEMORY: "no memory",
            PROCESS_UTILIZATION: "NVML has no per-process utilization on MIG-enabled GPUs",
        },
    )
    results = evaluate(step("duty-1.00"), m, [worker()], CheckContext(MIG, 0), Tolerances())
    statuses = {(r.check, r.status) for r in results}
    assert (UTILIZATION, SKIP) in statuses and (GPM, SKIP) in statuses
    assert (MEMORY, SKIP) in statuses and (PROCESS_UTILIZATION, SKIP) in statuses
    # the process is listed even without its memory: a pass that says so
    assert by_check(results, PROCESSES).status == PASS
    assert "ampere" in by_check(results, GPM).message
    assert by_check(results, GPM).subject == "GPU instance 3"
    assert step_status(results) == PASS


def test_every_check_skipped_makes_a_skipped_step():
    m = measured(util=None, gpm=None, absent={UTILIZATION: "x", GPM: "y"})
    results = evaluate(step("idle"), m, [], CheckContext(GPU), Tolerances())
    assert step_status(results) == SKIP


def test_memory_growth_between_footprint_and_context_allowance():
    tol = Tolerances(context_bytes=512 * MIB)
    ctx = CheckContext(GPU, baseline_memory=GIB)
    w = [worker(memory=GIB)]
    ok = evaluate(step("memory"), measured(memory=GIB + GIB + 500 * MIB), w, ctx, tol)
    assert by_check(ok, MEMORY).status == PASS
    short = evaluate(step("memory"), measured(memory=GIB + 900 * MIB), w, ctx, tol)
    assert by_check(short, MEMORY).status == FAIL
    assert "less than the footprint" in by_check(short, MEMORY).reason
    over = evaluate(step("memory"), measured(memory=GIB + 2 * GIB), w, ctx, tol)
    assert "more than the footprint" in by_check(over, MEMORY).reason
    nobase = evaluate(step("memory"), measured(), w, CheckContext(GPU), tol)
    assert by_check(nobase, MEMORY).status == SKIP
    assert "no baseline" in by_check(nobase, MEMORY).reason


def test_process_must_be_listed_with_its_footprint():
    w = [worker(100, memory=GIB)]
    ctx = CheckContext(GPU, baseline_memory=0)
    missing = evaluate(step("memory"), measured(processes={7: (GIB, 0.5)}), w, ctx, Tolerances())
    listed = by_check(missing, PROCESSES)
    assert listed.status == FAIL and listed.measured == "not listed"
    assert "pids 7" in listed.reason
    assert by_check(missing, PROCESS_UTILIZATION).status == SKIP
    small = evaluate(
        step("memory"), measured(processes={100: (GIB - 1, 0.5)}), w, ctx, Tolerances()
    )
    assert by_check(small, PROCESSES).status == FAIL
    assert "less than its footprint" in by_check(small, PROCESSES).reason


def test_process_list_unreadable_skips_process_checks():
    m = measured(processes=None, absent={PROCESSES: "the exporter has no per-process series"})
    results = evaluate(
        step("duty-0.50"), m, [worker()], CheckContext(GPU, baseline_memory=0), Tolerances()
    )
    for check in (PROCESSES, PROCESS_UTILIZATION):
        r = by_check(results, check)
        assert r.status == SKIP and "per-process series" in r.reason


def test_pids_from_another_namespace_match_by_footprint_only_when_allowed():
    w = [worker(100, memory=GIB), worker(101, memory=GIB)]
    procs = {5: (GIB // 2, 0.0), 9001: (GIB + 500 * MIB, 0.5), 9002: (GIB + 500 * MIB, 0.4)}
    m = measured(util=0.6, gpm=0.55, memory=3 * GIB, processes=procs)
    strict = evaluate(step("multi-process"), m, w, CheckContext(GPU, 0), Tolerances())
    assert by_check(strict, PROCESSES, "pid 100").status == FAIL
    remote = CheckContext(GPU, 0, baseline_pids=frozenset({5}), pids_may_differ=True)
    results = evaluate(step("multi-process"), m, w, remote, Tolerances())
    first = by_check(results, PROCESSES, "pid 100")
    assert first.status == PASS and "listed pid 9001" in first.reason
    assert "listed pid 9002" in by_check(results, PROCESSES, "pid 101").reason


def test_multi_process_bands():
    w = [worker(1), worker(2)]
    m = measured(util=0.565, gpm=0.527, memory=4 * GIB, processes={1: (GIB, 0.3), 2: (GIB, 0.5)})
    results = evaluate(
        step("multi-process"), m, w, CheckContext(GPU, baseline_memory=3 * GIB), Tolerances()
    )
    assert by_check(results, UTILIZATION).status == PASS
    assert by_check(results, GPM).status == PASS
    summed = "sum over pid 1, pid 2"
    assert by_check(results, PROCESS_UTILIZATION, summed).status == PASS
    assert [r.subject for r in results if r.check == PROCESS_UTILIZATION] == [summed]
    # together the processes cannot have used the GPU for less than one process's duty
    low = evaluate(
        step("multi-process"),
        measured(util=0.4, gpm=0.4, memory=4 * GIB, processes={1: (GIB, 0.05), 2: (GIB, 0.2)}),
        w,
        CheckContext(GPU, baseline_memory=3 * GIB),
        Tolerances(),
    )
    assert by_check(low, UTILIZATION).status == FAIL
    assert by_check(low, PROCESS_UTILIZATION, summed).status == FAIL


def test_a_measurement_error_is_a_step_error():
    m = Measurement(readings=2, error="GPU GPU-aaaa is down (gpu_is_lost)")
    results = evaluate(step("duty-0.50"), m, [worker()], CheckContext(GPU), Tolerances())
    assert [r.status for r in results] == [ERROR]
    assert step_status(results) == ERROR
    assert results[0].message == "step duty-0.50: step: error: GPU GPU-aaaa is down (gpu_is_lost)"


def test_select_steps_refuses_an_empty_list():
    with pytest.raises(ConfigError, match="names no step"):
        select_steps(default_ladder(), " , ")
