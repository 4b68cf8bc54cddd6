"""A recorded snapshot becomes a loadable scenario that reproduces the host, identities masked."""

from __future__ import annotations

from pathlib import Path

import pynvml
import yaml

from vgpumon import model
from vgpumon.sim import ManualClock, create, load_scenario
from vgpumon.sim.record import dump_scenario, scenario_from_snapshot

GIB = 2**30


def _snapshot() -> model.Snapshot:
    busy = model.Gpu(
        index=0,
        uuid="GPU-75028240-2fe3-292b-13fc-9d71e2ec6df7",
        name="NVIDIA H100 80GB HBM3",
        serial="1652123456789",
        pci_bus_id="00000000:18:00.0",
        compute_capability="9.0",
        virtualization_mode="none",
        persistence_mode=True,
        mig_mode_current=False,
        mig_mode_pending=False,
        utilization=model.Utilization(gpu=0.5, memory=0.25),
        memory=model.Memory(
            total_bytes=85520809984, used_bytes=10 * GIB, free_bytes=1, reserved_bytes=615 * 2**20
        ),
        power_watts=412.5,
        power_limit_watts=700.0,
        temperatures=model.Temperatures(gpu_celsius=55.0, memory_celsius=48.0),
        clocks=model.Clocks(
            graphics_hertz=1980e6, sm_hertz=1980e6, memory_hertz=2619e6, video_hertz=1755e6
        ),
        clock_events=model.ClockEvents(supported=("idle", "sw_power_cap"), active=()),
        performance_state=0,
        ecc=model.Ecc(mode_current=True, mode_pending=True, corrected_volatile=3),
        gpm=model.Gpm(interval_seconds=1.0, graphics_active=0.5, sm_active=0.25, sm_occupancy=0.05),
        processes=(
            model.Process(pid=9001, name="python3", kind="compute", used_memory_bytes=10 * GIB),
            model.Process(pid=9001, name="python3", kind="graphics", used_memory_bytes=10 * GIB),
        ),
        xid_errors={79: 2},
    )
    mig = model.Gpu(
        index=1,
        uuid="GPU-11111111-2222-3333-4444-555555555555",
        name="NVIDIA A100-SXM4-40GB",
        serial="1652000000001",
        mig_mode_current=True,
        mig_mode_pending=True,
        memory=model.Memory(total_bytes=40960 * 2**20),
        mig_instances=(
            model.MigGpuInstance(
                id=1,
                profile_id=9,
                profile_name="3g.20gb",
                placement_start=4,
                placement_size=4,
                memory_used_bytes=3 * GIB,
                compute_instances=(
                    model.MigComputeInstance(
                        id=0,
                        mig_uuid="MIG-secret-0",
                        mig_index=0,
                        placement_start=0,
                        placement_size=1,
                    ),
                    model.MigComputeInstance(
                        id=1,
                        mig_uuid="MIG-secret-1",
                        mig_index=1,
                        placement_start=1,
                        placement_size=2,
                    ),
                ),
            ),
            model.MigGpuInstance(
                id=2, profile_id=19, profile_name="1g.5gb", placement_start=0, placement_size=1
            ),
        ),
        processes=(
            model.Process(
                pid=77,
                kind="compute",
                used_memory_bytes=GIB,
                gpu_instance_id=1,
                compute_instance_id=1,
            ),
        ),
    )
    odd = model.Gpu(
        index=2,
        uuid="GPU-99999999-0000-0000-0000-000000000000",
        up=False,
        down_reason="gpu_is_lost",
        name="Mystery GPU",
    )
    return model.Snapshot(
        timestamp=1_767_225_600.0,
        driver=model.DriverInfo(
            driver_version="580.159.04", nvml_version="13.580.159.04", cuda_driver_version="13.0"
        ),
        gpus=(busy, mig, odd),
    )


