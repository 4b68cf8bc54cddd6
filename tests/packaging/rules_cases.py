"""promtool unit-test cases for every alert in packaging/prometheus/vgpumon.rules.yml.

Each case gives series of a broken host ("bad") and of a healthy one ("good") and the labels of the
alerts that must fire at ``eval_time``. :func:`promtool_tests` turns them into a promtool test file:
one group with both hosts (exactly the listed alerts fire: the healthy host's do not) and one with
the healthy host alone (nothing fires). The annotations promtool compares are rendered from the
rules file, so a changed summary does not need a second edit here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "packaging" / "prometheus" / "vgpumon.rules.yml"

BAD = {"instance": "bad:9839", "job": "vgpumon"}
GOOD = {"instance": "good:9839", "job": "vgpumon"}
GPU = {"gpu": "0", "uuid": "GPU-0"}


def series(name: str, host: dict[str, str], **labels: str) -> str:
    merged = {**host, **labels}
    inner = ",".join(f'{k}="{v}"' for k, v in merged.items())
    return f"{name}{{{inner}}}"


@dataclass(frozen=True)
class AlertCase:
    alert: str
    eval_time: str
    bad: dict[str, str]  # series -> promtool values notation
    good: dict[str, str]
    fired: list[dict[str, str]] = field(default_factory=list)  # labels, without alertname


def _gpu(name: str, host: dict[str, str], **labels: str) -> str:
    return series(name, host, **GPU, **labels)


SHARE_STATE = "vgpumon_vgpu_scheduler_share_state"
ENCODER_SHARE_STATE = "vgpumon_vgpu_encoder_share_state"


CASES: tuple[AlertCase, ...] = (
    AlertCase(
        "VgpumonExporterDown",
        "6m",
        {series("up", BAD): "0x10"},
        {series("up", GOOD): "1x10"},
        [BAD],
    ),
    AlertCase(
        "VgpumonNvmlDown",
        "6m",
        {series("vgpumon_up", BAD): "0x10"},
        {series("vgpumon_up", GOOD): "1x10"},
        [BAD],
    ),
    AlertCase(
        "VgpumonExporterWedged",
        "3m",
        {series("vgpumon_sampler_wedged", BAD): "1x5"},
        {series("vgpumon_sampler_wedged", GOOD): "0x5"},
        [BAD],
    ),
    AlertCase(
        "VgpumonExporterStale",
        "5m",
        # time() is 300 at 5m: the bad sample stays at 0, the good one keeps pace with the clock.
        {series("vgpumon_last_sample_timestamp_seconds", BAD): "0x10"},
        {series("vgpumon_last_sample_timestamp_seconds", GOOD): "0+60x10"},
        [BAD],
    ),
    AlertCase(
        "VgpumonCollectorFailing",
        "16m",
        {series("vgpumon_scrape_collector_success", BAD, collector="vgpu"): "0x20"},
        {series("vgpumon_scrape_collector_success", GOOD, collector="vgpu"): "1x20"},
        [{**BAD, "collector": "vgpu"}],
    ),
    AlertCase(
        "VgpumonExporterRefusingConnections",
        "10m",
        {series("vgpumon_http_connections_refused_total", BAD): "0+6x15"},
        {series("vgpumon_http_connections_refused_total", GOOD): "0x15"},
        [BAD],
    ),
    AlertCase(
        "VgpumonGpuLost",
        "2m",
        {_gpu("vgpumon_gpu_up", BAD): "1 0 0 0 0"},
        {_gpu("vgpumon_gpu_up", GOOD): "1x5"},
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonXidCritical",
        "3m",
        # The catalogued Xid exists at 0 before the first event, so the first one fires.
        {_gpu("vgpumon_gpu_xid_errors_total", BAD, xid="79"): "0 0 1 1 1"},
        {
            _gpu("vgpumon_gpu_xid_errors_total", GOOD, xid="79"): "0x5",
            _gpu("vgpumon_gpu_xid_errors_total", GOOD, xid="13"): "0 1 2 3 4",
        },
        [{**BAD, **GPU, "xid": "79"}],
    ),
    AlertCase(
        "VgpumonXidInformational",
        "3m",
        {_gpu("vgpumon_gpu_xid_errors_total", BAD, xid="13"): "0 0 1 1 1"},
        {
            _gpu("vgpumon_gpu_xid_errors_total", GOOD, xid="13"): "0x5",
            _gpu("vgpumon_gpu_xid_errors_total", GOOD, xid="48"): "0 1 2 3 4",
        },
        [{**BAD, **GPU, "xid": "13"}],
    ),
    AlertCase(
        "VgpumonEccUncorrectable",
        "3m",
        {_gpu("vgpumon_gpu_ecc_volatile_errors_total", BAD, type="uncorrected"): "0 0 2 2 2"},
        {
            _gpu("vgpumon_gpu_ecc_volatile_errors_total", GOOD, type="uncorrected"): "0x5",
            _gpu("vgpumon_gpu_ecc_volatile_errors_total", GOOD, type="corrected"): "0+5x5",
        },
        [{**BAD, **GPU, "type": "uncorrected"}],
    ),
    AlertCase(
        "VgpumonRowRemapPending",
        "6m",
        {_gpu("vgpumon_gpu_remapped_rows_pending", BAD): "1x10"},
        {_gpu("vgpumon_gpu_remapped_rows_pending", GOOD): "0x10"},
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonRowRemapFailed",
        "1m",
        {_gpu("vgpumon_gpu_remapped_rows_failed", BAD): "1x3"},
        {_gpu("vgpumon_gpu_remapped_rows_failed", GOOD): "0x3"},
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonGpuRecoveryAction",
        "2m",
        {
            _gpu("vgpumon_gpu_recovery_action", BAD, action="gpu_reset"): "1x3",
            _gpu("vgpumon_gpu_recovery_action", BAD, action="none"): "0x3",
        },
        {
            _gpu("vgpumon_gpu_recovery_action", GOOD, action="gpu_reset"): "0x3",
            _gpu("vgpumon_gpu_recovery_action", GOOD, action="none"): "1x3",
        },
        [{**BAD, **GPU, "action": "gpu_reset"}],
    ),
    AlertCase(
        "VgpumonGpuRepairPending",
        "6m",
        {_gpu("vgpumon_gpu_repair_pending", BAD, kind="tpc"): "1x10"},
        {_gpu("vgpumon_gpu_repair_pending", GOOD, kind="tpc"): "0x10"},
        [{**BAD, **GPU, "kind": "tpc"}],
    ),
    AlertCase(
        "VgpumonGpuUnrepairableMemory",
        "1m",
        {_gpu("vgpumon_gpu_unrepairable_memory", BAD): "1x3"},
        {_gpu("vgpumon_gpu_unrepairable_memory", GOOD): "0x3"},
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonCcGpusNotReady",
        "11m",
        {
            _gpu("vgpumon_gpu_cc_ready", BAD): "0x15",
            _gpu("vgpumon_gpu_cc_enabled", BAD): "1x15",
        },
        {
            _gpu("vgpumon_gpu_cc_ready", GOOD): "1x15",
            _gpu("vgpumon_gpu_cc_enabled", GOOD): "1x15",
        },
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonThermalSlowdown",
        "11m",
        {_gpu("vgpumon_gpu_clock_event_active", BAD, reason="hw_thermal"): "1x15"},
        {
            _gpu("vgpumon_gpu_clock_event_active", GOOD, reason="hw_thermal"): "0x15",
            _gpu("vgpumon_gpu_clock_event_active", GOOD, reason="sw_power_cap"): "1x15",
        },
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonPowerSlowdown",
        "11m",
        {_gpu("vgpumon_gpu_clock_event_active", BAD, reason="power_brake"): "1x15"},
        # Running at the software power cap is what a fully loaded GPU does: no alert.
        {_gpu("vgpumon_gpu_clock_event_active", GOOD, reason="sw_power_cap"): "1x15"},
        [{**BAD, **GPU}],
    ),
    AlertCase(
        "VgpumonVgpuUnlicensed",
        "11m",
        {
            _gpu("vgpumon_vgpu_license_state", BAD, vgpu_id="1", state="licensed"): "0x15",
            _gpu(
                "vgpumon_vgpu_license_state", BAD, vgpu_id="1", state="unlicensed_restricted"
            ): "1x15",
        },
        {
            _gpu("vgpumon_vgpu_license_state", GOOD, vgpu_id="1", state="licensed"): "1x15",
            _gpu(
                "vgpumon_vgpu_license_state", GOOD, vgpu_id="1", state="unlicensed_restricted"
            ): "0x15",
        },
        [{**BAD, **GPU, "vgpu_id": "1", "state": "unlicensed_restricted"}],
    ),
    AlertCase(
        "VgpumonVgpuLicenseExpiring",
        "2h",
        # time() is 7200 at 2h: three days left on the bad host, thirty on the good one.
        {
            _gpu("vgpumon_vgpu_license_expiry_timestamp_seconds", BAD, vgpu_id="1"): (
                f"{7200 + 3 * 86400}x150"
            )
        },
        {
            _gpu("vgpumon_vgpu_license_expiry_timestamp_seconds", GOOD, vgpu_id="1"): (
                f"{7200 + 30 * 86400}x150"
            )
        },
        [{**BAD, **GPU, "vgpu_id": "1"}],
    ),
    AlertCase(
        "VgpumonVgpuStarved",
        "20m",
        # The exporter's verdict (docs/verdicts.md): vGPU 1 of the bad host is starved; the good
        # host's vGPU 1 is ok and its vGPU 2 has no verdict (log entries missed): never starved.
        {
            **{
                _gpu(SHARE_STATE, BAD, vgpu_id="1", state=st): v
                for st, v in (("starved", "1x40"), ("ok", "0x40"), ("missed_entries", "0x40"))
            },
        },
        {
            **{
                _gpu(SHARE_STATE, GOOD, vgpu_id="1", state=st): v
                for st, v in (("starved", "0x40"), ("ok", "1x40"), ("missed_entries", "0x40"))
            },
            **{
                _gpu(SHARE_STATE, GOOD, vgpu_id="2", state=st): v
                for st, v in (("starved", "0x40"), ("ok", "0x40"), ("missed_entries", "1x40"))
            },
        },
        [{**BAD, **GPU, "vgpu_id": "1", "state": "starved"}],
    ),
    AlertCase(
        "VgpumonVgpuEncoderStarved",
        "20m",
        # The same verdict on a video encoder engine: vGPU 3 of the bad host is starved on
        # nvenc0; the good host's is ok there and starved on no engine.
        {
            _gpu(ENCODER_SHARE_STATE, BAD, engine="nvenc0", vgpu_id="3", state=st): v
            for st, v in (("starved", "1x40"), ("ok", "0x40"))
        },
        {
            _gpu(ENCODER_SHARE_STATE, GOOD, engine="nvenc0", vgpu_id="3", state=st): v
            for st, v in (("starved", "0x40"), ("ok", "1x40"))
        },
        [{**BAD, **GPU, "engine": "nvenc0", "vgpu_id": "3", "state": "starved"}],
    ),
    AlertCase(
        "VgpumonVgpuVanished",
        "20m",
        # vm-1's vGPU is gone at 11m; vm-2 is still there; vm-3 moved to the good host at 11m.
        {
            _gpu("vgpumon_scrape_collector_success", BAD, collector="vgpu"): "1x40",
            _gpu("vgpumon_vgpu_info", BAD, vgpu_id="1", vgpu_type="T-4Q", vm_id="vm-1"): (
                "1x10 stale"
            ),
            _gpu("vgpumon_vgpu_info", BAD, vgpu_id="3", vgpu_type="T-4Q", vm_id="vm-3"): (
                "1x10 stale"
            ),
        },
        {
            _gpu("vgpumon_scrape_collector_success", GOOD, collector="vgpu"): "1x40",
            _gpu("vgpumon_vgpu_info", GOOD, vgpu_id="2", vgpu_type="T-4Q", vm_id="vm-2"): "1x40",
            _gpu("vgpumon_vgpu_info", GOOD, vgpu_id="5", vgpu_type="T-4Q", vm_id="vm-3"): (
                "_x11 1x29"
            ),
        },
        [{**BAD, **GPU, "vgpu_id": "1", "vgpu_type": "T-4Q", "vm_id": "vm-1"}],
    ),
    AlertCase(
        "VgpumonVgpuFramebufferNearlyFull",
        "16m",
        {
            _gpu("vgpumon_vgpu_framebuffer_used_bytes", BAD, vgpu_id="1"): "97x20",
            _gpu("vgpumon_vgpu_framebuffer_total_bytes", BAD, vgpu_id="1"): "100x20",
        },
        {
            _gpu("vgpumon_vgpu_framebuffer_used_bytes", GOOD, vgpu_id="1"): "50x20",
            _gpu("vgpumon_vgpu_framebuffer_total_bytes", GOOD, vgpu_id="1"): "100x20",
        },
        [{**BAD, **GPU, "vgpu_id": "1"}],
    ),
    AlertCase(
        "VgpumonMigMemoryNearlyFull",
        "16m",
        {
            _gpu("vgpumon_mig_memory_used_bytes", BAD, gpu_instance="1"): "97x20",
            _gpu("vgpumon_mig_memory_total_bytes", BAD, gpu_instance="1"): "100x20",
        },
        {
            _gpu("vgpumon_mig_memory_used_bytes", GOOD, gpu_instance="1"): "50x20",
            _gpu("vgpumon_mig_memory_total_bytes", GOOD, gpu_instance="1"): "100x20",
        },
        [{**BAD, **GPU, "gpu_instance": "1"}],
    ),
    AlertCase(
        "VgpumonNvlinkDown",
        "6m",
        # Link 17 of the bad GPU went down; every link of the good one stays up.
        {
            _gpu("vgpumon_gpu_nvlink_up", BAD, link="0"): "1x10",
            _gpu("vgpumon_gpu_nvlink_up", BAD, link="17"): "1 0x9",
        },
        {_gpu("vgpumon_gpu_nvlink_up", GOOD, link=link): "1x10" for link in ("0", "17")},
        [{**BAD, **GPU, "link": "17"}],
    ),
    AlertCase(
        "VgpumonNvlinkErrorBurst",
        "5m",
        # Bad: 50 CRC errors on link 2 in two minutes, and one recovery on link 3. Good: a CRC
        # error now and then (5 in 10 minutes) and a recovery count that stays where it was.
        {
            _gpu("vgpumon_gpu_nvlink_errors_total", BAD, link="2", error="crc"): "0 0 25 50 50 50",
            _gpu("vgpumon_gpu_nvlink_errors_total", BAD, link="3", error="recovery"): "2 2 2 3 3 3",
        },
        {
            _gpu(
                "vgpumon_gpu_nvlink_errors_total", GOOD, link="2", error="crc"
            ): "100 101 102 103 104 105",
            _gpu("vgpumon_gpu_nvlink_errors_total", GOOD, link="3", error="recovery"): "2x6",
        },
        [
            {**BAD, **GPU, "link": "2", "error": "crc"},
            {**BAD, **GPU, "link": "3", "error": "recovery"},
        ],
    ),
    AlertCase(
        "VgpumonGuestUnlicensed",
        "12m",
        {
            _gpu("vgpumon_guest_license_state", BAD, feature="vws", state="unlicensed"): "1x15",
            _gpu("vgpumon_guest_license_state", BAD, feature="vws", state="licensed"): "0x15",
        },
        {
            _gpu("vgpumon_guest_license_state", GOOD, feature="vws", state="unlicensed"): "0x15",
            _gpu("vgpumon_guest_license_state", GOOD, feature="vws", state="licensed"): "1x15",
        },
        [{**BAD, **GPU, "feature": "vws", "state": "unlicensed"}],
    ),
    AlertCase(
        "VgpumonGuestLicenseExpiring",
        "70m",
        # time() is 4200 at 70m: the bad license ends 3 days later, the good one 30 days later.
        {
            _gpu("vgpumon_guest_license_expiry_timestamp_seconds", BAD, feature="vws"): (
                f"{3 * 86400}x80"
            )
        },
        {
            _gpu("vgpumon_guest_license_expiry_timestamp_seconds", GOOD, feature="vws"): (
                f"{30 * 86400}x80"
            )
        },
        [{**BAD, **GPU, "feature": "vws"}],
    ),
)


def rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in doc["groups"] for rule in group["rules"]]


def alerts() -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for rule in rules() if "alert" in rule}


LABEL_REF = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")


def render(template: str, labels: dict[str, str]) -> str:
    """The alert templates use only ``{{ $labels.x }}``: substitute them like Prometheus does."""
    assert "{{" not in LABEL_REF.sub("", template), f"unsupported template: {template}"
    return LABEL_REF.sub(lambda m: labels.get(m.group(1), ""), template)


def _input(values: dict[str, str]) -> list[dict[str, str]]:
    return [{"series": s, "values": v} for s, v in values.items()]


def promtool_tests(rule_file: Path) -> dict[str, Any]:
    rule_defs = alerts()
    tests: list[dict[str, Any]] = []
    for case in CASES:
        rule = rule_defs[case.alert]
        expected = [
            {
                "exp_labels": {**labels, "alertname": case.alert, **rule.get("labels", {})},
                "exp_annotations": {
                    k: render(v, labels) for k, v in rule.get("annotations", {}).items()
                },
            }
            for labels in case.fired
        ]
        both = {**case.bad, **case.good}
        tests.append(
            {
                "name": f"{case.alert} fires for the broken host only",
                "interval": "1m",
                "input_series": _input(both),
                "alert_rule_test": [
                    {"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": expected}
                ],
            }
        )
        tests.append(
            {
                "name": f"{case.alert} stays quiet on a healthy host",
                "interval": "1m",
                "input_series": _input(case.good),
                "alert_rule_test": [
                    {"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": []}
                ],
            }
        )
    tests.append(
        {
            # Nothing ran (success 0 for every collector) because NVML is down: one alert for
            # the cause, not one per collector.
            "name": "VgpumonCollectorFailing leaves a host whose NVML is down to VgpumonNvmlDown",
            "interval": "1m",
            "input_series": _input(
                {
                    series("vgpumon_up", BAD): "0x20",
                    series("vgpumon_scrape_collector_success", BAD, collector="vgpu"): "0x20",
                }
            ),
            "alert_rule_test": [
                {"eval_time": "16m", "alertname": "VgpumonCollectorFailing", "exp_alerts": []}
            ],
        }
    )
    return {"rule_files": [str(rule_file)], "evaluation_interval": "1m", "tests": tests}


TEST_FILE = RULES.parent / "vgpumon.rules.test.yml"
TEST_FILE_HEADER = (
    "# promtool unit tests of vgpumon.rules.yml: promtool test rules vgpumon.rules.test.yml\n"
    "# Generated by tests/packaging/rules_cases.py (python tests/packaging/rules_cases.py);\n"
    "# a test fails while this file differs from the cases there.\n"
)


def render_test_file() -> str:
    """The committed test file; its rule file path is relative, as promtool resolves it."""
    doc = promtool_tests(Path(RULES.name))
    return TEST_FILE_HEADER + yaml.safe_dump(doc, sort_keys=False, width=1000)


if __name__ == "__main__":
    TEST_FILE.write_text(render_test_file(), encoding="utf-8")
    print(f"wrote {TEST_FILE}")
