"""The Kubernetes tools the packaging tests run: helm and kubectl (its kustomize).

`.ci/run` puts both into the virtual environment's bin directory (they ship inside an npm
package); a developer may have them on PATH instead. Without them the tests skip, except under
CI=true, where a missing tool is a failure: CI installs them, so their absence is a broken CI.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "packaging" / "helm" / "vgpumon"
PROFILES = CHART / "profiles"
K8S = ROOT / "packaging" / "kubernetes"


def tool(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is required in CI (.ci/run installs it into .venv/bin)")
        pytest.skip(f"{name} not installed (.ci/run shows how to get it)")
    return found


def run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)


def documents(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def kustomize(path: Path) -> list[dict[str, Any]]:
    result = run([tool("kubectl"), "kustomize", str(path)])
    assert result.returncode == 0, result.stderr
    return documents(result.stdout)


def overlay(tmp_path: Path, components: tuple[str, ...]) -> Path:
    """A kustomization of the base with these components, in this order (the base copied once
    into tmp_path, with stand-ins for the files the components' Secrets are built from)."""
    base = tmp_path / "base"
    if not base.exists():
        shutil.copytree(K8S, base)
        for name in ("tls.crt", "tls.key", "ca.crt"):  # web-config's Secret is built from these
            (base / "components" / "web-config" / name).write_text("placeholder\n")
        for name in ("username", "password"):
            (base / "components" / "basic-auth" / name).write_text("placeholder\n")
    out = tmp_path / f"overlay{len(list(tmp_path.glob('overlay*')))}"
    out.mkdir()
    spec = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../base"],
        "components": [f"../base/components/{c}" for c in components],
    }
    (out / "kustomization.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return out


def load_script(path: Path) -> Any:
    """A packaging script (not a package) imported by its path, e.g. packaging/helm/render.py."""
    spec = importlib.util.spec_from_file_location(f"vgpumon_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
