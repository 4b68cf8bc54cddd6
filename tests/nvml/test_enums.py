"""NVML's enumeration codes are declared once (vgpumon/nvml/enums.py) and agree with the model's
names, the metric table's state sets and pynvml's constants."""

from __future__ import annotations

import ast
from pathlib import Path

import pynvml

from vgpumon import model
from vgpumon.metrics import table
from vgpumon.nvml import enums

ROOT = Path(__file__).resolve().parents[2] / "vgpumon"
TABLES = {
    name: value
    for name, value in vars(enums).items()
    if name.isupper() and isinstance(value, dict) and all(isinstance(k, int) for k in value)
}


def test_the_model_and_the_metric_table_name_the_same_codes() -> None:
    assert tuple(enums.VIRTUALIZATION_MODES.values()) == model.VIRTUALIZATION_MODES
    assert tuple(enums.CLOCK_EVENT_REASONS.values()) == model.CLOCK_EVENT_REASONS
    assert tuple(enums.VGPU_LICENSE_STATES.values()) == model.VGPU_LICENSE_STATES
    assert tuple(enums.LICENSE_EXPIRY_STATUSES.values()) == model.LICENSE_EXPIRY_STATUSES
    assert tuple(enums.COMPUTE_MODES.values()) == table.COMPUTE_MODES
    assert tuple(enums.HOST_VGPU_MODES.values()) == table.HOST_VGPU_MODES


def test_the_codes_are_pynvmls() -> None:
    assert enums.ARCHITECTURES[pynvml.NVML_DEVICE_ARCH_HOPPER] == "hopper"
    assert enums.ARCHITECTURES[pynvml.NVML_DEVICE_ARCH_RUBIN] == "rubin"
    assert enums.BRANDS[pynvml.NVML_BRAND_NVIDIA_VWS] == "nvidia_vws"
    assert enums.VIRTUALIZATION_MODES[pynvml.NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU] == "host_vgpu"
    assert enums.COMPUTE_MODES[pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS] == "exclusive_process"
    assert enums.CLOCK_EVENT_REASONS[pynvml.nvmlClocksEventReasonHwSlowdown] == "hw_slowdown"
    assert enums.codes(enums.ARCHITECTURES)["hopper"] == 9


def _code_tables(path: Path) -> list[int]:
    """Lines of dict literals holding three or more of the enums' (code, name) pairs, either way
    round: a second declaration of the same codes."""
    pairs = {(code, name) for table in TABLES.values() for code, name in table.items()}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Dict):
            continue
        same = 0
        for key, value in zip(node.keys, node.values, strict=True):
            k, v = getattr(key, "value", None), getattr(value, "value", None)
            same += (k, v) in pairs or (v, k) in pairs
        if same >= 3:
            found.append(node.lineno)
    return found


def test_no_other_module_declares_nvml_codes() -> None:
    elsewhere = {
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != ROOT / "nvml" / "enums.py"
        for line in _code_tables(path)
    }
    assert elsewhere == set()
