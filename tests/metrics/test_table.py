"""The metric table obeys the contract's naming rules, and its samples obey the data rules."""

from __future__ import annotations

import dataclasses
import re

import pytest
from export_helpers import rich_snapshot

from vgpumon.metrics.naming import UNITS, name_problem, unit_of
from vgpumon.metrics.table import (
    COUNTER,
    EXPORTER,
    FAMILIES,
    GAUGE,
    HTTP_SERVER_PREFIX,
    SECTIONS,
    ExportOptions,
    Family,
)
from vgpumon.model import Gpu, Snapshot

LABEL_RE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*")
# Labels whose values are identities or small fixed enumerations; anything descriptive (names,
# versions, VM ids) belongs in an _info family.
VALUE_LABELS = {
    "code",  # an HTTP status code
    "timeout",  # which of the HTTP server's timeouts
    "gpu",
    "uuid",
    "gpu_instance",
    "compute_instance",
    "vgpu_id",
    "vgpu_type_id",
    "gpu_instance_profile",  # a MIG profile's name: its identity on every GPU model
    "collector",
    "function",
    "error",
    "sensor",
    "clock",
    "reason",
    "type",
    "kind",
    "xid",
    "direction",
    "link",  # an NVLink link of the GPU
    "pipe",
    "mode",
    "policy",
    "action",  # what the driver asks for to recover a GPU (a state set)
    "environment",  # the confidential-computing environment (a state set)
    "engine",  # the engine a scheduler log covers (graphics, nvenc0, nvenc1)
    "counter",  # which usage counter a metering method is about
    "method",  # the metering method (docs/metering.md)
    "state",
    "feature",
    "pid",
    "process_name",
    # opt-in per-pod series (--kubernetes.pod-series), bounded by the devices like processes
    "namespace",
    "pod",
    "container",
    "reading",  # a cadenced value of the sampler (collect.registry.default_cadences())
    "vm_id",  # a VM in the hypervisor's process list (ESXi: its world ID), few per GPU
}
FORBIDDEN_LABELS = {"hostname", "host", "instance", "job", "node", "le", "quantile"}
IDS = ("gpu", "uuid")


@pytest.fixture(scope="module")
def rich() -> Snapshot:
    return rich_snapshot()


def by_name(name: str) -> Family:
    return next(f for f in FAMILIES if f.name == name)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_names_follow_the_contract(family: Family) -> None:
    # The rules are the product's (vgpumon/metrics/naming.py): configured fields obey the same.
    assert name_problem(family.name, family.type, info=family.info) is None
    assert family.unit in (*UNITS, "")
    assert family.unit == unit_of(family.name)
    assert family.help.endswith(".") and family.help == family.help.strip()
    assert family.section in SECTIONS


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_labels_follow_the_contract(family: Family) -> None:
    assert len(set(family.labels)) == len(family.labels)
    for label in family.labels:
        assert LABEL_RE.fullmatch(label)
        assert label not in FORBIDDEN_LABELS
    if family.info:
        assert family.name.endswith("_info") and family.type == GAUGE
    else:
        assert not family.name.endswith("_info")
        assert set(family.labels) <= VALUE_LABELS, "descriptive labels only on _info families"
    if family.collector != EXPORTER and family.name != "vgpumon_process_series_truncated":
        assert family.labels[:2] == IDS, "per-GPU series carry gpu and uuid first"
    if family.name.startswith("vgpumon_mig_profile_"):
        assert "gpu_instance_profile" in family.labels  # about a profile, not an instance
    elif family.name.startswith("vgpumon_mig_"):
        assert "gpu_instance" in family.labels
    if family.name.startswith("vgpumon_vgpu_") and not family.name.startswith(
        ("vgpumon_vgpu_scheduler_", "vgpumon_vgpu_type_")
    ):
        assert "vgpu_id" in family.labels


def test_names_are_unique_in_both_formats() -> None:
    names = [f.name for f in FAMILIES]
    assert len(set(names)) == len(names)
    # OpenMetrics family names drop _total: no gauge may be called like a counter's family.
    bases = [f.base_name for f in FAMILIES]
    assert len(set(bases)) == len(bases)


