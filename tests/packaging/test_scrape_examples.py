"""The Prometheus scrape examples pass ``promtool check config`` and load the rules file."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

PROMETHEUS = Path(__file__).resolve().parents[2] / "packaging" / "prometheus"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (Debian package prometheus; see .ci/run)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


@pytest.mark.parametrize("name", ["prometheus-static.yml", "prometheus-file-sd.yml"])
def test_scrape_example_is_a_valid_config(name: str) -> None:
    result = subprocess.run(
        [promtool(), "check", "config", name],
        cwd=PROMETHEUS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load((PROMETHEUS / name).read_text(encoding="utf-8"))
    assert config["rule_files"] == ["vgpumon.rules.yml"]
    assert all("vgpumon" in job["job_name"] for job in config["scrape_configs"])


def test_file_sd_targets_are_target_groups() -> None:
    groups = yaml.safe_load((PROMETHEUS / "targets" / "hypervisors.yml").read_text())
    assert groups and all(set(g) <= {"targets", "labels"} for g in groups)
    assert all(t.endswith(":9839") for g in groups for t in g["targets"])
