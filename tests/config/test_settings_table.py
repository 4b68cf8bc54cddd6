"""The one table of serve settings generates flags, file keys, environment variables, the docs
table and what SIGHUP reloads; precedence is flag > environment > config file > default."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vgpumon.cli import build_parser, main
from vgpumon.commands.serve import RESTART_ONLY, reloaded, settings_from_args
from vgpumon.config.docs_gen import DOC_PATH, updated_doc
from vgpumon.config.serve import ServeSettings
from vgpumon.config.table import SERVE_SETTINGS, SETTINGS

# Fields that are not one value a flag can set: the file's structured sections and where it was.
NOT_ROWS = {"collectors", "fields", "config_file"}


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


def test_every_settings_field_has_exactly_one_row() -> None:
    """Serve's settings are its rows; a row serve does not read (top's, usage's) is no field."""
    fields = {f.name for f in dataclasses.fields(ServeSettings)} - NOT_ROWS
    names = [row.name for row in SETTINGS]
    assert sorted(names) == sorted(set(names)), "a row given twice"
    assert {row.name for row in SERVE_SETTINGS} == fields


def test_every_row_has_a_flag_a_key_and_an_environment_variable() -> None:
    flags = [flag for row in SETTINGS for flag in (row.flag, *row.old_flags)]
    keys = [key for row in SETTINGS for key in (row.key, *row.old_keys)]
    envs = [env for row in SETTINGS for env in (row.env, *row.old_envs)]
    for seen in (flags, keys, envs):
        assert len(seen) == len(set(seen)), "two rows share a spelling"
    assert all(e.startswith("VGPUMON_") and e.isupper() for e in envs)
    help_text = build_parser("serve")._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    for row in SERVE_SETTINGS:
        assert row.flag in help_text, row.name


def test_docs_table_is_generated_from_the_table() -> None:
    committed = DOC_PATH.read_text(encoding="utf-8")
    assert committed == updated_doc(committed), (
        "docs/exporter.md's settings table is out of date: run python -m vgpumon.config.docs_gen"
    )
    for row in SERVE_SETTINGS:
        assert f"`{row.env}`" in committed


def test_precedence_flag_over_environment_over_file_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for row in SETTINGS:
        monkeypatch.delenv(row.env, raising=False)
    config = tmp_path / "serve.yml"
    config.write_text("interval: 2\ndeadline: 4\nweb: {max_requests: 7}\n")
    assert parse().interval_seconds == 1.0
    assert parse("--config", str(config)).interval_seconds == 2.0
    monkeypatch.setenv("VGPUMON_INTERVAL", "3s")
    monkeypatch.setenv("VGPUMON_WEB_MAX_REQUESTS", "9")
    from_env = parse("--config", str(config))
    assert from_env.interval_seconds == 3.0 and from_env.max_requests == 9
    assert from_env.deadline_seconds == 4.0, "what the environment leaves, the file sets"
    flagged = parse("--config", str(config), "--interval", "500ms")
    assert flagged.interval_seconds == 0.5 and flagged.max_requests == 9


def test_the_config_file_itself_can_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "serve.yml"
    config.write_text("interval: 2\n")
    monkeypatch.setenv("VGPUMON_CONFIG", str(config))
    settings = parse()
    assert settings.interval_seconds == 2.0 and settings.config_file == str(config)


