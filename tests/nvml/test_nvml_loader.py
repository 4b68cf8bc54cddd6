"""Choosing the NVML module, and the one-line answer when there is no driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vgpumon.nvml.loader import ENV_MODULE, NvmlUnavailable, open_session, resolve_module

NO_DRIVER_MODULE = """
import pynvml
from pynvml import *  # noqa: F403 - constants and classes, like a real NVML module


def nvmlInit():
    raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
"""


@pytest.fixture
def no_driver_module(tmp_path: Path) -> str:
    (tmp_path / "nodriver_nvml.py").write_text(NO_DRIVER_MODULE)
    return str(tmp_path)


@pytest.mark.parametrize("command", ["snapshot", "record"])
def test_no_driver_is_one_line_pointing_to_the_simulator(
    no_driver_module: str, command: str
) -> None:
    # serve is the exception: it starts without a driver (tests/export/test_serve_no_driver.py).
    env = dict(os.environ, PYTHONPATH=no_driver_module, **{ENV_MODULE: "nodriver_nvml"})
    args = [sys.executable, "-m", "vgpumon.cli", command]
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "NVML could not be loaded" in lines[0] and "--sim" in lines[0]
    assert "Traceback" not in result.stderr


def test_module_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "stand_in_nvml.py").write_text("def nvmlInit():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(ENV_MODULE, "stand_in_nvml")  # any module with nvmlInit stands in here
    assert resolve_module()[1] == "stand_in_nvml"
    assert resolve_module(module_name="pynvml")[1] == "pynvml"  # the flag wins over the variable
    assert resolve_module(sim="passthrough-guest")[1] == "sim:passthrough-guest"  # --sim wins


def test_unimportable_module_is_a_clear_error() -> None:
    with pytest.raises(NvmlUnavailable, match="cannot import NVML module 'no_such_nvml'"):
        open_session(module_name="no_such_nvml")
