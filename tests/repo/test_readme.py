"""The README is the front door: its commands must be the ones CI and the code actually use."""

from __future__ import annotations

import re
from pathlib import Path

from vgpumon.config.serve import DEFAULT_PORT
from vgpumon.sim import builtin_scenarios

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _shell_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (command,) = re.findall(r'^TEST_COMMAND="(.*)"$', ci, flags=re.M)
    assert any(block.strip() == command for block in _shell_blocks())


def test_quickstart_starts_a_builtin_scenario_on_the_default_port() -> None:
    first = _shell_blocks()[0].strip()
    assert "pip install ." in first and "vgpumon serve --sim " in first
    scenario = first.rsplit("--sim ", 1)[1].split()[0]
    assert scenario in builtin_scenarios()
    assert f"localhost:{DEFAULT_PORT}" in README
