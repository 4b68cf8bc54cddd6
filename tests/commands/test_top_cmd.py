"""``vgpumon top``'s flags: bad input is one line and a non-zero exit; ``serve`` never loads
textual."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from vgpumon.cli import main


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--url", "foo"], "bad exporter URL"),
        (["--sim", "kvm-vgpu-timesliced", "--interval", "0"], "--interval"),
        (["--sim", "kvm-vgpu-timesliced", "--interval", "nan"], "--interval"),
        (["--sim", "no-such-scenario"], "unknown scenario"),
        (["--sim", "kvm-vgpu-timesliced", "--url", "http://a:1"], "drop --sim"),
        (["--sim", "kvm-vgpu-timesliced", "--insecure"], "need --url"),
        (["--url", "http://a:1", "--password-env", "VGPUMON_NO_SUCH_VAR"], "not set"),
        (["--url", "http://a:1", "--url", "http://a:1"], "given twice"),
        (["--url", "http://a:1", "--ca-file", "/nonexistent/ca.pem"], "CA file"),
        (["--targets", "/nonexistent/targets.yml"], "targets file"),
        (["--sim", "kvm-vgpu-timesliced", "--theme", "nope"], "unknown theme"),
        (["--password", "x"], "unrecognized"),  # a password is never a flag value
        (["--url", "http://a:1", "--libvirt.uri"], "bring their own names"),
        (["--sim", "kvm-vgpu-timesliced", "--history", "soon"], "--history"),
        (["--sim", "kvm-vgpu-timesliced", "--history", "48h"], "at most 86400"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["top", *argv]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


def test_password_from_file_needs_a_user(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    assert main(["top", "--url", "http://a:1", "--password-file", str(secret)]) != 0
    err = capsys.readouterr().err
    assert "--username" in err and "hunter2" not in err


def test_serve_does_not_import_textual() -> None:
    code = (
        "import sys\n"
        "from vgpumon.cli import build_parser\n"
        "import vgpumon.commands.serve, vgpumon.export.server\n"
        "build_parser('serve')\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "assert not bad, bad\n"
        "assert 'vgpumon.tui' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_textual_check_sees_textual_when_it_is_imported() -> None:
    """The check above can fail: the same probe after importing the TUI finds textual."""
    code = "import sys\nimport vgpumon.tui.app\nassert 'textual' in sys.modules\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def test_local_top_names_vgpus_from_libvirt() -> None:
    """``top --libvirt.uri`` runs the same enricher as ``serve``: the VM column shows names."""
    from ci_helpers import optional_binding

    from vgpumon.cli import build_parser
    from vgpumon.collect import Sampler
    from vgpumon.commands.top import feed_from_args
    from vgpumon.view import rows as vr

    optional_binding("libvirt", "libvirt")
    fixtures = Path(__file__).resolve().parents[1] / "fixtures"
    fixture = fixtures / "libvirt" / "kvm-vgpu-timesliced.xml"
    argv = ["top", "--sim", "kvm-vgpu-timesliced", "--libvirt.uri", f"test://{fixture}"]
    made = feed_from_args(build_parser("top").parse_args(argv))
    sampler = made.feed.feeds["local"]
    assert isinstance(sampler, Sampler) and not made.this_host  # a simulator's pids are not ours
    try:
        names: set[str | None] = set()
        for _ in range(50):  # the enricher reads libvirt on its own thread; its answer comes soon
            await sampler.cycle()
            snap = made.feed.latest.hosts[0].snapshot
            assert snap is not None
            names = {r.vm for g in snap.gpus for r in vr.vgpu_rows("local", snap, g)}
            if "vm-render-07" in names:
                break
            await asyncio.sleep(0.1)
        assert "vm-render-07" in names
    finally:
        sampler.close()


def test_history_is_points_at_the_refresh_rate() -> None:
    from vgpumon.commands.top import history_points

    assert history_points("10m", 1.0) == 600
    assert history_points("1h", 2.0) == 1800
