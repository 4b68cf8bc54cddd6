"""The Prometheus scrape examples pass ``promtool check config`` and load the rules file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from ci_helpers import promtool

PROMETHEUS = Path(__file__).resolve().parents[2] / "packaging" / "prometheus"


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


def test_file_sd_example_keeps_every_target_distinct(tmp_path: Path) -> None:
    """A real Prometheus with the example's scrape job scrapes three exporters on 127.0.0.1,
    127.0.0.2 and 127.0.0.3 (one port): three instances, each up, none merged into another."""
    import json
    import sys
    import time
    import urllib.parse
    import urllib.request

    from export_helpers import free_port
    from prometheus_helpers import prometheus_binary, start, start_prometheus, stop_all

    prometheus_binary()
    example = yaml.safe_load((PROMETHEUS / "prometheus-file-sd.yml").read_text(encoding="utf-8"))
    (job,) = example["scrape_configs"]
    port = free_port()
    addresses = [f"127.0.0.{n}:{port}" for n in (1, 2, 3)]
    targets = tmp_path / "targets"
    targets.mkdir()
    (targets / "hosts.yml").write_text(
        yaml.safe_dump([{"targets": addresses, "labels": {"cluster": "test"}}])
    )
    job["file_sd_configs"] = [{"files": [str(targets / "*.yml")], "refresh_interval": "1s"}]
    procs = []
    try:
        for address in addresses:
            cmd = [sys.executable, "-m", "vgpumon.cli", "serve", "--sim", "passthrough-guest"]
            log = tmp_path / f"serve-{address}.log"
            procs.append(start([*cmd, "--web.listen-address", address, "--interval", "1"], log))
        url, proc, _ = start_prometheus(tmp_path, [job])
        procs.append(proc)
        query = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": "up"})
        ups: dict[str, str] = {}
        give_up = time.monotonic() + 45
        while time.monotonic() < give_up:
            try:
                with urllib.request.urlopen(query, timeout=5) as resp:
                    result = json.load(resp)["data"]["result"]
                ups = {r["metric"]["instance"]: r["value"][1] for r in result}
            except OSError:
                pass
            if len(ups) == 3 and set(ups.values()) == {"1"}:
                break
            time.sleep(0.5)
        assert ups == {"127.0.0.1": "1", "127.0.0.2": "1", "127.0.0.3": "1"}
    finally:
        stop_all(procs)
