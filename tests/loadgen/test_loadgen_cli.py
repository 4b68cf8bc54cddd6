"""``vgpumon load`` on machines without a usable GPU: argument errors and the CUDA error paths.

Each failure must be one line on stderr, a non-zero exit status, and no traceback. The "no driver"
and "no GPU" paths run the real worker against a stand-in ``cuda`` package whose driver calls fail
the way cuda-bindings fails on such machines.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vgpumon.cli import main

REPO = Path(__file__).resolve().parents[2]


def _run_cli(
    *args: str, pythonpath: list[Path] | None = None, prelude: str = ""
) -> tuple[int, str, str]:
    code = f"{prelude}\nimport sys\nfrom vgpumon.cli import main\nsys.exit(main(sys.argv[1:]))"
    path = [str(p) for p in (pythonpath or [])] + [str(REPO)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _assert_one_line_error(code: int, err: str, needle: str) -> None:
    assert code != 0
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("vgpumon: error: ")
    assert needle in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--duty", "1.5"], "above 1"),
        (["--duty", "150%"], "duty"),
        (["--sm-fraction", "0"], "SM fraction"),
        (["--memory", "lots"], "bad size"),
        (["--duration", "soon"], "bad duration"),
        (["--period", "0.1ms"], "period"),
        (["--processes", "0"], "processes"),
        (["--warps-per-block", "64"], "warps"),
        (["--device", "cuda:0"], "bad device"),
        (["--kernel", "stream"], "stream kernel"),
        (["--kernel", "stream", "--memory", "256MiB", "--processes", "2"], "per process"),
    ],
)
def test_bad_arguments_are_one_line_errors(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["load", *args])
    _assert_one_line_error(code, capsys.readouterr().err, needle)


def test_argparse_rejects_unknown_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["load", "--kernel", "matmul"])
    _assert_one_line_error(code, capsys.readouterr().err, "invalid choice")


def test_missing_cuda_core_says_install_the_extra() -> None:
    code, _out, err = _run_cli(
        "load", "--duration", "1", prelude="import sys\nsys.modules['cuda'] = None"
    )
    _assert_one_line_error(code, err, "install the [load] extra: ")
    assert "-m pip install" in err and "install 'vgpumon[" not in err


def test_missing_cuda_core_in_json_mode_prints_an_error_object() -> None:
    code, out, _err = _run_cli("load", "--json", prelude="import sys\nsys.modules['cuda'] = None")
    assert code != 0
    assert '"event":"error"' in out and "install the [load] extra: " in out


_FAKE_CORE = """
class _Unusable:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("the stand-in cuda-core must not get this far")

Device = Program = ProgramOptions = LaunchConfig = _Unusable
__version__ = "0.0-stand-in"

def launch(*args):
    raise RuntimeError("the stand-in cuda-core must not get this far")
"""

_FAKE_DRIVER_NO_DRIVER = """
class DynamicLibNotFoundError(RuntimeError):
    pass

def cuInit(flags):
    raise DynamicLibNotFoundError(
        '"cuda" is an NVIDIA driver library and can only be found via system search. '
        'Ensure the NVIDIA display driver is installed.'
    )
"""

_FAKE_DRIVER_NO_DEVICE = """
def cuInit(flags):
    return (100,)

def cuGetErrorName(err):
    return (0, b"CUDA_ERROR_NO_DEVICE")
"""


def _fake_cuda(root: Path, driver_source: str) -> Path:
    (root / "cuda" / "core").mkdir(parents=True)
    (root / "cuda" / "bindings").mkdir(parents=True)
    (root / "cuda" / "__init__.py").write_text("")
    (root / "cuda" / "core" / "__init__.py").write_text(_FAKE_CORE)
    (root / "cuda" / "bindings" / "__init__.py").write_text("")
    (root / "cuda" / "bindings" / "driver.py").write_text(textwrap.dedent(driver_source))
    return root


def test_no_cuda_driver_is_a_one_line_error(tmp_path: Path) -> None:
    fake = _fake_cuda(tmp_path, _FAKE_DRIVER_NO_DRIVER)
    code, _out, err = _run_cli("load", "--duration", "1", pythonpath=[fake])
    _assert_one_line_error(code, err, "no usable NVIDIA CUDA driver")


def test_no_gpu_is_a_one_line_error(tmp_path: Path) -> None:
    fake = _fake_cuda(tmp_path, _FAKE_DRIVER_NO_DEVICE)
    code, _out, err = _run_cli("load", "--duration", "1", "--device", "3", pythonpath=[fake])
    _assert_one_line_error(code, err, "no CUDA GPU found for device 3")
    assert "CUDA_ERROR_NO_DEVICE" in err
