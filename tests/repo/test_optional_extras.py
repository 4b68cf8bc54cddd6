"""A test that needs an optional extra skips, with the reason, where the extra is missing or
unusable, and fails under CI=true: a grpcio older than the committed pod-resources stubs need
made ``pytest -m gpu tests`` error at collection instead."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The test modules that import the kubelet stand-in (tests/kubelet_helpers.py) at module level.
_ERRORS = re.compile(r"\b\d+ errors?\b|ERROR collecting")
KUBELET_TESTS = ("tests/collect/test_enrich_kubelet.py", "tests/commands/test_serve_enrich.py")


def _old_grpc(root: Path) -> Path:
    """A grpc package of version 1.84.0: the committed stubs raise RuntimeError on import."""
    package = root / "grpc"
    package.mkdir()
    (package / "__init__.py").write_text('__version__ = "1.84.0"\n')
    (package / "_utilities.py").write_text(
        "def first_version_is_lower(a, b):\n"
        "    return tuple(map(int, a.split('.'))) < tuple(map(int, b.split('.')))\n"
    )
    return root


def _pytest(path: Path, *argv: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def old_grpc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _old_grpc(tmp_path_factory.mktemp("old-grpc"))


def test_an_old_grpcio_skips_the_kubelet_tests_with_the_reason(old_grpc: Path) -> None:
    done = _pytest(old_grpc, *KUBELET_TESTS, ci=False)
    assert done.returncode in (0, 5), done.stdout[-3000:]  # 5: every module skipped whole
    assert not _ERRORS.search(done.stdout), done.stdout
    assert "SKIPPED [2]" in done.stdout, done.stdout
    assert "needs the [kubernetes] extra" in done.stdout and "RuntimeError" in done.stdout


def test_the_gpu_selection_collects_without_error_under_an_old_grpcio(old_grpc: Path) -> None:
    done = _pytest(old_grpc, "-m", "gpu", *KUBELET_TESTS, ci=False)
    assert done.returncode in (0, 5), done.stdout[-3000:]  # 5: nothing selected, no error
    assert not _ERRORS.search(done.stdout), done.stdout


def test_under_ci_an_unusable_extra_fails(old_grpc: Path) -> None:
    done = _pytest(old_grpc, KUBELET_TESTS[0], ci=True)
    assert done.returncode != 0, done.stdout[-3000:]  # a failure at collection is a failure
    assert "CI must have it: needs the [kubernetes] extra" in done.stdout