def test_recorded_scenario_loads_and_masks_identities(tmp_path: Path) -> None:
    doc = scenario_from_snapshot(_snapshot())
    text = dump_scenario(doc)
    for secret in ("75028240", "1652123456789", "11111111", "MIG-secret", "99999999"):
        assert secret not in text
    path = tmp_path / "recorded.yaml"
    path.write_text(text)
    scenario = load_scenario(str(path))
    assert [g.uuid for g in scenario.gpus] == [
        "GPU-00000000-0000-4000-8000-000000000000",
        "GPU-00000000-0000-4000-8000-000000000001",
        "GPU-00000000-0000-4000-8000-000000000002",
    ]
    assert [g.serial for g in scenario.gpus] == ["0000000000000", "0000000000001", "0000000000002"]
    assert scenario.driver.version == "580.159.04" and scenario.driver.cuda_driver_version == 13000
    assert [f.kind for f in scenario.faults] == ["gpu_lost"]
    assert yaml.safe_load(text) == doc


def test_recorded_scenario_reproduces_the_readings(tmp_path: Path) -> None:
    path = tmp_path / "recorded.yaml"
    path.write_text(dump_scenario(scenario_from_snapshot(_snapshot(), name="bug-1234")))
    sim = create(str(path), ManualClock())
    assert sim.__name__ == "vgpumon.sim:bug-1234"
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(0)
    event_set = sim.nvmlEventSetCreate()
    sim.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, event_set)
    sim.clock.advance(1.0)
    util = sim.nvmlDeviceGetUtilizationRates(h)
    assert (util.gpu, util.memory) == (50, 25)
    assert sim.nvmlDeviceGetPowerUsage(h) == 412_500
    assert sim.nvmlDeviceGetTemperature(h, 0) == 55
    assert sim.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).used == 10 * GIB
    assert sim.nvmlDeviceGetTotalEccErrors(h, 0, 0) == 3
    assert sim.nvmlDeviceGetSupportedClocksEventReasons(h) == 0x5
    procs = sim.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.usedGpuMemory) for p in procs] == [(9001, 10 * GIB)]
    assert [p.pid for p in sim.nvmlDeviceGetGraphicsRunningProcesses(h)] == [9001]
    a, b = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    sim.nvmlGpmSampleGet(h, a)
    sim.clock.advance(1.0)
    sim.nvmlGpmSampleGet(h, b)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = 1, 1, a, b
    mg.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
    assert sim.nvmlGpmMetricsGet(mg).metrics[0].value == 25.0

    parent = sim.nvmlDeviceGetHandleByIndex(1)
    layout = []
    for i in range(2):
        m = sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        layout.append(
            (
                sim.nvmlDeviceGetName(m),
                sim.nvmlDeviceGetGpuInstanceId(m),
                sim.nvmlDeviceGetComputeInstanceId(m),
            )
        )
    assert layout == [
        ("NVIDIA A100-SXM4-40GB MIG 1c.3g.20gb", 1, 0),
        ("NVIDIA A100-SXM4-40GB MIG 2c.3g.20gb", 1, 1),
    ]
    assert (
        sim.nvmlDeviceGetMemoryInfo(sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)).used
        == 3 * GIB
    )
    assert sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 2)  # the 1g.5gb instance's MIG device
    with_pids = sim.nvmlDeviceGetComputeRunningProcesses(
        sim.nvmlDeviceGetMigDeviceHandleByIndex(parent, 1)
    )
    assert [p.pid for p in with_pids] == [77]

    down = sim.nvmlDeviceGetHandleByIndex(2)
    assert sim.nvmlDeviceGetName(down) == "Mystery GPU"
    try:
        sim.nvmlDeviceGetMemoryInfo(down)
    except pynvml.NVMLError_GpuIsLost:
        pass
    else:
        raise AssertionError("a GPU that was down when recorded stays down")
    assert [sim.nvmlEventSetWait(event_set, 0).eventData for _ in range(2)] == [79, 79]
