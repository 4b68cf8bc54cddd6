"""`vgpumon serve` speaks the conventions of the Prometheus exporters users already run.

``--log.level`` and ``--log.format logfmt|json`` (UTC timestamps with a zone, one JSON object per
line for every logger), ``--web.telemetry-path``, ``--collector.disable-defaults``; an unknown flag
points to the subcommand's help; the root warning only where device files are opened.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from export_helpers import free_port

from vgpumon import logs
from vgpumon.cli import COMMANDS, build_parser, main
from vgpumon.collect.registry import all_readers
from vgpumon.commands import serve as serve_command
from vgpumon.commands.serve import sampler_config, settings_from_args
from vgpumon.config.serve import ServeSettings
from vgpumon.export.address import DEFAULT_TELEMETRY_PATH


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_unknown_flag_points_to_the_subcommands_help(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--no-such-flag"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "--no-such-flag" in err
    assert f"(see 'vgpumon {command} --help')" in err, err


def test_log_level_has_the_dotted_spelling_and_keeps_the_old_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "_configured", False)  # as while flags parse at start
    assert parse("--log.level", "debug").log_level == "debug"
    assert capsys.readouterr().err == ""
    assert parse("--log-level", "warning").log_level == "warning"
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--log-level is deprecated" in err and "--log.level" in err
    assert parse("--log.format", "json").log_format == "json"
    assert parse().log_format == "logfmt"
    assert main(["serve", "--log.format", "xml"]) == 2
    assert "--log.format: expected one of logfmt, json" in capsys.readouterr().err


UTC_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def root_logger(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    monkeypatch.setattr(logs, "_configured", False)
    # An SSH source made by an earlier test quiets asyncssh's logger (a process-wide level).
    quiet = logging.getLogger("asyncssh")
    quiet_level = quiet.level
    quiet.setLevel(logging.NOTSET)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    quiet.setLevel(quiet_level)


def test_after_start_a_deprecation_is_a_log_record(root_logger: None) -> None:
    """A config file's old key seen on SIGHUP: in the log format, not a bare stderr line."""
    from vgpumon.config.flags import deprecated

    out = io.StringIO()
    logs.configure("info", "json", stream=out)
    deprecated("processes", "process_series", "config file a.yml line 1")
    (line,) = out.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "warning" and record["logger"] == "vgpumon.config"
    assert record["message"] == (
        "config file a.yml line 1: processes is deprecated; use process_series"
    )


def test_json_logs_are_one_object_per_line_for_every_logger(root_logger: None) -> None:
    out = io.StringIO()
    logs.configure("info", "json", stream=out)
    logs.configure("info", "json", stream=out)  # a second call replaces the first handler
    logging.getLogger("asyncssh").info("Opening SSH connection to %s", "gpu-host")
    logging.getLogger("vgpumon.serve").warning('two\nlines and "quotes"')
    logging.getLogger("vgpumon.serve").debug("below the level")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("vgpumon.x").exception("failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3, lines
    records = [json.loads(line) for line in lines]
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record)
        assert UTC_TIME.match(record["time"]), record["time"]
    assert records[0]["logger"] == "asyncssh" and records[0]["level"] == "info"
    assert records[0]["message"] == "Opening SSH connection to gpu-host"
    assert records[1]["message"] == 'two\nlines and "quotes"'
    assert "ValueError: boom" in records[2]["exception"]


def test_logfmt_lines_carry_a_utc_time_with_a_zone(root_logger: None) -> None:
    out = io.StringIO()
    logs.configure("debug", "logfmt", stream=out)
    logging.getLogger("asyncssh").info('said "hi"')
    (line,) = out.getvalue().splitlines()
    match = re.match(r'^time=(\S+) level=info logger=asyncssh msg="said \\"hi\\""$', line)
    assert match, line
    assert UTC_TIME.match(match.group(1))


@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_log_lines_carry_no_control_a_terminal_would_obey(root_logger: None, fmt: str) -> None:
    """A log line quotes names others chose (a VM, a peer's error): JSON escapes C0 controls but
    leaves C1 controls and bidi overrides raw, so they are escaped too, and the line stays JSON
    (issue 33)."""
    out = io.StringIO()
    logs.configure("info", fmt, stream=out)
    name = "\x1b]52;c;UFdORUQ=\x07 \x9b2J \u202e \U000e0041 日本"
    logging.getLogger("vgpumon.x").warning("VM %s", name)
    (line,) = out.getvalue().splitlines()
    assert line.isprintable(), repr(line)
    assert "日本" in line
    said = json.loads(line)["message"] if fmt == "json" else json.loads(line.split("msg=", 1)[1])
    assert said == f"VM {name}"


def test_collector_disable_defaults_runs_only_the_collectors_named() -> None:
    readers = all_readers()
    on = next(r.name for r in readers if r.default_enabled)
    known = [(r.name, r.default_enabled) for r in readers]
    settings = parse("--collector.disable-defaults", f"--collector.{on}")
    assert settings.enabled_collectors(known) == {on}
    assert sampler_config(settings).collectors == {on}
    assert parse("--collector.disable-defaults").enabled_collectors(known) == frozenset()
    assert len(parse().enabled_collectors(known)) > 1


def test_the_root_warning_only_where_device_files_are_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert serve_command.root_warning(parse("--sim", "baremetal-8xh100"), agentless=False) is None
    assert serve_command.root_warning(parse(), agentless=True) is None
    warning = serve_command.root_warning(parse(), agentless=False)
    assert warning is not None and warning.startswith("running as root")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert serve_command.root_warning(parse(), agentless=False) is None


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("metrics", "must start with /"),
        ("/-/ready", "/-/ready is the readiness endpoint"),
        ("/", "/ is the landing page"),
        ("/a b", "must not contain"),
    ],
)
def test_bad_telemetry_paths_are_one_line(
    path: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--web.telemetry-path", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--web.telemetry-path" in err and message in err, err


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@contextmanager
def serving(*extra: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    proc = subprocess.Popen(
        [
            *(
                sys.executable,
                "-m",
                "vgpumon.cli",
                "serve",
                "--web.listen-address",
                f"127.0.0.1:{port}",
            ),
            *("--web.shutdown-timeout", "1", *extra),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up and proc.poll() is None:
            try:
                if get(f"{base}/-/ready")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def test_serve_as_a_process_logs_json_and_serves_the_telemetry_path() -> None:
    with serving(
        "--sim", "baremetal-8xh100", "--log.format", "json", "--web.telemetry-path", "/gpu"
    ) as (proc, base):
        status, body = get(f"{base}/gpu")
        assert status == 200 and "vgpumon_gpu_up" in body
        assert get(f"{base}/metrics")[0] == 404
        landing = get(f"{base}/")[1]
        assert 'href="/gpu"' in landing and 'href="/metrics"' not in landing
    assert proc.stderr is not None
    lines = proc.stderr.read().splitlines()
    assert lines, "serve logged nothing"
    for line in lines:
        record = json.loads(line)
        assert {"time", "level", "logger", "message"} <= set(record), line
        assert UTC_TIME.match(record["time"]), line
    messages = [json.loads(line)["message"] for line in lines]
    assert any("serving" in m for m in messages), messages
    assert not any("running as root" in m for m in messages), "a simulator opens no device"


def test_the_fixed_paths_are_the_servers_other_endpoints() -> None:
    from vgpumon.export.address import FIXED_PATHS
    from vgpumon.export.server import ENDPOINTS

    assert ENDPOINTS[0][0] == DEFAULT_TELEMETRY_PATH
    assert {path for path, _ in ENDPOINTS[1:]} | {"/"} == set(FIXED_PATHS)
