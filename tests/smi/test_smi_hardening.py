"""The parser treats a report as hostile input: bounded, no entities, only <nvidia_smi_log>."""

from __future__ import annotations

import contextlib
from pathlib import Path
from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpumon.smi import SmiParseError, parse_reports, xmlsafe

MINIMAL = '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log><driver_version>1.0</driver_version></nvidia_smi_log>'  # noqa: E501


def test_the_doctype_every_real_report_carries_is_accepted() -> None:
    assert parse_reports(MINIMAL, None, timestamp=0).driver.driver_version == "1.0"


def test_entity_expansion_is_refused() -> None:
    bomb = (
        '<?xml version="1.0"?><!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
        "<nvidia_smi_log><driver_version>&b;</driver_version></nvidia_smi_log>"
    )
    with pytest.raises(SmiParseError, match="refused"):
        parse_reports(bomb, None, timestamp=0)


def test_external_entities_are_refused() -> None:
    xxe = (
        '<?xml version="1.0"?><!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        "<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>"
    )
    with pytest.raises(SmiParseError, match="refused"):
        parse_reports(xxe, None, timestamp=0)


def test_oversized_reports_are_refused_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(xmlsafe, "MAX_REPORT_BYTES", 64)
    with pytest.raises(SmiParseError, match="more than the 64 allowed"):
        parse_reports(MINIMAL, None, timestamp=0)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ("", "empty"),
        ("bash: nvidia-smi: command not found", "not XML"),
        ("<html><body>login</body></html>", "not <nvidia_smi_log>"),
        ("<nvidia_smi_log><gpu", "not XML"),
    ],
)
def test_garbage_is_one_clear_error(data: str, match: str) -> None:
    with pytest.raises(SmiParseError, match=match):
        parse_reports(data, None, timestamp=0)


def test_placeholders_are_absent_never_zero() -> None:
    report = (
        '<nvidia_smi_log><gpu id="00000000:01:00.0"><uuid>GPU-1</uuid>'
        "<fb_memory_usage><total>[N/A]</total><used>Not Supported</used>"
        "<free>[Insufficient Permissions]</free></fb_memory_usage>"
        "<utilization><gpu_util>N/A</gpu_util></utilization>"
        "<temperature><gpu_temp>garbage C</gpu_temp></temperature>"
        "</gpu></nvidia_smi_log>"
    )
    (g,) = parse_reports(report, None, timestamp=0).gpus
    assert g.memory.total_bytes is None
    assert g.memory.used_bytes is None
    assert g.memory.free_bytes is None
    assert g.utilization.gpu is None
    assert g.temperatures.gpu_celsius is None


def _xml_tree() -> st.SearchStrategy[str]:
    """Random element trees using the report's real element names and nvidia-smi-like values."""
    tags = st.sampled_from(
        [
            "gpu", "vgpu", "uuid", "fb_memory_usage", "total", "used", "utilization", "gpu_util",
            "power_draw", "gpu_power_readings", "temperature", "gpu_temp", "clocks", "sm_clock",
            "license_status", "vgpu_type", "mig_devices", "mig_device", "gpu_instance_id",
            "processes", "process_info", "pid", "frame_rate_limit", "ecc_errors", "volatile",
            "encoder_stats", "session_count", "pcie_gen", "current_link_width",
        ]
    )  # fmt: skip
    values = st.one_of(
        st.sampled_from(["N/A", "[N/A]", "12 MiB", "7 %", "1.5 W", "37 C", "135 MHz", "16x",
                         "Enabled", "Licensed (Expiry: 2026-13-45 99:1:1 GMT)", "-1", "P99"]),
        st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12),
    )  # fmt: skip

    def element(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.builds(
            lambda tag, ident, body: f"<{tag}{ident}>{body}</{tag}>",
            tags,
            st.sampled_from(["", ' id="7"', ' id="00000000:01:00.0"', ' id="x"']),
            st.one_of(values.map(escape), st.lists(children, max_size=4).map("".join)),
        )

    leaf = values.map(escape)
    return st.recursive(leaf, element, max_leaves=30).map(
        lambda body: f"<nvidia_smi_log>{body}</nvidia_smi_log>"
    )


@settings(max_examples=200, deadline=None)
@given(device=_xml_tree(), vgpu=_xml_tree())
def test_any_report_parses_or_fails_with_one_error(device: str, vgpu: str) -> None:
    """Whatever a host prints: a snapshot or SmiParseError, never another exception."""
    snapshot = parse_reports(device, vgpu, timestamp=0)
    for g in snapshot.gpus:  # nvidia-smi prints no negative amounts; none is made up
        assert g.memory.total_bytes is None or g.memory.total_bytes >= 0
        assert g.power_watts is None or g.power_watts >= 0


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_never_escape_as_another_exception(data: bytes) -> None:
    with contextlib.suppress(SmiParseError):
        parse_reports(data, None, timestamp=0)


# -- issue 33: one hostile name, or the same GPU twice ------------------------------------------

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "smi" / "telegraf-quadro-p2000-v12.xml"
PROCESS = (
    b"<process_info><gpu_instance_id>N/A</gpu_instance_id><compute_instance_id>N/A"
    b"</compute_instance_id><pid>4242</pid><type>C</type><process_name>NAME</process_name>"
    b"<used_memory>100 MiB</used_memory></process_info>"
)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        (b"caf\xe9-not-utf8", "caf\ufffd-not-utf8"),
        (b"\x1b]52;c;UFdORUQ=\x07esc", "\ufffd]52;c;UFdORUQ=\ufffdesc"),
        (b"nul\x00byte", "nul\ufffdbyte"),
    ],
)
def test_a_process_name_xml_cannot_hold_costs_only_that_name(name: bytes, shown: str) -> None:
    """One byte that is not UTF-8, or a control character XML forbids, in one process's name
    (anyone on the host chooses it) used to make the whole report unreadable: the host blanked."""
    xml = FIXTURE.read_bytes()
    xml = xml.replace(b"<processes>", b"<processes>" + PROCESS.replace(b"NAME", name), 1)
    snap = parse_reports(xml, None, timestamp=0)
    gpu = snap.gpus[0]
    assert gpu.name and gpu.processes is not None
    assert [p.name for p in gpu.processes] == [shown]


def test_the_same_gpu_twice_is_one_clear_error() -> None:
    xml = FIXTURE.read_bytes()
    start, end = xml.index(b"<gpu id="), xml.index(b"</gpu>") + len(b"</gpu>")
    doubled = xml[:end] + xml[start:end] + xml[end:]
    with pytest.raises(SmiParseError, match="listed twice"):
        parse_reports(doubled, None, timestamp=0)