def test_contract_core_is_present() -> None:
    """The contract's required names exist with the contract's type and identity labels."""
    required = {
        "vgpumon_build_info": (GAUGE, ("version", "python_version")),
        "vgpumon_driver_info": (GAUGE, ("driver_version", "nvml_version", "cuda_driver_version")),
        "vgpumon_up": (GAUGE, ()),
        "vgpumon_scrape_collector_success": (GAUGE, ("collector",)),
        "vgpumon_scrape_collector_duration_seconds": (GAUGE, ("collector",)),
        "vgpumon_last_sample_timestamp_seconds": (GAUGE, ()),
        "vgpumon_sampler_wedged": (GAUGE, ()),
        "vgpumon_nvml_errors_total": (COUNTER, ("function", "error")),
        "vgpumon_gpu_up": (GAUGE, IDS),
        "vgpumon_gpu_virtualization_mode": (GAUGE, (*IDS, "mode")),
        "vgpumon_gpu_mig_mode_enabled": (GAUGE, IDS),
        "vgpumon_gpu_utilization_ratio": (GAUGE, IDS),
        "vgpumon_gpu_memory_used_bytes": (GAUGE, IDS),
        "vgpumon_gpu_energy_joules_total": (COUNTER, IDS),
        "vgpumon_gpu_temperature_celsius": (GAUGE, (*IDS, "sensor")),
        "vgpumon_gpu_clock_hertz": (GAUGE, (*IDS, "clock")),
        "vgpumon_gpu_clock_event_active": (GAUGE, (*IDS, "reason")),
        "vgpumon_gpu_ecc_errors_total": (COUNTER, (*IDS, "type")),
        "vgpumon_gpu_remapped_rows": (GAUGE, (*IDS, "kind")),
        "vgpumon_gpu_xid_errors_total": (COUNTER, (*IDS, "xid")),
        "vgpumon_gpu_pcie_throughput_bytes_per_second": (GAUGE, (*IDS, "direction")),
        "vgpumon_gpu_sm_active_ratio": (GAUGE, IDS),
        "vgpumon_gpu_processes": (GAUGE, IDS),
        "vgpumon_mig_memory_used_bytes": (GAUGE, (*IDS, "gpu_instance")),
        "vgpumon_mig_sm_active_ratio": (GAUGE, (*IDS, "gpu_instance")),
        "vgpumon_gpu_vgpu_instances": (GAUGE, IDS),
        "vgpumon_vgpu_utilization_ratio": (GAUGE, (*IDS, "vgpu_id")),
        "vgpumon_vgpu_license_state": (GAUGE, (*IDS, "vgpu_id", "state")),
        "vgpumon_vgpu_frame_rate_limit": (GAUGE, (*IDS, "vgpu_id")),
        "vgpumon_vgpu_scheduler_policy": (GAUGE, (*IDS, "gpu_instance", "policy")),
        "vgpumon_vgpu_scheduler_run_seconds_total": (COUNTER, (*IDS, "gpu_instance", "vgpu_id")),
        "vgpumon_guest_license_state": (GAUGE, (*IDS, "feature", "state")),
        "vgpumon_guest_license_expiry_timestamp_seconds": (GAUGE, (*IDS, "feature")),
    }
    for name, (kind, labels) in required.items():
        family = by_name(name)
        assert (family.type, family.labels) == (kind, labels), name
    info = by_name("vgpumon_vgpu_info")
    for label in ("vgpu_uuid", "vgpu_type", "vm_id", "guest_driver_version", "mdev_uuid"):
        assert label in info.labels


def test_every_family_has_samples_on_a_full_host(rich: Snapshot) -> None:
    options = ExportOptions(processes=True, pod_series=True)
    empty = [f.name for f in FAMILIES if not list(f.samples(rich, options))]
    # The HTTP server's families come from its counts (tests/export/test_serve_attacks.py).
    assert [name for name in empty if not name.startswith(HTTP_SERVER_PREFIX)] == []


def test_sample_values_obey_the_data_rules(rich: Snapshot) -> None:
    options = ExportOptions(processes=True, pod_series=True)
    for family in FAMILIES:
        samples = list(family.samples(rich, options))
        keys = [labels for labels, _ in samples]
        assert len(set(keys)) == len(keys), f"duplicate series in {family.name}"
        for labels, value in samples:
            assert len(labels) == len(family.labels)
            if family.info:
                assert value == 1.0
            if family.unit == "ratio":
                assert 0.0 <= value <= 1.0, family.name


def test_down_gpu_keeps_only_up_and_info(rich: Snapshot) -> None:
    lost = rich.gpus[3]
    assert not lost.up
    options = ExportOptions(processes=True, pod_series=True)
    families = {
        f.name
        for f in FAMILIES
        for labels, _ in f.samples(rich, options)
        if f.labels[:2] == IDS and labels[1] == lost.uuid
    }
    assert families == {"vgpumon_gpu_up", "vgpumon_gpu_info"}
    up = dict(by_name("vgpumon_gpu_up").samples(rich, options))
    assert up[("3", lost.uuid)] == 0.0


def test_absent_values_give_no_sample() -> None:
    bare = Snapshot(timestamp=1.0, gpus=(Gpu(index=0, uuid="GPU-x"),))
    options = ExportOptions(processes=True, pod_series=True)
    per_gpu = {f.name for f in FAMILIES if f.labels[:2] == IDS and list(f.samples(bare, options))}
    assert per_gpu == {"vgpumon_gpu_up", "vgpumon_gpu_info"}
    assert not list(by_name("vgpumon_driver_info").samples(bare, options))


