"""The quickstart host (README: `vgpumon serve --sim kvm-vgpu-timesliced`) shows every vGPU license
state, expiry included, so that every panel of the vGPU host dashboard has data on it."""

from __future__ import annotations

from dashboard_helpers import ROOT
from export_helpers import samples_by_name

from vgpumon.model import VGPU_LICENSE_STATES

QUICKSTART = "kvm-vgpu-timesliced"


def exposition() -> str:
    # The golden exposition is the scenario's own (tests/metrics/test_golden.py keeps it so).
    return (ROOT / "tests" / "golden" / f"{QUICKSTART}.prom").read_text(encoding="utf-8")


def test_the_readme_quickstart_serves_this_scenario() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"vgpumon serve --sim {QUICKSTART}" in readme


def test_every_license_state_is_on_the_quickstart_host() -> None:
    samples = samples_by_name(exposition())
    states = {
        labels["state"] for labels, value in samples["vgpumon_vgpu_license_state"] if value == 1.0
    }
    assert states == set(VGPU_LICENSE_STATES)


def test_the_quickstart_host_has_licenses_that_expire() -> None:
    samples = samples_by_name(exposition())
    assert len(samples.get("vgpumon_vgpu_license_expiry_timestamp_seconds", [])) >= 2


def test_the_readme_names_python3_venv_for_debian_and_ubuntu() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme[readme.index("## Quickstart") : readme.index("## On a real host")]
    assert "apt-get install python3-venv" in quickstart
