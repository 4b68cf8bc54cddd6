"""`vgpumon scenarios`: list, show and check scenario files."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpumon.cli import main
from vgpumon.sim import builtin_scenarios
from vgpumon.sim.scenario import builtin_text


def test_lists_every_builtin_with_its_description(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(builtin_scenarios())
    for line, (name, description) in zip(lines, builtin_scenarios().items(), strict=True):
        assert line.split()[0] == name
        assert line.endswith(description)


def test_show_prints_the_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--show", "passthrough-guest"]) == 0
    assert capsys.readouterr().out == builtin_text("passthrough-guest")


def test_show_unknown_name_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scenarios", "--show", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vgpumon: error: unknown built-in scenario 'nope'")
    assert err.count("\n") == 1


def test_check_reports_errors_with_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("gpus:\n  - {model: a100-sxm-40gb, count: 2, mig: {enabled: true}}\n")
    assert main(["scenarios", "--check", str(good)]) == 0
    assert (
        capsys.readouterr().out.strip()
        == "good: ok - 2 GPU(s) (a100-sxm-40gb), 2 with MIG, 0 fault(s)"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus:\n  - model: a100-sxm-40gb\n    memory:\n      total: lots\n")
    assert main(["scenarios", "--check", str(bad)]) == 2
    assert capsys.readouterr().err == (
        "vgpumon: error: scenario bad.yaml line 4: gpus[0].memory.total: "
        'expected a size like "80GiB", got "lots"\n'
    )
