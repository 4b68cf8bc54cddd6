"""Release artefacts: ``python -m build`` gives a wheel and an sdist without warnings, the licence
metadata is the SPDX expression with its LICENSE file, the sdist carries docs/, dashboards and
packaging but not the tests, and the wheel installs and runs in a clean virtual environment."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from ci_helpers import missing

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def needs_build() -> None:
    if importlib.util.find_spec("build") is None:
        missing("needs `build` (the dev extra)")  # CI=true fails instead


def clean_env() -> dict[str, str]:
    """Without PYTHONDONTWRITEBYTECODE, whose only effect on a build is a warning about it."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        env=clean_env(),
        check=False,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-4000:]
    return out, log


def test_build_gives_wheel_and_sdist_without_warnings(dist: tuple[Path, str]) -> None:
    out, log = dist
    assert len(list(out.glob("*.whl"))) == 1
    assert len(list(out.glob("*.tar.gz"))) == 1
    warnings = [line for line in log.splitlines() if "warning" in line.lower()]
    assert warnings == []


def test_wheel_carries_every_file_of_the_package(dist: tuple[Path, str]) -> None:
    """Data files (scenarios, the TUI's stylesheet, the vendored proto) ship with the code: a
    missing one works in a checkout and breaks after ``pip install .``."""
    tracked = subprocess.run(
        ["git", "ls-files", "vgpumon"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    wheel = next(dist[0].glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        shipped = set(zf.namelist())
    missing = [name for name in tracked.stdout.split() if name not in shipped]
    assert missing == []


def test_wheel_metadata_carries_the_spdx_licence(dist: tuple[Path, str]) -> None:
    wheel = next(dist[0].glob("*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        metadata_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(metadata_name).decode())
        licence = next(n for n in names if n.endswith("licenses/LICENSE"))
        assert zf.read(licence).decode() == (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    classifiers = meta.get_all("Classifier") or []
    assert "Topic :: System :: Monitoring" in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")], "the expression says it"


def test_sdist_has_docs_and_packaging_and_leaves_tests_out(dist: tuple[Path, str]) -> None:
    sdist = next(dist[0].glob("*.tar.gz"))
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for path in (
        "LICENSE",
        "docs/metrics.md",
        "docs/runbooks.md",
        "dashboards/grafana/vgpumon-fleet.json",
        "packaging/prometheus/vgpumon.rules.yml",
        "packaging/systemd/vgpumon.service",
        "packaging/container/Containerfile",
        "packaging/kubernetes/kustomization.yaml",
        "vgpumon/sim/scenarios/baremetal-8xh100.yaml",
    ):
        assert path in names, path
    assert not [n for n in names if n.startswith(("tests/", "bench/"))]
    assert not [n for n in names if "__pycache__" in n]


def test_wheel_installs_and_runs_in_a_clean_venv(dist: tuple[Path, str], tmp_path: Path) -> None:
    wheel = next(dist[0].glob("*.whl"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    # A clean environment has no PYTHONPATH: one naming the checkout (where the build leaves
    # vgpumon.egg-info) makes pip think vgpumon is installed already and install nothing, and
    # the command below run the checkout's code instead of the wheel's.
    env = {k: v for k, v in clean_env().items() if k != "PYTHONPATH"}
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    run = subprocess.run(
        [str(venv / "bin" / "vgpumon"), "snapshot", "--sim", "baremetal-8xh100", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,  # not the checkout: the installed package must run on its own
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert '"gpus"' in run.stdout
    # The version the wheel is named for is the one it reports (vgpumon/__init__.py's).
    from vgpumon import __version__

    assert wheel.name.startswith(f"vgpumon-{__version__}-")
    version = subprocess.run(
        [str(venv / "bin" / "vgpumon"), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
        env=env,
    )
    assert version.stdout == f"vgpumon {__version__}\n"
