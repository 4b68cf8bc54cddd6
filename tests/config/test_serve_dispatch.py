"""The GPU dispatch setting: config file, flag, what reaches the sampler, and bad values."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpumon.cli import build_parser
from vgpumon.collect.base import DISPATCH_MODES as SAMPLER_MODES
from vgpumon.collect.base import SamplerConfig
from vgpumon.commands.serve import sampler_config, settings_from_args
from vgpumon.config.checks import DISPATCH_MODES
from vgpumon.config.serve import ServeSettings
from vgpumon.errors import ConfigError


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


def test_the_modes_are_the_samplers() -> None:
    # config never imports collect, so the tuple is written twice
    assert DISPATCH_MODES == SAMPLER_MODES
    assert SamplerConfig().dispatch == ServeSettings().dispatch == "auto"


def test_default_file_then_flag(tmp_path: Path) -> None:
    assert sampler_config(parse()).dispatch == "auto"
    path = tmp_path / "serve.yml"
    path.write_text("dispatch: serial\n")
    assert sampler_config(parse("--config", str(path))).dispatch == "serial"
    both = parse("--config", str(path), "--dispatch", "parallel")
    assert sampler_config(both).dispatch == "parallel"


@pytest.mark.parametrize("value", ["fast", "", "3"])
def test_a_bad_value_names_the_flag(value: str) -> None:
    with pytest.raises(ConfigError, match="--dispatch"):
        parse("--dispatch", value)


def test_a_bad_value_names_the_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "serve.yml"
    path.write_text("interval: 1\ndispatch: sometimes\n")
    with pytest.raises(ConfigError, match=r"line 2: dispatch: expected one of auto"):
        parse("--config", str(path))
