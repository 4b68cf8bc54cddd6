"""The cadence settings of expensive values: config file, flags, and what reaches the sampler."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpumon.cli import build_parser
from vgpumon.commands.serve import sampler_config, settings_from_args
from vgpumon.config.serve import ServeSettings
from vgpumon.errors import ConfigError


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


DEFAULTS = {
    "energy": 10.0,
    "pcie_throughput": 10.0,
    "processes": 5.0,
    "gpm": 5.0,
    "bar1": 10.0,
    "license": 10.0,
    "pcie_replay": 10.0,
    "nvlink": 30.0,
    "migration": 10.0,
}


def test_defaults_reach_the_sampler() -> None:
    assert sampler_config(parse()).cadences == DEFAULTS


def test_file_then_flags(tmp_path: Path) -> None:
    path = tmp_path / "serve.yml"
    path.write_text("intervals: {energy: 30, processes: 0}\n")
    from_file = sampler_config(parse("--config", str(path))).cadences
    assert from_file == {**DEFAULTS, "energy": 30.0, "processes": 0.0}
    both = parse(
        "--config", str(path), "--intervals.energy", "0", "--intervals.pcie-throughput", "2"
    )
    assert sampler_config(both).cadences == {
        **DEFAULTS,
        "energy": 0.0,
        "pcie_throughput": 2.0,
        "processes": 0.0,
    }


def test_the_gpm_bar1_and_license_cadences(tmp_path: Path) -> None:
    path = tmp_path / "serve.yml"
    path.write_text("intervals: {gpm: 15, bar1: 0, license: 1m}\n")
    from_file = sampler_config(parse("--config", str(path))).cadences
    assert from_file == {**DEFAULTS, "gpm": 15.0, "bar1": 0.0, "license": 60.0}
    flags = parse("--config", str(path), "--intervals.gpm", "0", "--intervals.license", "30s")
    assert sampler_config(flags).cadences == {**DEFAULTS, "gpm": 0.0, "bar1": 0.0, "license": 30.0}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("intervals: {energy: -1}\n", "line 1: intervals.energy: bad duration -1"),
        ("intervals: {energy: soon}\n", "line 1: intervals.energy: bad duration 'soon'"),
        ("intervals: {fans: 5}\n", 'unknown key "fans" in intervals'),
        ("intervals: {gpm: -5}\n", "line 1: intervals.gpm: bad duration -5"),
    ],
)
def test_bad_values_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "serve.yml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse("--config", str(path))


def test_durations_take_units(tmp_path: Path) -> None:
    settings = parse("--intervals.energy", "1m", "--intervals.processes", "500ms")
    assert sampler_config(settings).cadences["energy"] == 60.0
    assert sampler_config(settings).cadences["processes"] == 0.5
