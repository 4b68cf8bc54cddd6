"""The serve config file: listen addresses, errors that name the key, flags over the file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpumon.cli import build_parser
from vgpumon.commands.serve import settings_from_args
from vgpumon.config.serve import (
    DEFAULT_PORT,
    ListenAddress,
    ServeSettings,
    load_file,
    parse_listen,
)
from vgpumon.errors import ConfigError

COLLECTORS = ["device", "memory", "pcie", "utilization"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:9839", ListenAddress("0.0.0.0", 9839)),
        ("127.0.0.1:0", ListenAddress("127.0.0.1", 0)),
        ("[::]:9839", ListenAddress("::", 9839)),
        ("[::1]:80", ListenAddress("::1", 80)),
        (":9839", ListenAddress(None, 9839)),
        ("localhost:9000", ListenAddress("localhost", 9000)),
    ],
)
def test_listen_addresses(text: str, expected: ListenAddress) -> None:
    assert parse_listen(text) == expected
    assert parse_listen(str(expected)) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("9839", "expected HOST:PORT"),
        ("::1:9839", "brackets"),
        ("[::1]9839", "[IPv6]:PORT"),
        ("[nothere]:1", "not an IPv6 address"),
        (":70000", "0 to 65535"),
        ("host:port", "0 to 65535"),
        (":", "0 to 65535"),
    ],
)
def test_bad_listen_addresses(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(why)):
        parse_listen(text)


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "vgpumon.yml"
    path.write_text(text)
    return str(path)


def test_full_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
interval: 2
deadline: 1.5
collector: {pcie: false, utilization: true}
process_series: true
process_series_max: 7
pcie_throughput: true
web:
  listen_address: ["127.0.0.1:9100", "[::1]:9100"]
  config: {file: web.yml}
  max_requests: 3
  shutdown_timeout: 2
  render_ahead: Always
sim: a100-mig-mixed
log: {level: DEBUG, format: JSON}
""",
    )
    values = load_file(path, COLLECTORS)
    assert values == {
        "listen": (ListenAddress("127.0.0.1", 9100), ListenAddress("::1", 9100)),
        "interval_seconds": 2.0,
        "deadline_seconds": 1.5,
        "collectors": (("pcie", False), ("utilization", True)),
        "process_series": True,
        "process_series_max": 7,
        "pcie_throughput": True,
        "web_config_file": str(tmp_path / "web.yml"),
        "max_requests": 3,
        "shutdown_timeout_seconds": 2.0,
        "render_ahead": "always",
        "sim": "a100-mig-mixed",
        "log_level": "debug",
        "log_format": "json",
    }


def test_empty_file_keeps_the_defaults(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "# nothing\n"), COLLECTORS) == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("intervall: 1\n", 'line 1: unknown key "intervall" in the config file (allowed: '),
        ("intervall: 1\n", 'did you mean "interval"?'),
        ("web:\n  max_request: 3\n", 'line 2: unknown key "max_request" in web (allowed: '),
        ("collectors: {pcei: false}\n", "unknown collector 'pcei'"),
        ("collector: {pcei: false}\n", 'unknown key "pcei" in collector'),
        ("interval: fast\n", "interval: bad duration 'fast'"),
        ("interval: -1\n", "interval: bad duration -1: must be at least 0.01 s"),
        ("interval: 1e-9\n", "must be at least 0.01 s"),  # a busy loop, was accepted
        ("interval: 1e308\n", "must be at most 86400 s"),  # was accepted
        ("interval: 100us\n", "must be at least 0.01 s"),  # the grammar reads it, the range refuses
        ("deadline: .inf\n", "not a finite number"),
        ("process_series_max: 1e20\n", "expected a whole number"),
        ("process_series_max: 100000000000000000000\n", "must be at most 1000000"),
        (
            "interval: 1\ninterval: 2\n",
            'line 2: interval: duplicate key "interval" in the top level',
        ),
        ("process_series: yes please\n", "process_series: expected true or false"),
        ("process_series_max: 0\n", "process_series_max: must be at least 1"),
        ("listen: 9839\n", "listen: expected an address"),
        ("listen: [':99999']\n", "0 to 65535"),
        ("web: 3\n", "'web' must be a mapping"),
        ("log: {level: loud}\n", "log.level: expected one of"),
        ("log: {format: text}\n", "log.format: expected one of logfmt, json"),
        ("web:\n  telemetry_path: metrics\n", "web.telemetry_path: 'metrics' must start with /"),
        ("web:\n  render_ahead: never\n", "web.render_ahead: expected one of auto, always"),
        ("- a\n- b\n", "expected a mapping of settings"),
        ("listen: [\n", "invalid YAML"),
        ("web:\n  max_requests: 3\n  max_requests: 4\n", "line 3: web.max_requests: duplicate key"),
    ],
)
def test_bad_files_name_the_key(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_file(path, COLLECTORS)
    assert path in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_file(str(tmp_path / "absent.yml"), COLLECTORS)


def parse(*argv: str) -> ServeSettings:
    args = build_parser("serve").parse_args(["serve", *argv])
    return settings_from_args(args)


def test_flags_override_the_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "listen: ':1234'\ninterval: 5\nprocess_series: true\nweb: {max_requests: 3}\n"
        "collectors: {memory: false, pcie: false}\nsim: from-file\n",
    )
    from_file = parse("--config", path)
    assert from_file.listen == (ListenAddress(None, 1234),)
    assert from_file.interval_seconds == 5.0 and from_file.max_requests == 3
    assert from_file.process_series and from_file.sim == "from-file"
    assert from_file.config_file == path

    both = parse(
        "--config",
        path,
        "--web.listen-address",
        "127.0.0.1:4321",
        "--interval",
        "0.5",
        "--no-process-series",
        "--collector.memory",
        "--nvml-module",
        "my_nvml",
    )
    assert both.listen == (ListenAddress("127.0.0.1", 4321),)
    assert both.interval_seconds == 0.5
    assert both.process_series is False
    assert both.max_requests == 3, "what no flag set stays as the file said"
    assert both.nvml_module == "my_nvml" and both.sim is None, "a module flag replaces the file's"
    names = [("device", True), ("memory", True), ("pcie", True), ("mig", True)]
    assert both.enabled_collectors(names) == {"device", "memory", "mig"}


def test_defaults_without_file_or_flags() -> None:
    settings = parse()
    assert settings == ServeSettings()
    assert settings.listen == (ListenAddress(None, DEFAULT_PORT),)
    assert 9100 <= DEFAULT_PORT <= 9999
    assert settings.process_series is False and settings.max_requests == 40
