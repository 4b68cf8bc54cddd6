"""The version is written once, in ``vgpumon/__init__.py``: the package metadata reads it from
there, and nothing else in the repository repeats it (it was written in five places), except the
image tags a deployment must name, which must equal it."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
from pathlib import Path

import pytest

from vgpumon import __version__

ROOT = Path(__file__).resolve().parents[2]
# A deployment names the image and the application by version: kept equal to it, bumped with it.
IMAGE_TAG = re.compile(
    r"(?:image:\s*vgpumon:|newTag:\s*|appVersion:\s*|app\.kubernetes\.io/version:\s*)"
    r"\"?([0-9][\w.+-]*)"
)
# The Helm chart's own version is the chart's, not vgpumon's (they may move apart).
CHART_VERSION = re.compile(r"^version:\s")


def _tracked() -> list[Path]:
    done = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in done.stdout.splitlines()]


def test_the_metadata_version_is_the_package_s() -> None:
    assert importlib.metadata.version("vgpumon") == __version__
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r"^version\s*=\s*\"", text, re.M) is None, "pyproject.toml reads it (dynamic)"


def test_no_file_repeats_the_version() -> None:
    literal = re.compile(rf"(?<![\w.]){re.escape(__version__)}(?![\w.])")
    repeated = []
    for path in _tracked():
        rel = path.relative_to(ROOT).as_posix()
        if rel in ("vgpumon/__init__.py", "CHANGELOG.md") or rel.startswith(("bench/", "tests/")):
            continue
        if not path.is_file() or path.suffix in (".svg", ".png", ".json"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for line in text.splitlines():
            if rel.endswith("Chart.yaml") and CHART_VERSION.match(line):
                continue
            if literal.search(line) and not IMAGE_TAG.search(line):
                repeated.append(f"{rel}: {line.strip()}")
    assert repeated == []


def test_shipped_image_tags_are_the_version() -> None:
    tags = {}
    for path in (ROOT / "packaging").rglob("*.yaml"):
        for tag in IMAGE_TAG.findall(path.read_text(encoding="utf-8")):
            tags[f"{path.relative_to(ROOT)}: {tag}"] = tag
    assert tags, "the Kubernetes manifests name an image tag"
    assert {k for k, tag in tags.items() if tag != __version__} == set()


def test_the_changelog_has_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(r"^## Unreleased$", text, re.M)