def test_state_sets_have_exactly_one_current_state(rich: Snapshot) -> None:
    for name, label in (
        ("vgpumon_gpu_virtualization_mode", "mode"),
        ("vgpumon_vgpu_license_state", "state"),
        ("vgpumon_vgpu_scheduler_policy", "policy"),
        ("vgpumon_guest_license_state", "state"),
    ):
        family = by_name(name)
        position = family.labels.index(label)
        groups: dict[tuple[str, ...], list[float]] = {}
        for labels, value in family.samples(rich, ExportOptions()):
            key = labels[:position] + labels[position + 1 :]
            groups.setdefault(key, []).append(value)
        assert groups, name
        for values in groups.values():
            assert sorted(values)[-1] == 1.0 and sum(values) == 1.0, name
    modes = {
        labels[2]: value
        for labels, value in by_name("vgpumon_gpu_virtualization_mode").samples(
            rich, ExportOptions()
        )
        if labels[0] == "0"
    }
    assert modes == {
        "none": 0.0,
        "passthrough": 0.0,
        "vgpu": 0.0,
        "host_vgpu": 1.0,
        "host_vsga": 0.0,
    }


def test_per_process_series_are_opt_in_and_capped(rich: Snapshot) -> None:
    memory = by_name("vgpumon_process_memory_used_bytes")
    truncated = by_name("vgpumon_process_series_truncated")
    assert not list(memory.samples(rich, ExportOptions()))
    assert not list(truncated.samples(rich, ExportOptions()))
    everything = ExportOptions(processes=True)
    assert len(list(memory.samples(rich, everything))) == 5  # 2 + 1 MIG + 2 in the guest
    assert list(truncated.samples(rich, everything)) == [((), 0.0)]
    capped = ExportOptions(processes=True, processes_max=2)
    assert len(list(memory.samples(rich, capped))) == 2
    guest = by_name("vgpumon_vgpu_process_sm_utilization_ratio")
    assert not list(guest.samples(rich, capped)), "the cap counts host and guest processes"
    assert list(truncated.samples(rich, capped)) == [((), 1.0)]


def test_vgpu_counts_only_on_vgpu_hosts(rich: Snapshot) -> None:
    counts = dict(by_name("vgpumon_gpu_vgpu_instances").samples(rich, ExportOptions()))
    assert counts == {("0", rich.gpus[0].uuid): 2.0}


def test_vgpu_count_absent_when_the_vgpu_reader_did_not_run(rich: Snapshot) -> None:
    # With --no-collector.vgpu the host is still a vGPU host (device reader) but its instance
    # list is just empty: "0 vGPUs" would be made up.
    without = dataclasses.replace(
        rich, collectors=tuple(c for c in rich.collectors if c.name != "vgpu")
    )
    assert not list(by_name("vgpumon_gpu_vgpu_instances").samples(without, ExportOptions()))


def test_scheduler_without_gpu_instance_has_empty_label(rich: Snapshot) -> None:
    policy = list(by_name("vgpumon_vgpu_scheduler_policy").samples(rich, ExportOptions()))
    assert {labels[2] for labels, _ in policy} == {""}
    gpu = rich.gpus[0]
    mig_backed = dataclasses.replace(
        gpu,
        vgpu_schedulers=(dataclasses.replace(gpu.vgpu_schedulers[0], gpu_instance_id=2),),
    )
    snap = dataclasses.replace(rich, gpus=(mig_backed,))
    policy = list(by_name("vgpumon_vgpu_scheduler_policy").samples(snap, ExportOptions()))
    assert {labels[2] for labels, _ in policy} == {"2"}


def test_collectors_named_in_the_table_exist() -> None:
    from vgpumon.collect.enrich import ENRICHER_NAMES
    from vgpumon.collect.registry import collector_names

    known = {*collector_names(), *ENRICHER_NAMES, EXPORTER}
    assert {f.collector for f in FAMILIES} <= known


def test_license_state_from_the_licensed_flag_alone(rich: Snapshot) -> None:
    from vgpumon.model import VgpuLicense

    gpu = rich.gpus[0]
    only_flag = dataclasses.replace(gpu.vgpu_instances[0], license=VgpuLicense(licensed=False))
    snap = dataclasses.replace(rich, gpus=(dataclasses.replace(gpu, vgpu_instances=(only_flag,)),))
    states = {
        labels[3]: value
        for labels, value in by_name("vgpumon_vgpu_license_state").samples(snap, ExportOptions())
    }
    assert states["unlicensed"] == 1.0 and sum(states.values()) == 1.0


def test_the_gpm_families_are_written_once_for_both_scopes() -> None:
    """A GPU's and a MIG instance's GPM families come from one list of readings (issue 31): the
    same readings in the same order under each prefix, and no other family reads GPM except the
    GPU's PCIe throughput, which an instance does not have."""
    from vgpumon.metrics.table import GPM_READINGS, GPU_GPM, MIG_GPM

    gpu = [f.name.removeprefix("vgpumon_gpu_") for f in GPU_GPM]
    mig = [f.name.removeprefix("vgpumon_mig_") for f in MIG_GPM]
    assert gpu == mig == [*(row[0] for row in GPM_READINGS), "pipe_active_ratio"]
    reading_gpm = {f.name for f in FAMILIES if f.collector == "gpm"}
    from_the_list = {f.name for f in (*GPU_GPM, *MIG_GPM)}
    assert reading_gpm - from_the_list == {"vgpumon_gpu_gpm_pcie_throughput_bytes_per_second"}
    assert from_the_list <= reading_gpm
