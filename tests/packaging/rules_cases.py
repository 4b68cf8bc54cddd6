"""promtool unit-test cases for every alert in packaging/prometheus/vgpumon.rules.yml.

Each case gives series of a broken host ("bad") and of a healthy one ("good") and the labels of the
alerts that must fire at ``eval_time``. :func:`promtool_tests` turns them into a promtool test file:
one group with both hosts (exactly the listed alerts fire: the healthy host's do not) and one with
the healthy host alone (nothing fires). The annotations promtool compares are rendered from the
rules file, so a changed summary does not need a second edit here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "packaging" / "prometheus" / "vgpumon.rules.yml"

BAD = {"instance": "bad:9839", "job": "vgpumon"}
GOOD = {"instance": "good:9839", "job": "vgpumon"}
GPU = {"gpu": "0", "uuid": "GPU-0"}


# Labels a scrape config adds to every target (docs/verdicts.md: rules keep them all).
TARGET_LABELS = {"cluster": "c1", "site": "s1"}


def with_labels(series_text: str, labels: dict[str, str]) -> str:
    """A promtool series ``name{...}`` with ``labels`` added (as a target's would be)."""
    name, _, rest = series_text.partition("{")
    extra = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{extra},{rest}" if rest != "}" else f"{name}{{{extra}}}"


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
    value: str = ""  # the alert's value as {{ $value }} renders it, where an annotation shows it


def _gpu(name: str, host: dict[str, str], **labels: str) -> str:
    return series(name, host, **GPU, **labels)