@pytest.mark.parametrize(
    ("env", "value", "field", "expected"),
    [
        ("VGPUMON_WEB_LISTEN_ADDRESS", "127.0.0.1:9100, [::1]:9100", "listen", 2),
        ("VGPUMON_PROCESS_SERIES", "true", "process_series", True),
        ("VGPUMON_PROCESS_SERIES", "0", "process_series", False),
        ("VGPUMON_INTERVALS_GPM", "0", "gpm_interval_seconds", 0.0),
        ("VGPUMON_LOG_FORMAT", "JSON", "log_format", "json"),
        (
            "VGPUMON_KUBERNETES_RESOURCES",
            "nvidia.com/gpu,nvidia.com/mig-*",
            "kubernetes_resources",
            ("nvidia.com/gpu", "nvidia.com/mig-*"),
        ),
        ("VGPUMON_COLLECTOR_DISABLE_DEFAULTS", "yes", "disable_default_collectors", True),
    ],
)
def test_environment_values_are_read_by_kind(
    env: str, value: str, field: str, expected: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(env, value)
    got = getattr(parse(), field)
    assert (len(got) if field == "listen" else got) == expected


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("VGPUMON_INTERVAL", "soon", "VGPUMON_INTERVAL: bad duration 'soon'"),
        ("VGPUMON_PROCESS_SERIES", "maybe", "VGPUMON_PROCESS_SERIES: expected true or false"),
        ("VGPUMON_WEB_MAX_CONNECTIONS", "0", "VGPUMON_WEB_MAX_CONNECTIONS: must be at least 1"),
    ],
)
def test_a_bad_environment_value_is_one_line_naming_the_variable(
    env: str,
    value: str,
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv(env, value)
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_sighup_reloads_exactly_the_reloadable_rows() -> None:
    """Each row changed alone: a reloadable one changes what the server applies, any other one
    is named among the settings that take a restart."""
    base = ServeSettings()
    before = reloaded(base)
    samples = {bool: True, int: 7, float: 123.0, str: "x", tuple: ("a",)}
    for row in SERVE_SETTINGS:
        default = getattr(base, row.name)
        kind = (
            type(default)
            if default is not None
            else (str if row.name != "ssh_timeout_seconds" else float)
        )
        value: object = samples.get(kind, "x")
        if row.name == "log_level":
            value = "debug"
        elif row.name == "listen":
            value = ()
        elif isinstance(default, bool):
            value = not default
        after = reloaded(dataclasses.replace(base, **{row.name: value}))
        applied = dataclasses.replace(after, restart_only=()) != dataclasses.replace(
            before, restart_only=()
        )
        named = after.restart_only != before.restart_only
        assert applied == row.reloadable, f"{row.name}: reloadable={row.reloadable}"
        assert named == (not row.reloadable), row.name
    assert set(RESTART_ONLY) == {r.name for r in SERVE_SETTINGS if not r.reloadable} | {
        "collectors"
    }


def test_collectors_from_the_environment_sit_between_file_and_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    known = [("pcie", True), ("ecc", True), ("gpm", True)]
    config = tmp_path / "serve.yml"
    config.write_text("collector: {pcie: false, gpm: false}\n")
    monkeypatch.setenv("VGPUMON_COLLECTOR_PCIE", "true")
    monkeypatch.setenv("VGPUMON_COLLECTOR_ECC", "false")
    settings = parse("--config", str(config), "--no-collector.pcie")
    assert settings.enabled_collectors(known) == set(), "file off gpm, env off ecc, flag off pcie"
    assert parse("--config", str(config)).enabled_collectors(known) == {"pcie"}
    monkeypatch.setenv("VGPUMON_COLLECTOR_PCEI", "false")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "VGPUMON_COLLECTOR_PCEI: no collector 'pcei'" in err


def test_the_nvml_module_variable_is_the_loader_s() -> None:
    """The loader reads the variable in every command; its name is the row's."""
    from vgpumon.config.table import BY_NAME
    from vgpumon.nvml.loader import ENV_MODULE

    assert BY_NAME["nvml_module"].env == ENV_MODULE


def test_the_cadence_rows_name_the_sampler_s_cadenced_readings() -> None:
    """The sampler publishes a period for each cadenced reading; the settings give each one, with
    the collector's own default."""
    from vgpumon.collect.registry import default_cadences
    from vgpumon.config.table import CADENCES

    assert sorted(default_cadences()) == sorted(str(row.cadence) for row in CADENCES)
    assert {str(row.cadence): row.default for row in CADENCES} == default_cadences()
