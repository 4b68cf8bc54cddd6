"""Flag names say what they do, old spellings keep working with one deprecation line, and the
same kind of value has the same metavar in every subcommand."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from vgpumon import logs
from vgpumon.cli import COMMANDS, build_parser, main
from vgpumon.commands.serve import settings_from_args
from vgpumon.config.serve import ServeSettings, load_file


@pytest.fixture(autouse=True)
def logging_not_set_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """As while flags parse at start: an in-process serve of another test may have set it up."""
    monkeypatch.setattr(logs, "_configured", False)


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


def test_per_process_series_have_a_name_of_their_own(capsys: pytest.CaptureFixture[str]) -> None:
    settings = parse("--process-series", "--process-series-max", "5")
    assert settings.process_series is True and settings.process_series_max == 5
    assert parse("--no-process-series").process_series is False
    assert parse().process_series is False
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "old", "new", "check"),
    [
        (["--processes"], "--processes", "--process-series", ("process_series", True)),
        (["--no-processes"], "--no-processes", "--no-process-series", ("process_series", False)),
        (
            ["--processes-max", "3"],
            "--processes-max",
            "--process-series-max",
            ("process_series_max", 3),
        ),
        (["--log-level", "error"], "--log-level", "--log.level", ("log_level", "error")),
    ],
)
def test_old_spellings_work_with_one_deprecation_line(
    argv: list[str],
    old: str,
    new: str,
    check: tuple[str, object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = parse(*argv, *argv)  # given twice: still one line
    assert getattr(settings, check[0]) == check[1]
    err = capsys.readouterr().err
    assert err == f"vgpumon: warning: {old} is deprecated; use {new}\n"


def test_old_config_keys_work_with_one_deprecation_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "serve.yml"
    path.write_text("processes: true\nprocesses_max: 4\nlog_level: debug\n")
    values = load_file(str(path), ())
    assert values == {"process_series": True, "process_series_max": 4, "log_level": "debug"}
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    assert "line 1: processes is deprecated; use process_series" in lines[0]
    assert "line 3: log_level is deprecated; use log.level" in lines[2]
    path.write_text("process_series: true\nlog: {level: debug, format: json}\n")
    assert load_file(str(path), ()) == {
        "process_series": True,
        "log_level": "debug",
        "log_format": "json",
    }
    assert capsys.readouterr().err == ""


def test_a_key_and_its_old_spelling_together_are_an_error(tmp_path: Path) -> None:
    from vgpumon.errors import ConfigError

    path = tmp_path / "serve.yml"
    path.write_text("processes: true\nprocess_series: false\n")
    with pytest.raises(ConfigError, match="process_series given twice"):
        load_file(str(path), ())


def _value_options() -> dict[str, dict[str, str | None]]:
    """flag -> {command: metavar} for every option that takes a value, in every subcommand."""
    found: dict[str, dict[str, str | None]] = {}
    for command in COMMANDS:
        parser = build_parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
            command
        ]
        for action in sub._actions:
            if action.nargs == 0 or not action.option_strings or action.help == argparse.SUPPRESS:
                continue
            if action.choices is not None:  # argparse shows them: {spin,tensor,stream}
                continue
            metavar = action.metavar if isinstance(action.metavar, str) else None
            for flag in action.option_strings:
                found.setdefault(flag, {})[command] = metavar
    return found


def test_every_value_flag_names_its_kind_of_value() -> None:
    options = _value_options()
    # argparse's own default (the dest upper-cased, PROCESSES) says nothing; SECONDS and S hide
    # that durations take units (500ms, 2m) like every other duration.
    missing = sorted(
        f"{command} {flag}"
        for flag, per in options.items()
        for command, metavar in per.items()
        if metavar is None or metavar in ("SECONDS", "S")
    )
    assert missing == []


def test_a_flag_has_one_metavar_in_every_subcommand() -> None:
    differ = {flag: per for flag, per in _value_options().items() if len(set(per.values())) > 1}
    assert differ == {}
    # A count of worker processes (load, validate) is the only --processes that takes a value.
    assert _value_options()["--processes"] == {"load": "N", "validate": "N"}


def test_scenarios_check_says_the_file_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent.yaml"
    assert main(["scenarios", "--check", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"vgpumon: error: scenario file {missing} does not exist\n"
