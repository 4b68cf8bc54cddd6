"""`vgpumon serve` as a process: it serves, and SIGTERM/SIGINT stop it within its bound."""

from __future__ import annotations

import os
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

SHUTDOWN_TIMEOUT = 1.0
# --web.shutdown-timeout, then at most 2 s to close NVML (CLOSE_TIMEOUT_SECONDS), plus the
# interpreter's own exit.
EXIT_BOUND = SHUTDOWN_TIMEOUT + 2.0 + 1.5


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@contextmanager
def serving(scenario: str, *extra: str) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--sim",
            scenario,
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--web.shutdown-timeout",
            str(SHUTDOWN_TIMEOUT),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: get(f"{base}/-/healthy")[0] == 200, proc, 20)
        yield proc, base
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def wait_for(check: object, proc: subprocess.Popen[bytes], seconds: float) -> None:
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            out = proc.stdout.read().decode() if proc.stdout else ""
            pytest.fail(f"vgpumon serve exited early ({proc.returncode}): {out}")
        try:
            if check():  # type: ignore[operator]
                return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail(f"condition not met within {seconds} s")


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> float:
    started = time.monotonic()
    proc.send_signal(sig)
    proc.wait(timeout=EXIT_BOUND + 5)
    return time.monotonic() - started


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_the_exporter_cleanly(sig: signal.Signals) -> None:
    with serving("baremetal-8xh100") as (proc, base):
        wait_for(lambda: get(f"{base}/-/ready")[0] == 200, proc, 20)
        status, body = get(f"{base}/metrics")
        assert status == 200 and "vgpumon_gpu_up" in body
        took = stop(proc, sig)
        assert proc.returncode == 0
        assert took < EXIT_BOUND
        log = proc.stdout.read().decode() if proc.stdout else ""
        assert "shutting down" in log


def test_shutdown_is_bounded_while_nvml_hangs() -> None:
    """A wedged driver: worker threads are stuck in NVML calls that never return."""
    with serving("fault-all-hang-after-start", "--interval", "0.2", "--deadline", "0.5") as (
        proc,
        base,
    ):
        wait_for(lambda: get(f"{base}/-/ready")[0] == 200, proc, 20)
        wait_for(lambda: "vgpumon_sampler_wedged 1.0" in get(f"{base}/metrics")[1], proc, 20)
        took = stop(proc, signal.SIGTERM)
        assert proc.returncode == 0
        assert took < EXIT_BOUND


def test_sighup_reloads_the_config_and_a_bad_file_keeps_the_old_one(tmp_path: object) -> None:
    """SIGHUP used to kill the exporter silently (no handler: the default action)."""
    from pathlib import Path

    config = Path(str(tmp_path)) / "serve.yml"
    config.write_text("process_series: false\n")
    with serving("baremetal-8xh100", "--config", str(config), "--interval", "0.2") as (
        proc,
        base,
    ):
        wait_for(lambda: get(f"{base}/-/ready")[0] == 200, proc, 20)
        assert "vgpumon_process_series_truncated" not in get(f"{base}/metrics")[1]
        config.write_text("process_series: true\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "vgpumon_process_series_truncated" in get(f"{base}/metrics")[1], proc, 20)
        config.write_text("process_series: maybe\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.poll() is None, "still serving"
        assert "vgpumon_process_series_truncated" in get(f"{base}/metrics")[1], "old config kept"
        config.write_text("process_series: true\ndeadline: 3\n")
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert get(f"{base}/-/healthy")[0] == 200
        stop(proc, signal.SIGTERM)
        log = proc.stdout.read().decode() if proc.stdout else ""
    assert "configuration reloaded" in log
    assert (
        "process_series: expected true or false" in log
        and "keeping the previous configuration" in log
    )
    assert "reload: deadline_seconds changed; that takes a restart" in log


def test_sighup_applies_changed_fields_at_once(tmp_path: object) -> None:
    """Declared NVML fields (``fields``) change on reload: sampler and exposition alike."""
    from pathlib import Path

    from vgpumon.sim.scenario import load_scenario

    here = Path(str(tmp_path))
    scenario = here / "fields.yaml"
    scenario.write_text(
        "gpus:\n  - model: h100-sxm-80gb\n    field_values: {250: 12.5, 251: 4}\n  - model: l40s\n"
    )
    given = load_scenario(str(scenario)).gpus[0].extra["field_values"]

    def declare(fid: int, name: str) -> str:
        return f"  - {{id: {fid}, name: {name}, type: gauge, help: Mine.}}\n"

    config = here / "serve.yml"
    config.write_text("fields:\n" + declare(250, "vgpumon_gpu_mine"))
    with serving(str(scenario), "--config", str(config), "--interval", "0.2") as (proc, base):
        wait_for(lambda: get(f"{base}/-/ready")[0] == 200, proc, 20)
        wait_for(lambda: "vgpumon_gpu_mine{" in get(f"{base}/metrics")[1], proc, 20)
        body = get(f"{base}/metrics")[1]
        mine = [line for line in body.splitlines() if line.startswith("vgpumon_gpu_mine{")]
        assert len(mine) == 1 and mine[0].startswith('vgpumon_gpu_mine{gpu="0",')
        assert float(mine[0].split()[-1]) == given[250]  # GPU 1 has no answer: no sample
        config.write_text("fields:\n" + declare(251, "vgpumon_gpu_other"))
        proc.send_signal(signal.SIGHUP)
        expected = f"{float(given[251])!r}"
        wait_for(lambda: "vgpumon_gpu_other{" in get(f"{base}/metrics")[1], proc, 20)
        body = get(f"{base}/metrics")[1]
        assert "vgpumon_gpu_mine" not in body
        other = [line for line in body.splitlines() if line.startswith("vgpumon_gpu_other{")]
        assert [line.split()[-1] for line in other] == [expected]
        config.write_text("fields:\n" + declare(251, "vgpumon_gpu_up"))  # a table name
        proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert "vgpumon_gpu_other{" in get(f"{base}/metrics")[1], "old config kept"
        stop(proc, signal.SIGTERM)
        log = proc.stdout.read().decode() if proc.stdout else ""
    assert "fields[0] (vgpumon_gpu_up)" in log and "keeping the previous configuration" in log


def test_web_listen_address_is_accepted_as_node_exporter_spells_it() -> None:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--sim",
            "baremetal-8xh100",
            "--web.listen-address",
            f"127.0.0.1:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for(lambda: get(f"http://127.0.0.1:{port}/-/healthy")[0] == 200, proc, 20)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_same_listen_address_twice_is_one_clear_line() -> None:
    port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--sim",
            "baremetal-8xh100",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--web.listen-address",
            f"127.0.0.1:{port}",
        ],
        capture_output=True,
        timeout=30,
    )
    assert result.returncode != 0
    err = result.stderr.decode()
    assert f"listen address 127.0.0.1:{port} is given twice" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
