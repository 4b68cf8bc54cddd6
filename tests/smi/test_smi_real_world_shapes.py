"""Shapes of real nvidia-smi reports, in fixtures written by hand from their descriptions
(tests/fixtures/smi/SOURCES.md): an ESXi vGPU host's VMs in its process list, ``N/A`` where a
subtree belongs, an element missing altogether, licence expiries without zero padding, empty
process names and ``N/A`` memory in a Windows guest, a VM name with a comma; and an optional vGPU
report that fails in any way, which costs its vGPU instances, never the host."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vgpumon.metrics.exposition import render
from vgpumon.metrics.hosts import HOST_FAMILIES, HostSnapshot, HostsView
from vgpumon.model import Snapshot
from vgpumon.smi import ReportFailure, parse_reports

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "smi"
MIB = 1024 * 1024
DEVICE = (FIXTURES / "esxi-vgpu-host-device.xml").read_bytes()
VGPU = (FIXTURES / "esxi-vgpu-host-vgpu.xml").read_bytes()
JULY_7 = dt.datetime(2026, 7, 7, 16, 1, 44, tzinfo=dt.timezone.utc).timestamp()


def esxi(vgpu: bytes | ReportFailure | None = VGPU) -> Snapshot:
    return parse_reports(DEVICE, vgpu, timestamp=0.0, source="nvidia-smi@esxi-1")


def test_an_esxi_host_s_process_list_is_its_vms() -> None:
    g0, g1 = esxi().gpus
    assert g0.virtualization_mode == "host_vgpu"
    assert [(p.kind, p.pid, p.name, p.used_memory_bytes) for p in g0.processes or ()] == [
        ("vm", 2102359, "render-farm-01", 8192 * MIB),  # padded with spaces in the report
        ("vm", 2104418, "finance, q3 vdi", 4096 * MIB),
    ]
    # N/A where a subtree belongs: unknown, never empty or 0.
    assert g1.processes is None
    assert g1.memory.total_bytes is None and g1.utilization.gpu is None


def test_the_vgpu_report_names_each_vm_and_reads_unpadded_expiries() -> None:
    g0, g1 = esxi().gpus
    first, second = g0.vgpu_instances
    assert (first.vm_id, first.vm_id_type) == ("2102359", "domain_id")  # the world ID
    assert first.vm is not None and first.vm.name == "render-farm-01"
    assert second.vm is not None and second.vm.name == "finance, q3 vdi"
    assert first.license.expiry_timestamp_seconds == JULY_7  # 2026-7-7 16:1:44 GMT
    assert first.utilization.sm == pytest.approx(0.41) and first.utilization.samples == 1
    # <utilization>N/A</utilization>, <encoder_stats>N/A</encoder_stats>, used N/A: absent.
    assert second.utilization.sm is None and second.utilization.samples == 0
    assert second.encoder_sessions is None and second.fbc_sessions is None
    assert second.framebuffer_used_bytes is None and second.framebuffer_total_bytes == 4096 * MIB
    assert g1.vgpu_instances == ()


def test_a_vgpu_without_a_vm_name_is_named_from_the_process_list() -> None:
    """The report's VM ID is the VM's world ID, the pid of its entry in the device report."""
    unnamed = VGPU.replace(b"<vm_name>render-farm-01</vm_name>", b"")
    first = esxi(unnamed).gpus[0].vgpu_instances[0]
    assert first.vm is not None and first.vm.name == "render-farm-01"


def test_a_windows_guest_without_virtualization_mode_or_process_memory() -> None:
    snap = parse_reports(
        (FIXTURES / "windows-vgpu-guest-device.xml").read_bytes(), None, timestamp=0.0
    )
    (g,) = snap.gpus
    assert g.virtualization_mode is None and g.host_vgpu_mode is None  # the element is absent
    assert [(p.pid, p.name, p.used_memory_bytes) for p in g.processes or ()] == [
        (1312, None, None),  # an empty name and N/A memory: absent, not "" or 0
        (6120, r"C:\Program Files\Blender Foundation\Blender 4.2\blender.exe", None),
    ]
    (feature,) = g.guest_licenses
    assert feature.licensed is True and feature.expiry_timestamp_seconds == JULY_7


@pytest.mark.parametrize(
    ("vgpu", "failure"),
    [
        (b"", "empty"),  # what an ESXi host without vGPU XML support printed, exit status 0
        (b"  \n", "empty"),
        (b"No supported devices in vGPU mode\n", "unparsable"),
        (b"<html>maintenance</html>", "unparsable"),
        (ReportFailure("exit_status", "nvidia-smi vgpu -q -x exited 6"), "exit_status"),
        (ReportFailure("timeout", "nvidia-smi vgpu -q -x gave no answer within 10 s"), "timeout"),
    ],
)
def test_a_failed_vgpu_report_leaves_the_host_served_from_its_device_report(
    vgpu: bytes | ReportFailure, failure: str
) -> None:
    snap = esxi(vgpu)
    assert snap.health.up and len(snap.gpus) == 2
    assert [p.name for p in snap.gpus[0].processes or ()] == ["render-farm-01", "finance, q3 vdi"]
    assert all(g.vgpu_instances == () for g in snap.gpus)  # unread, and said so:
    status = {c.name: c for c in snap.collectors}
    assert status["device"].success and not status["vgpu"].success
    assert status["vgpu"].failure == failure and status["vgpu"].detail


def _samples(view: HostsView) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = render(view, families=HOST_FAMILIES).decode()
    return {
        f.name: [(s.labels, s.value) for s in f.samples]
        for f in text_string_to_metric_families(text)
    }


def test_metrics_show_the_vms_and_why_the_vgpu_report_is_missing() -> None:
    view = HostsView((HostSnapshot("esxi-1", esxi(b"")),), "nvidia-smi over SSH (1 hosts)")
    got = _samples(view)
    assert got["vgpumon_up"] == [({"host": "esxi-1"}, 1.0)], "the host is up"
    assert {s["gpu"] for s, _ in got["vgpumon_gpu_info"]} == {"0", "1"}
    reasons = {s["reason"]: v for s, v in got["vgpumon_scrape_collector_failure_reason"]}
    assert reasons["empty"] == 1.0 and sum(reasons.values()) == 1.0
    success = {s["collector"]: v for s, v in got["vgpumon_scrape_collector_success"]}
    assert success == {"device": 1.0, "vgpu": 0.0}
    memory = {s["vm_id"]: v for s, v in got["vgpumon_vm_memory_used_bytes"]}
    assert memory == {"2102359": 8192.0 * MIB, "2104418": 4096.0 * MIB}
    names = {s["vm_id"]: s["vm_name"] for s, _ in got["vgpumon_vm_info"]}
    assert names == {"2102359": "render-farm-01", "2104418": "finance, q3 vdi"}
