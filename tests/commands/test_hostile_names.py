"""Names that are terminal escapes never reach the terminal (issue 33, finding 1).

A process named ``ESC ] 52 ; c ; UFdORUQ= ESC \\`` writes "PWNED" to the clipboard of whoever
shows it (OSC 52), ``ESC ] 0 ; PWN ESC \\`` sets their window title; C1 controls and bidi
overrides do the same on some terminals. These names come from a VM's tenant (a guest's process),
any local user, a remote exporter or Prometheus. Each command that shows them is run where the
bytes it writes can be read: ``top`` on a pseudo-terminal (``--sim`` and ``--url``), ``usage``,
``snapshot`` and ``check`` on their output. Every name still shows, escaped, and Rich markup in a
name shows as written.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from export_helpers import free_port
from prometheus_helpers import PrometheusStandIn
from pty_helpers import Terminal, stray_controls

from vgpumon.cli import main
from vgpumon.text import printable

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "tests" / "fixtures" / "scenarios" / "hostile-names.yaml")
VGPUMON = str(Path(sys.executable).with_name("vgpumon"))
OSC52 = "\x1b]52;c;UFdORUQ=\x1b\\\x1b]0;PWN\x1b\\GPROC"  # the process name
SHOWN = printable(OSC52)  # what a reader sees instead: \x1b]52;c;UFdORUQ=\x1b\\...


def _no_escape_reached(text: str) -> None:
    assert "\x1b]52" not in text and "\x1b]0;PWN" not in text
    assert stray_controls(text) == []


def test_printable_escapes_what_a_terminal_would_obey() -> None:
    assert printable("plain name-1.2 (ok) [red]") == "plain name-1.2 (ok) [red]"
    assert printable(OSC52) == "\\x1b]52;c;UFdORUQ=\\x1b\\\\x1b]0;PWN\\x1b\\GPROC"
    assert printable("a\x9b2Jb") == "a\\x9b2Jb"  # C1 CSI
    assert printable("evil\u202efdp.exe") == "evil\\u202efdp.exe"  # bidi override
    assert printable("tab\tnl\nnul\x00del\x7f") == "tab\\tnl\\nnul\\x00del\\x7f"
    assert printable("bad\udcffbyte") == "bad\\xffbyte"  # surrogateescape'd byte
    assert printable("日本語 ünïcode ✓") == "日本語 ünïcode ✓"
    assert printable(printable(OSC52)) == printable(OSC52)


def test_snapshot_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["snapshot", "--sim", SCENARIO, "--interval", "0"]) == 0
    out = capsys.readouterr().out
    _no_escape_reached(out)
    assert SHOWN in out
    assert "[link=http://x]y" in out  # Rich markup in a name is shown, not obeyed


def _top(argv: list[str]) -> str:
    """``top`` on a pty: the first screen, Enter on GPU 0 (its processes), then q."""
    term = Terminal([VGPUMON, "top", *argv], size=(220, 50))
    try:
        assert term.wait_for(b"vGPU host", 90), term.text()[-2000:]
        time.sleep(0.5)
        term.send("\r")  # GPU 0: its vGPU's guest process
        assert term.wait_for(b"UFdORUQ=", 30), term.text()[-2000:]
        term.read_for(1.0)
        term.send("q")
    finally:
        code = term.close()
    assert code == 0
    return term.text()


@pytest.mark.e2e
def test_top_sim_writes_no_escape_of_a_process_name() -> None:
    out = _top(["--sim", SCENARIO])
    _no_escape_reached(out)
    assert "PWN\\x1b\\GPROC" in out  # shown, escaped


@pytest.mark.e2e
def test_top_url_writes_no_escape_of_a_remote_process_name(tmp_path: Path) -> None:
    import subprocess

    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen(
        [VGPUMON, "serve", "--sim", SCENARIO, "--listen", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        out = _top(["--url", f"http://127.0.0.1:{port}"])
    finally:
        serve.terminate()
        serve.wait(timeout=15)
    _no_escape_reached(out)
    assert "PWN\\x1b\\GPROC" in out


HOSTILE_TENANT = OSC52 + "\x9b2J\u202e[link=http://x]y"


@pytest.fixture
def hostile_prometheus() -> Iterator[PrometheusStandIn]:
    with PrometheusStandIn() as prom:
        prom.vector = lambda promql: [({"tenant": HOSTILE_TENANT}, "2.5"), ({"tenant": "ok"}, "1")]
        yield prom


RANGE = ["--from", "2026-11-01", "--to", "2026-11-02"]


@pytest.mark.parametrize("form", [[], ["--csv"], ["--json"]])
def test_usage_writes_no_escape_of_a_label(
    hostile_prometheus: PrometheusStandIn, form: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["usage", "--prometheus", hostile_prometheus.url, *RANGE, *form]) == 0
    captured = capsys.readouterr()
    _no_escape_reached(captured.out + captured.err)
    if form == ["--json"]:
        rows = json.loads(captured.out)["rows"]
        assert rows[0]["tenant"] == HOSTILE_TENANT  # JSON keeps the value, escaped by JSON
    else:
        assert "PWN\\x1b\\GPROC" in captured.out
        assert "[link=http://x]y" in captured.out


def test_usage_error_from_prometheus_writes_no_escape(
    hostile_prometheus: PrometheusStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile_prometheus.error = f"bad query {OSC52} [link=http://x]y"
    assert main(["usage", "--prometheus", hostile_prometheus.url, *RANGE]) != 0
    err = capsys.readouterr().err
    _no_escape_reached(err)
    assert "PWN\\x1b\\GPROC" in err and err.count("\n") == 1


def test_check_writes_no_escape_of_a_vm_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vgpumon.commands import node_source
    from vgpumon.model import (
        Gpu,
        SamplerHealth,
        Snapshot,
        VgpuInstance,
        VgpuLicense,
        VirtualMachine,
    )

    vgpu = VgpuInstance(
        vgpu_id=1,
        vm=VirtualMachine(name=OSC52),
        license=VgpuLicense(licensed=False, state="unlicensed_restricted"),
    )
    snap = Snapshot(
        timestamp=time.time(),
        gpus=(Gpu(0, "GPU-1", virtualization_mode="host_vgpu", vgpu_instances=(vgpu,)),),
        health=SamplerHealth(up=True),
    )
    monkeypatch.setattr(node_source, "node_snapshot", lambda args: snap)
    assert main(["check", "license"]) == 1
    out = capsys.readouterr().out
    _no_escape_reached(out)
    assert "PWN\\x1b\\GPROC" in out
