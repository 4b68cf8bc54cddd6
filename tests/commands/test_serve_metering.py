"""``serve``'s metering settings: on by default, --no-metering.enabled, the idle ratio, host /proc
only with per-process series on a real host."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpumon.cli import build_parser
from vgpumon.collect.metering import MeteringStage
from vgpumon.commands.serve import sampler_recipe, settings_from_args
from vgpumon.config.serve import ServeSettings
from vgpumon.errors import ConfigError


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


def stage(settings: ServeSettings) -> MeteringStage | None:
    found = [e for e in sampler_recipe(settings).enrichers() if isinstance(e, MeteringStage)]
    return found[0] if found else None


def test_on_by_default_off_with_the_flag() -> None:
    on = stage(parse())
    assert on is not None and on.config.idle_ratio == pytest.approx(0.05)
    assert on.config.proc is None  # no --processes: the host's /proc is not read
    assert stage(parse("--no-metering.enabled")) is None


def test_idle_ratio_and_processes() -> None:
    got = stage(parse("--metering.idle-ratio", "10%", "--process-series"))
    assert got is not None and got.config.idle_ratio == pytest.approx(0.1)
    assert got.config.proc == "/proc"
    simulated = stage(parse("--processes", "--sim", "metering-known-load"))
    assert simulated is not None and simulated.config.proc is None  # sim PIDs are not the host's


def test_config_file_keys(tmp_path: Path) -> None:
    path = tmp_path / "serve.yml"
    path.write_text("metering:\n  enabled: false\n  idle_ratio: 0.2\n")
    settings = parse("--config", str(path))
    assert settings.metering is False and settings.metering_idle_ratio == pytest.approx(0.2)


@pytest.mark.parametrize("value", ["150%", "-1", "lots"])
def test_bad_ratio_is_one_line(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--metering\.idle-ratio"):
        parse("--metering.idle-ratio", value)


def test_help_names_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser("serve").parse_args(["serve", "--help"])
    out = capsys.readouterr().out
    assert (
        "--metering.idle-ratio" in out and "default 0.05" in out and "--no-metering.enabled" in out
    )
