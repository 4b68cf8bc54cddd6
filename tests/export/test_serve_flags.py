"""`vgpumon serve` flags: every collector has a switch, bad input is one line, NVML failure too."""

from __future__ import annotations

import pytest

from vgpumon.cli import build_parser, main
from vgpumon.collect.registry import all_readers, collector_names
from vgpumon.commands.serve import sampler_config, settings_from_args
from vgpumon.config.serve import ServeSettings
from vgpumon.export.address import ListenAddress


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


def test_every_registered_collector_has_both_switches(capsys: pytest.CaptureFixture[str]) -> None:
    names = collector_names()
    assert names, "the registry lists collectors"
    known = [(r.name, r.default_enabled) for r in all_readers()]
    for name in names:
        on = parse(f"--collector.{name.replace('_', '-')}")
        off = parse(f"--no-collector.{name.replace('_', '-')}")
        assert name in on.enabled_collectors(known)
        assert name not in off.enabled_collectors(known)
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    help_text = capsys.readouterr().out
    for name in names:
        assert f"--collector.{name.replace('_', '-')}" in help_text


def test_last_switch_wins() -> None:
    name = collector_names()[0]
    settings = parse(f"--no-collector.{name}", f"--collector.{name}")
    assert settings.collectors == ((name, True),)


def test_sampler_config_follows_the_switches() -> None:
    name = collector_names()[-1]
    config = parse(f"--no-collector.{name}", "--interval", "0.25", "--pcie-throughput")
    sampler = sampler_config(config)
    assert name not in sampler.collectors
    assert sampler.interval_seconds == 0.25 and sampler.pcie_throughput is True


def test_repeatable_listen_and_numbers() -> None:
    settings = parse(
        "--web.listen-address",
        "0.0.0.0:9100",
        "--web.listen-address",
        "[::]:9100",
        "--process-series",
        "--process-series-max",
        "5",
        "--web.max-requests",
        "2",
        "--web.shutdown-timeout",
        "0.5",
        "--deadline",
        "3",
        "--web.render-ahead",
        "always",
    )
    assert settings.listen == (ListenAddress("0.0.0.0", 9100), ListenAddress("::", 9100))
    assert settings.process_series and settings.process_series_max == 5
    assert settings.max_requests == 2 and settings.shutdown_timeout_seconds == 0.5
    assert settings.deadline_seconds == 3.0
    assert settings.render_ahead == "always" and parse().render_ahead == "auto"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "soon"], "--interval: bad duration 'soon'"),
        (["--interval", "0"], "--interval: bad duration '0': must be at least 0.01 s"),
        (["--interval", "1e-9"], "must be at least 0.01 s"),  # a busy loop, was accepted
        (["--interval", "1e308"], "must be at most 86400 s"),
        (["--config", "a\0b"], "contains a NUL byte"),  # was ValueError
        (["--web.listen-address", "9839"], "expected HOST:PORT"),
        (["--process-series-max", "-3"], "--process-series-max: must be at least 1"),
        (["--web.max-requests", "many"], "--web.max-requests: expected a whole number"),
        (["--log.level", "chatty"], "--log.level: expected one of"),
        (["--web.render-ahead", "soon"], "--web.render-ahead: expected one of auto, always"),
        (["--interval"], "expected one argument"),
        (["--sim", "a", "--nvml-module", "b"], "not allowed with argument"),
        (["--config", "/nonexistent/vgpumon.yml"], "cannot read config file"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *argv]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("vgpumon: error: ") and message in err


def test_a_missing_nvml_module_at_start_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # A driver that is not loaded yet is not fatal (serve retries nvmlInit, see
    # test_serve_no_driver.py); a module that cannot be imported is an installation error.
    assert (
        main(
            [
                "serve",
                "--nvml-module",
                "no_such_nvml_for_test",
                "--web.listen-address",
                "127.0.0.1:0",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "cannot import NVML module 'no_such_nvml_for_test'" in err
