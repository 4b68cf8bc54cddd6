"""VGPUMON_NVML_LIBRARY: pynvml's NVML from a path outside the linker's search path (the Helm
chart's driver root on hosts without the container toolkit), proved with a stand-in library."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vgpumon.nvml.library import ENV_LIBRARY

STAND_IN = textwrap.dedent(
    """
    int nvmlInitWithFlags(unsigned int flags) { return 0; }
    int nvmlInit_v2(void) { return 0; }
    int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
        const char *v = "stand-in 1.0";
        unsigned int i = 0;
        for (; v[i] && i + 1 < length; i++) version[i] = v[i];
        version[i] = 0;
        return 0;
    }
    """
)

PROGRAM = textwrap.dedent(
    """
    import pynvml
    from vgpumon.nvml.session import NvmlSession
    session = NvmlSession(pynvml, "pynvml")
    try:
        session.init()
    except Exception as exc:
        print("ERROR", exc)
    else:
        print("VERSION", pynvml.nvmlSystemGetDriverVersion())
    """
)


@pytest.fixture(scope="module")
def driver_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A driver root with a stand-in libnvidia-ml.so.1 (soname and all) in its library dir."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gcc is required in CI (.ci/run installs it)")
        pytest.skip("needs a C compiler for the stand-in library")
    root = tmp_path_factory.mktemp("driver-root")
    libdir = root / "usr" / "lib" / "x86_64-linux-gnu"
    libdir.mkdir(parents=True)
    source = root / "nvml.c"
    source.write_text(STAND_IN)
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            str(libdir / "libnvidia-ml.so.999.1"),
            str(source),
        ],
        check=True,
        timeout=60,
    )
    (libdir / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.999.1")
    return root


def run(env_library: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in (ENV_LIBRARY, "LD_LIBRARY_PATH")}
    if env_library is not None:
        env[ENV_LIBRARY] = env_library
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_pynvml_finds_the_library_the_variable_names(driver_root: Path) -> None:
    library = driver_root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    assert run(str(library)) == "VERSION stand-in 1.0"


def test_without_the_variable_the_library_is_not_found(driver_root: Path) -> None:
    if Path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists():
        pytest.skip("this host has a real NVML on the linker's path")
    assert run(None).startswith("ERROR")


def test_a_library_not_there_yet_is_one_line_and_retried(tmp_path: Path) -> None:
    """A driver container that has not mounted its root yet: init fails with a line naming the
    variable; serve's sampler retries init with its backoff (tests/export/test_serve_no_driver)."""
    missing = tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    out = run(str(missing))
    assert out.startswith("ERROR cannot load ") and ENV_LIBRARY in out and "\n" not in out
