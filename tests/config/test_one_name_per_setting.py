"""One name per setting: key ``a.b_c``, flag ``--a.b-c``, variable ``VGPUMON_A_B_C``, all three
from one row of the settings table; old spellings keep working with one deprecation line; every
flag's ``--no-`` form is in ``--help``; a flag a command does not read is refused."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpumon import logs
from vgpumon.cli import COMMANDS, build_parser, main
from vgpumon.commands.serve import settings_from_args
from vgpumon.config.serve import ServeSettings
from vgpumon.config.table import SERVE_SETTINGS, SETTINGS


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No VGPUMON_* variable of the caller's shell, and logging not set up (as at start)."""
    import os

    for name in list(os.environ):
        if name.startswith("VGPUMON_"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(logs, "_configured", False)


def flag_of(key: str) -> str:
    return "--" + key.replace("_", "-")


def env_of(key: str) -> str:
    return "VGPUMON_" + key.upper().replace(".", "_")


def nested(key: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b_c": value}}`` for the key ``a.b_c``."""
    out: dict[str, Any] = {}
    node = out
    *head, last = key.split(".")
    for part in head:
        node = node.setdefault(part, {})
    node[last] = value
    return out


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


# One value per setting that differs from its default, as text (flags, variables); a file holds
# the same text (YAML reads switches as booleans).
def samples(tmp_path: Path) -> dict[str, str]:
    existing = tmp_path / "exists"
    existing.write_text("esxi-9\n")
    text = {
        "listen": "127.0.0.1:9100",
        "telemetry_path": "/m",
        "web_config_file": str(existing),
        "max_requests": "7",
        "bcrypt_max_cost": "12",
        "render_ahead": "always",
        "max_connections": "9",
        "header_timeout_seconds": "3s",
        "idle_timeout_seconds": "3s",
        "write_timeout_seconds": "3s",
        "shutdown_timeout_seconds": "3s",
        "interval_seconds": "2s",
        "deadline_seconds": "4s",
        "dispatch": "serial",
        "process_series_max": "5",
        "metering_idle_ratio": "0.1",
        "sim": "kvm-vgpu-timesliced",
        "nvml_module": "json",
        "log_level": "debug",
        "log_format": "json",
        "libvirt_uri": "test:///default",
        "kubelet_socket": str(tmp_path / "kubelet.sock"),
        "kubernetes_resources": "nvidia.com/gpu",
        "nfd_features_file": str(tmp_path / "features"),
        "ssh_targets": "root@esxi-1",
        "ssh_targets_file": str(existing),
        "ssh_user": "ops",
        "ssh_identity_files": str(existing),
        "ssh_known_hosts": str(existing),
        "ssh_timeout_seconds": "3s",
        "ssh_interval_seconds": "20s",
        "ssh_max_sessions": "3",
        "ssh_nvidia_smi": "/usr/bin/nvidia-smi",
    }
    for row in SETTINGS:
        if row.cadence is not None:
            text[row.name] = "3s"
    return text


@pytest.mark.parametrize("row", SERVE_SETTINGS, ids=lambda row: row.key)
def test_a_setting_has_one_name_as_flag_key_and_variable(
    row: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    flag, env = flag_of(row.key), env_of(row.key)
    default = getattr(ServeSettings(), row.name)
    if row.kind == "switch":
        on = not default
        argv = [flag] if on else ["--no-" + flag.removeprefix("--")]
        env_text, file_value = ("true" if on else "false"), on
    else:
        value = samples(tmp_path)[row.name]
        argv, env_text = [flag, value], value
        file_value = [value] if row.kind == "list" else value
    by_flag = getattr(parse(*argv), row.name)
    assert by_flag != default, f"{' '.join(argv)} did not set {row.name}"
    monkeypatch.setenv(env, env_text)
    assert getattr(parse(), row.name) == by_flag, f"{env}={env_text}"
    monkeypatch.delenv(env)
    config = tmp_path / "serve.yml"
    config.write_text(yaml.safe_dump(nested(row.key, file_value)))
    assert getattr(parse("--config", str(config)), row.name) == by_flag, config.read_text()
    assert capsys.readouterr().err == "", "the one name is not deprecated"


def serve_help() -> str:
    parser = build_parser("serve")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["serve"].format_help()


def test_every_flag_and_its_no_form_are_in_help() -> None:
    from vgpumon.collect.registry import collector_names

    text = serve_help()
    for row in SERVE_SETTINGS:
        assert flag_of(row.key) in text, row.key
        if row.kind == "switch" and row.negatable:
            assert "--no-" + flag_of(row.key).removeprefix("--") in text, row.key
    for name in collector_names():
        assert f"--collector.{name.replace('_', '-')}" in text
        assert f"--no-collector.{name.replace('_', '-')}" in text


OLD_FLAGS = [
    (["--interval.gpm", "3s"], "--intervals.gpm", "gpm_interval_seconds", 3),
    (["--listen", ":9100"], "--web.listen-address", "listen", None),
    (["--no-metering"], "--no-metering.enabled", "metering", False),
    (["--libvirt-uri", "test:///default"], "--libvirt.uri", "libvirt_uri", "test:///default"),
    (["--ssh", "esxi-1"], "--ssh.targets", "ssh_targets", ("esxi-1",)),
    (["--ssh-max-sessions", "2"], "--ssh.max-sessions", "ssh_max_sessions", 2),
    (["--kubernetes-resource", "a/b"], "--kubernetes.resources", "kubernetes_resources", ("a/b",)),
    (["--processes"], "--process-series", "process_series", True),
]


@pytest.mark.parametrize(
    ("argv", "old", "new", "field", "value"),
    [(argv, argv[0], new, field, value) for argv, new, field, value in OLD_FLAGS],
)
def test_an_old_flag_works_with_one_deprecation_line(
    argv: list[str],
    old: str,
    new: str,
    field: str,
    value: object,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given twice, still one line (a repeatable one once: twice would be two values).
    repeatable = field in ("listen", "ssh_targets", "kubernetes_resources")
    settings = parse(*argv) if repeatable else parse(*argv, *argv)
    if value is not None:
        assert getattr(settings, field) == value
    assert capsys.readouterr().err == f"vgpumon: warning: {old} is deprecated; use {new}\n"


def test_an_old_variable_works_with_one_deprecation_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VGPUMON_LISTEN", "127.0.0.1:9100")
    assert parse().listen[0].port == 9100
    assert capsys.readouterr().err == (
        "vgpumon: warning: VGPUMON_LISTEN is deprecated; use VGPUMON_WEB_LISTEN_ADDRESS\n"
    )


def test_collectors_have_one_name_in_file_and_environment_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    known = [("gpm", True), ("clock_events", True), ("pcie", True)]
    config = tmp_path / "serve.yml"
    config.write_text("collector: {gpm: false, disable_defaults: false}\n")
    monkeypatch.setenv("VGPUMON_COLLECTOR_CLOCK_EVENTS", "false")
    settings = parse("--config", str(config), "--no-collector.pcie")
    assert settings.enabled_collectors(known) == frozenset()
    assert capsys.readouterr().err == ""
    # The old spellings: the collectors map, VGPUMON_COLLECTORS and an underscore in the flag.
    config.write_text("collectors: {gpm: false}\n")
    monkeypatch.setenv("VGPUMON_COLLECTORS", "pcie=false")
    monkeypatch.delenv("VGPUMON_COLLECTOR_CLOCK_EVENTS")
    settings = parse("--config", str(config), "--no-collector.clock_events")
    assert settings.enabled_collectors(known) == frozenset()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3, err
    assert "--no-collector.clock_events is deprecated; use --no-collector.clock-events" in err[0]
    assert "line 1: collectors is deprecated; use collector" in err[1]
    assert "VGPUMON_COLLECTORS is deprecated; use VGPUMON_COLLECTOR_NAME" in err[2]


def test_a_bad_variable_is_named_as_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A path where a host is meant: the error names the variable that said it, not a flag.
    monkeypatch.setenv("VGPUMON_SSH_TARGETS", "/etc/vgpumon/targets")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vgpumon: error: VGPUMON_SSH_TARGETS: "), err
    monkeypatch.delenv("VGPUMON_SSH_TARGETS")
    monkeypatch.setenv("VGPUMON_SSH_KNOWN_HOSTS", "/nonexistent/known_hosts")
    monkeypatch.setenv("VGPUMON_SSH_TARGETS", "esxi-1")
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "VGPUMON_SSH_KNOWN_HOSTS: cannot read" in err, err
    monkeypatch.delenv("VGPUMON_SSH_KNOWN_HOSTS")
    monkeypatch.delenv("VGPUMON_SSH_TARGETS")
    monkeypatch.setenv("VGPUMON_KUBERNETES_NFD_FEATURES_FILE", "/nonexistent/features")
    assert main(["serve", "--sim", "kvm-vgpu-timesliced"]) == 2
    err = capsys.readouterr().err
    assert "VGPUMON_KUBERNETES_NFD_FEATURES_FILE: no directory '/nonexistent'" in err, err


@pytest.mark.parametrize(
    "argv",
    [
        ["snapshot", "--nfd-features-file", "/tmp/f"],
        ["snapshot", "--kubernetes-pod-series"],
        ["record", "--kubernetes.nfd-features-file", "/tmp/f"],
        ["top", "--kubernetes.pod-series"],
        ["check", "--libvirt.uri"],
    ],
)
def test_a_flag_a_command_does_not_read_is_refused(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--sim", "kvm-vgpu-timesliced"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unrecognized arguments" in err, err


# A command's own flag that has a row's name, with the same meaning (the time between its
# sampling cycles) and the command's own bounds: snapshot takes 0 (one cycle).
OWN = {"--interval"}


def test_each_command_offers_the_rows_it_reads() -> None:
    """A row names the commands that read it; each command's parser has exactly those rows'
    flags (and no other table flag)."""
    every = {flag_of(row.key) for row in SETTINGS} - OWN
    for command in COMMANDS:
        parser = build_parser(command)
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        offered = {
            flag
            for action in sub.choices[command]._actions
            if action.help != argparse.SUPPRESS
            for flag in action.option_strings
        }
        wanted = {flag_of(row.key) for row in SETTINGS if command in row.commands} - OWN
        assert offered & every == wanted, command
