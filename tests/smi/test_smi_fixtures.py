"""Parse tests on real ``nvidia-smi -q -x`` reports (tests/fixtures/smi/SOURCES.md says whose)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpumon.smi import parse_reports
from vgpumon.smi.vgpu import parse_license

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smi"
MIB = 1024 * 1024


def load(name: str):  # type: ignore[no-untyped-def]
    return parse_reports((FIXTURES / name).read_bytes(), None, timestamp=0.0)


def test_every_fixture_has_a_source_entry() -> None:
    sources = (FIXTURES / "SOURCES.md").read_text()
    xml = sorted(p.name for p in FIXTURES.glob("*.xml"))
    assert xml and all(name in sources for name in xml)


def test_a100_r535_mig_host() -> None:
    s = load("telegraf-a100-sxm4-v12.xml")
    assert s.driver.driver_version == "535.54.03"
    assert s.driver.cuda_driver_version == "12.2"
    (g,) = s.gpus
    assert (g.name, g.brand, g.architecture) == ("NVIDIA A100-SXM4-80GB", "nvidia", "ampere")
    assert g.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert g.pci_bus_id == "00000000:01:00.0"
    assert g.virtualization_mode == "none" and g.host_vgpu_mode is None
    assert g.mig_mode_current is True and g.mig_mode_pending is True
    assert [gi.id for gi in g.mig_instances] == [3, 4, 5, 6]
    gi = g.mig_instances[0]
    assert gi.memory_total_bytes == 19968 * MIB and gi.memory_used_bytes == 12 * MIB
    assert [(ci.id, ci.mig_index, ci.sm_count) for ci in gi.compute_instances] == [(0, 0, 14)]
    assert g.memory.total_bytes == 81920 * MIB and g.memory.reserved_bytes == 869 * MIB
    # MIG mode: nvidia-smi prints N/A for whole-GPU utilization; absent, not 0.
    assert g.utilization.gpu is None and g.utilization.memory is None
    assert g.power_watts == 67.03 and g.power_limit_watts == 500.0
    assert g.temperatures.gpu_celsius == 27.0 and g.temperatures.memory_celsius == 44.0
    assert g.clocks.sm_hertz == 1275e6 and g.max_clocks.graphics_hertz == 1410e6
    assert g.ecc.mode_current is True and g.ecc.corrected_volatile == 0
    assert g.fan_speed is None  # N/A on a fanless SXM board
    assert g.remapped_rows.correctable is None  # the report says N/A
    assert g.pcie.link_generation == 4 and g.pcie.link_width == 16
    assert g.performance_state == 0
    assert g.processes == ()
    assert "idle" in g.clock_events.supported and g.clock_events.active == ()


def test_t4_r515_passthrough_guest_with_processes() -> None:
    (g,) = load("telegraf-tesla-t4.xml").gpus
    assert g.virtualization_mode == "passthrough"
    assert g.architecture == "turing"
    assert g.processes is not None
    by_pid = {p.pid: p for p in g.processes}
    assert by_pid[675].name == "/usr/lib/xorg/Xorg"
    assert by_pid[675].kind == "graphics"
    assert by_pid[675].used_memory_bytes == 22 * MIB
    assert by_pid[675].gpu_instance_id is None


def test_quadro_p2000_r525_throttle_reasons_and_fan() -> None:
    (g,) = load("telegraf-quadro-p2000-v12.xml").gpus
    assert g.brand == "quadro" and g.architecture == "pascal"
    assert g.fan_speed == pytest.approx(0.46)
    assert g.clock_events.active == ("idle",)
    assert g.ecc.mode_current is None and g.ecc.corrected_volatile is None  # no ECC: N/A
    assert g.temperatures.memory_celsius is None


def test_rtx3080_r595_v13_report() -> None:
    s = load("telegraf-rtx-3080-v13.xml")
    assert s.driver.driver_version == "595.58.03"
    (g,) = s.gpus
    assert g.brand == "geforce"
    assert g.vgpu_heterogeneous_mode is None  # N/A
    assert g.power_watts == pytest.approx(139.62)
    assert g.memory.used_bytes is not None and g.memory.total_bytes == 10240 * MIB


def test_no_vgpu_report_leaves_instances_unread() -> None:
    s = load("telegraf-tesla-t4.xml")
    assert [c.name for c in s.collectors] == ["device"]


@pytest.mark.parametrize(
    ("text", "licensed", "state", "status", "expiry"),
    [
        ("Licensed (Expiry: 2026-7-7 16:1:44 GMT)", True, "licensed", "valid", 1783440104.0),
        ("Licensed (Expiry: Permanent)", True, "licensed", "permanent", None),
        ("Licensed", True, "licensed", None, None),
        ("Unlicensed (Restricted)", False, "unlicensed_restricted", None, None),
        ("Unlicensed (Unrestricted)", False, "unlicensed_unrestricted", None, None),
        ("Unlicensed", False, "unlicensed", None, None),
        ("N/A", None, None, None, None),
        ("something else", None, None, None, None),
    ],
)
def test_license_text(
    text: str, licensed: bool | None, state: str | None, status: str | None, expiry: float | None
) -> None:
    import xml.etree.ElementTree as ET

    from vgpumon.smi.values import element_text as read_text

    node = ET.fromstring(f"<license_status>{text}</license_status>")
    got = parse_license(read_text(node))
    assert (got.licensed, got.state, got.expiry_status, got.expiry_timestamp_seconds) == (
        licensed,
        state,
        status,
        expiry,
    )


def test_h100_r580_passthrough_captured_on_a_real_gpu() -> None:
    # Captured by vgpumon's developers on a real H100 (serial and UUID masked); the same machine's
    # NVML read through `vgpumon snapshot` reported the same name, mode and driver.
    s = load("h100-80gb-hbm3-r580-passthrough.xml")
    assert (s.driver.driver_version, s.driver.cuda_driver_version) == ("580.159.04", "13.0")
    (g,) = s.gpus
    assert (g.name, g.brand, g.architecture) == ("NVIDIA H100 80GB HBM3", "nvidia", "hopper")
    assert g.pci_bus_id == "00000000:00:06.0"
    assert g.virtualization_mode == "passthrough" and g.mig_mode_current is False
    assert g.memory.total_bytes == 81559 * MIB
    assert g.power_limit_watts == 700.0 and g.temperatures.gpu_celsius == 48.0
    assert g.ecc.mode_current is True
    assert g.processes == ()
