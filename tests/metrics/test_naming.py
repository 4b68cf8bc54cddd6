"""The naming rules as code (vgpumon/metrics/naming.py): each rule refuses what it should.

The metric table's test and the serve config's ``fields`` both rely on :func:`name_problem`; a
rule that let everything through would pass both, so every rule is shown to refuse here.
"""

from __future__ import annotations

import pytest

from vgpumon.metrics.naming import COUNTER, GAUGE, base_name, name_problem, unit_of

GOOD = [
    ("vgpumon_gpu_power_watts", GAUGE, False),
    ("vgpumon_gpu_energy_joules_total", COUNTER, False),
    ("vgpumon_gpu_utilization_ratio", GAUGE, False),
    ("vgpumon_gpu_info", GAUGE, True),
    ("vgpumon_gpu_nvlink0_tx_bytes_total", COUNTER, False),
]
BAD = [
    ("vgpumon_gpu_x", "histogram", False, "type must be gauge or counter"),
    ("gpu_power_watts", GAUGE, False, "must start with vgpumon_"),
    ("vgpumon_gpuPower", GAUGE, False, "snake case"),
    ("vgpumon__x", GAUGE, False, "snake case"),
    ("vgpumon_x_", GAUGE, False, "snake case"),
    ("vgpumon_gpu_power_mw", GAUGE, False, "'mw' is not a base unit"),
    ("vgpumon_gpu_memory_used_percent", GAUGE, False, "'percent' is not a base unit"),
    ("vgpumon_gpu_x", COUNTER, False, "counters end in _total"),
    ("vgpumon_gpu_x_total", GAUGE, False, "counters end in _total"),
    ("vgpumon_gpu_x_info", GAUGE, False, "only info families"),
    ("vgpumon_gpu_x", GAUGE, True, "only info families"),
    ("vgpumon_gpu_x_created", GAUGE, False, "_created is a suffix"),
    ("vgpumon_gpu_x_bucket", GAUGE, False, "_bucket is a suffix"),
    ("vgpumon_gpu_x_sum_total", COUNTER, False, "_sum is a suffix"),
    ("vgpumon_gpu_x_ratio_total", COUNTER, False, "a _ratio is a gauge"),
    ("vgpumon_gpu_x_joules", GAUGE, False, "energy is a counter"),
]


@pytest.mark.parametrize(("name", "type_", "info"), GOOD)
def test_good_names(name: str, type_: str, info: bool) -> None:
    assert name_problem(name, type_, info=info) is None


@pytest.mark.parametrize(("name", "type_", "info", "why"), BAD, ids=[b[0] for b in BAD])
def test_each_rule_refuses(name: str, type_: str, info: bool, why: str) -> None:
    problem = name_problem(name, type_, info=info)
    assert problem is not None and why in problem, problem


def test_units_and_base_names() -> None:
    assert unit_of("vgpumon_gpu_pcie_throughput_bytes_per_second") == "bytes_per_second"
    assert unit_of("vgpumon_gpu_energy_joules_total") == "joules"
    assert unit_of("vgpumon_gpu_processes") == ""
    assert base_name("vgpumon_nvml_errors_total", COUNTER) == "vgpumon_nvml_errors"
    assert base_name("vgpumon_gpu_up", GAUGE) == "vgpumon_gpu_up"
