"""``vgpumon validate`` on the command line: the simulator end to end, usage errors, exit codes."""

from __future__ import annotations

import json
import socket

import pytest

from vgpumon.cli import main

FAST = ["--settle", "0.25s", "--window", "400ms", "--sample-interval", "200ms", "--no-progress"]


def test_simulated_run_passes_and_prints_json(capsys):
    code = main(
        ["validate", "--sim", "passthrough-guest", "--steps", "idle,duty-0.50", "--json", *FAST]
    )
    out = capsys.readouterr().out
    data = json.loads(out)
    assert code == 0 and data["status"] == "pass" and data["exit_code"] == 0
    assert [s["name"] for s in data["steps"]] == ["idle", "duty-0.50"]
    duty = data["steps"][1]
    assert duty["load"] == {
        "duty": 0.5,
        "sm_fraction": 1.0,
        "memory_bytes": 256 * 1024**2,
        "processes": 1,
    }
    assert {c["check"] for c in duty["checks"]} == {
        "utilization",
        "gpm_sm_active",
        "memory_used",
        "processes",
        "process_sm_utilization",
    }
    util = next(c for c in duty["checks"] if c["check"] == "utilization")
    assert util["expected"] == "50.0% ± 2.0 pp" and util["value"] == 0.5
    assert data["settings"]["tolerances"]["utilization"] == 0.02
    assert data["target"]["virtualization_mode"] == "passthrough"


def test_tolerances_are_percentage_points(capsys):
    code = main(
        [
            "validate",
            "--sim",
            "passthrough-guest",
            "--steps",
            "duty-0.50",
            "--json",
            "--tolerance-util",
            "0pp",
            "--tolerance-gpm",
            "1.5",
            "--tolerance-process-util",
            "5%",
            "--tolerance-memory",
            "600MiB",
            *FAST,
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["settings"]["tolerances"] == {
        "utilization": 0.0,
        "gpm": 0.015,
        "process_utilization": 0.05,
        "context_bytes": 600 * 1024**2,
    }


def test_table_output_names_every_step(capsys):
    code = main(["validate", "--sim", "passthrough-guest", "--steps", "sm-0.25", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    assert "sm-0.25" in out and "33/132 SMs" in out and "PASS: " in out


def test_list_steps(capsys):
    assert main(["validate", "--list-steps", "--processes", "3"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("idle")
    assert "3 processes, duty 0.5 each" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--steps", "nope"], "unknown step 'nope'"),
        (["--tolerance-util", "lots"], "bad --tolerance-util 'lots'"),
        (["--tolerance-gpm", "150"], "between 0 and 100 percentage points"),
        (["--window", "1s", "--sample-interval", "2s"], "longer than the measurement window"),
        (["--sample-interval", "50ms"], "at least 100 ms"),
        (["--processes", "1"], "at least 2 processes"),
        (["--memory", "a lot"], "bad size"),
        (["--url", "http://127.0.0.1:1"], "does not go with --sim"),
        (["--load-device", "0"], "only applies with --url"),
        (["--insecure"], "--insecure only applies with --url"),
        (["--password-env", "NOPE"], "--password-env only applies with --url"),
        (["--device", "5"], "no GPU with index 5"),
        (["--device", "GPU-nope"], "no GPU or MIG device 'GPU-nope'"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(capsys, argv, message):
    code = main(["validate", "--sim", "passthrough-guest", *FAST, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("vgpumon: error: ")


def test_mig_enabled_gpu_names_the_mig_devices(capsys):
    code = main(["validate", "--sim", "h100-mig-gpm", "--device", "0", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "has MIG enabled" in err and "MIG-" in err


def test_missing_nvml_is_reported_before_cuda_core(capsys, monkeypatch):
    import vgpumon.loadgen.runner as runner

    monkeypatch.setattr(runner, "cuda_core_installed", lambda: False)
    # Real readers (here: the simulator as an NVML module) but real load: cuda-core is needed.
    monkeypatch.setenv("VGPUMON_NVML_MODULE", "vgpumon_no_such_module")
    code = main(["validate", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and "cannot import NVML module 'vgpumon_no_such_module'" in err


def test_no_cuda_core_after_nvml_works(capsys, monkeypatch):
    import vgpumon.loadgen.runner as runner
    from vgpumon.sim import create

    monkeypatch.setattr(runner, "cuda_core_installed", lambda: False)
    module = create("passthrough-guest")
    import sys

    monkeypatch.setitem(sys.modules, "validate_test_nvml", module)
    code = main(["validate", "--nvml-module", "validate_test_nvml", *FAST])
    err = capsys.readouterr().err
    assert code == 2
    assert "cuda-core is not installed" in err and "install the [load] extra: " in err
    assert "-m pip install" in err and "install 'vgpumon[" not in err


def test_unreachable_exporter_is_one_line(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = main(["validate", "--url", f"http://127.0.0.1:{port}", *FAST])
    err = capsys.readouterr().err
    assert code == 2 and f"cannot reach the exporter at http://127.0.0.1:{port}/metrics" in err


def test_a_pipe_gets_the_whole_table_one_row_per_line(capsys):
    """rich is a dependency, so a pipe gets the same table as a terminal, wide enough that each
    row stays on one line (there is no second, plain-text form to keep in step)."""
    code = main(["validate", "--sim", "passthrough-guest", "--steps", "duty-0.50", *FAST])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if "step" in line and "check" in line)
    cells = [cell.strip() for cell in header.strip("┃ ").split("┃")]
    assert cells == ["step", "check", "expected", "measured", "result", "note"]
    row = next(line for line in lines if "duty-0.50" in line)
    assert "NVML utilization" in row and "PASS" in row
    assert sum("│ PASS" in line for line in lines) == 5  # one row per check
    assert lines[-1].startswith("PASS: 5 passed, 0 failed")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--insecure", "--ca-file", "ca.pem"], "--insecure skips certificate checks"),
        (["--username", "u", "--password-file", "/nonexistent/pw"], "cannot read password file"),
        (["--password-env", "VGPUMON_TEST_UNSET_PASSWORD"], "VGPUMON_TEST_UNSET_PASSWORD"),
        (["--ca-file", "/nonexistent/ca.pem"], "cannot use CA file /nonexistent/ca.pem"),
    ],
)
def test_bad_connection_flags_are_one_line(capsys, argv, message):
    code = main(["validate", "--url", "https://127.0.0.1:1", *FAST, *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("vgpumon: error: ")
