"""``--nvml-module`` naming a module that misbehaves on import: one line and exit 2, never a
traceback or a silent exit, and a module that is no NVML is not blamed on the driver."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULES = {
    "raises_on_import": 'raise RuntimeError("boom at import")\n',
    "syntax_error": "def broken(:\n",
    "exits_on_import": "import sys\nsys.exit(3)\n",
}


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("raises_on_import", "its import raised RuntimeError: boom at import"),
        ("syntax_error", "syntax error"),
        ("exits_on_import", "called sys.exit(3) while being imported"),
        ("json", "json is not an NVML module"),
        ("no_such_module_here", "cannot import NVML module 'no_such_module_here'"),
    ],
)
def test_bad_nvml_module_is_one_line(tmp_path: Path, module: str, expected: str) -> None:
    for name, text in MODULES.items():
        (tmp_path / f"{name}.py").write_text(text)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run(
        [sys.executable, "-m", "vgpumon.cli", "snapshot", "--nvml-module", module],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("vgpumon: error: ") and expected in lines[0], lines[0]
    assert "driver" not in lines[0], "a broken module is not the driver's fault"