SHARE_STATE = "vgpumon_vgpu_scheduler_share_state"
VANISHED = "vgpumon_gpu_vgpus_vanished"
DEPARTURES = "vgpumon_gpu_vgpu_departures_total"
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
        "VgpumonVgpuLicenseRenewalOverdue",
        "1h",
        # The exporter's lease verdict (docs/licensing.md): the bad host's lease is not being
        # renewed; the good host's ends within days, as a healthy lease does, and is renewed.
        {_gpu("vgpumon_vgpu_license_renewal_overdue", BAD, vgpu_id="1"): "1x80"},
        {
            _gpu("vgpumon_vgpu_license_renewal_overdue", GOOD, vgpu_id="1"): "0x80",
            _gpu("vgpumon_vgpu_license_expiry_timestamp_seconds", GOOD, vgpu_id="1"): (
                f"{2 * 86400}x80"
            ),
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
        # The exporter's verdict (docs/verdicts.md): on the bad host two vGPUs of two GPUs are
        # gone while their VMs run, from 11m on: one alert for the host, with the count. The
        # good host had VMs shut down (counted as departures, never vanished).
        {
            _gpu(VANISHED, BAD): "0x10 1x30",
            series(VANISHED, BAD, gpu="1", uuid="GPU-1"): "0x10 1x30",
        },
        {
            _gpu(VANISHED, GOOD): "0x40",
            _gpu(DEPARTURES, GOOD, reason="vm_stopped"): "0+1x40",
            _gpu(DEPARTURES, GOOD, reason="vanished"): "0x40",
        },
        [BAD],
        value="2",
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
            # A GPU instance of MIG-backed vGPUs: NVML counts the guests' memory nowhere (0),
            # the exporter's memory in use does, and the alert reads that.
            _gpu("vgpumon_mig_memory_used_bytes", BAD, gpu_instance="1"): "0x20",
            _gpu("vgpumon_mig_memory_in_use_bytes", BAD, gpu_instance="1"): "97x20",
            _gpu("vgpumon_mig_memory_total_bytes", BAD, gpu_instance="1"): "100x20",
        },
        {
            _gpu("vgpumon_mig_memory_in_use_bytes", GOOD, gpu_instance="1"): "50x20",
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
        "VgpumonGuestLicenseRenewalOverdue",
        "1h",
        {_gpu("vgpumon_guest_license_renewal_overdue", BAD, feature="vws"): "1x80"},
        {
            _gpu("vgpumon_guest_license_renewal_overdue", GOOD, feature="vws"): "0x80",
            _gpu("vgpumon_guest_license_expiry_timestamp_seconds", GOOD, feature="vws"): (
                f"{2 * 86400}x80"
            ),
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
VALUE_REF = re.compile(r"\{\{\s*\$value\s*\}\}")


def render(template: str, labels: dict[str, str], value: str = "") -> str:
    """The alert templates use only ``{{ $labels.x }}`` and ``{{ $value }}``: substitute them
    like Prometheus does."""
    template = VALUE_REF.sub(value, template)
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
                    k: render(v, labels, case.value) for k, v in rule.get("annotations", {}).items()
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
        # The same broken host behind a scrape config that adds target labels: every alert
        # carries them (Alertmanager routes by them), whatever the rule aggregates or joins.
        targeted = {**TARGET_LABELS}
        tests.append(
            {
                "name": f"{case.alert} keeps the target labels {sorted(TARGET_LABELS)}",
                "interval": "1m",
                "input_series": _input(
                    {with_labels(k, targeted): v for k, v in {**case.bad, **case.good}.items()}
                ),
                "alert_rule_test": [
                    {
                        "eval_time": case.eval_time,
                        "alertname": case.alert,
                        "exp_alerts": [
                            {**e, "exp_labels": {**e["exp_labels"], **targeted}} for e in expected
                        ],
                    }
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
    # A wedged sampler (up 0, the last good sample served and growing old, collectors as they
    # were): one alert for the cause, not also NVML down, stale and collectors failing.
    wedged = {
        series("vgpumon_sampler_wedged", BAD): "0 1x29",
        series("vgpumon_up", BAD): "1 0x29",
        series("vgpumon_last_sample_timestamp_seconds", BAD): "0x30",
        series("vgpumon_scrape_collector_success", BAD, collector="vgpu"): "1 0x29",
    }
    quiet = ("VgpumonNvmlDown", "VgpumonExporterStale", "VgpumonCollectorFailing")
    tests.append(
        {
            "name": "a wedged sampler raises VgpumonExporterWedged alone",
            "interval": "1m",
            "input_series": _input(wedged),
            "alert_rule_test": [
                {"eval_time": "25m", "alertname": name, "exp_alerts": []} for name in quiet
            ]
            + [
                {
                    "eval_time": "25m",
                    "alertname": "VgpumonExporterWedged",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                **BAD,
                                "alertname": "VgpumonExporterWedged",
                                **rule_defs["VgpumonExporterWedged"].get("labels", {}),
                            },
                            "exp_annotations": {
                                k: render(v, BAD)
                                for k, v in rule_defs["VgpumonExporterWedged"]
                                .get("annotations", {})
                                .items()
                            },
                        }
                    ],
                }
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


class _NoAliases(yaml.SafeDumper):
    """Writes a case's annotations out in full where another case shares them (no &id/*id)."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def render_test_file() -> str:
    """The committed test file; its rule file path is relative, as promtool resolves it."""
    doc = promtool_tests(Path(RULES.name))
    return TEST_FILE_HEADER + yaml.dump(doc, Dumper=_NoAliases, sort_keys=False, width=1000)


def run_promtool_test(
    tmp_path: Path, rule_file: Path, test: dict[str, Any], *, timeout: float = 120
) -> str:
    """``promtool test rules`` on ``test`` (a rule-test document that names ``rule_file`` by its
    name), in ``tmp_path``: asserts that it passes and gives promtool's output. Without promtool
    the test skips, or fails under CI=true (ci_helpers)."""
    # Imported here, where pytest's path has tests/ on it: ``python tests/packaging/rules_cases.py``
    # (the test file's regeneration) runs without it.
    from ci_helpers import promtool

    shutil.copy(rule_file, tmp_path / rule_file.name)
    (tmp_path / "rules.test.yml").write_text(yaml.safe_dump(test, sort_keys=False, width=100000))
    result = subprocess.run(
        [promtool(), "test", "rules", "rules.test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr
    return result.stdout


if __name__ == "__main__":
    TEST_FILE.write_text(render_test_file(), encoding="utf-8")
    print(f"wrote {TEST_FILE}")
