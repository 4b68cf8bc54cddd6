"""The parser treats a report as hostile input: bounded, no entities, only <nvidia_smi_log>."""

from __future__ import annotations

import pytest

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
