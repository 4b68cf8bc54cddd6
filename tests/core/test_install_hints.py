"""Install hints work from where vgpumon was installed: vgpumon is not on a public index, so
``pip install 'vgpumon[load]'`` fails ("No matching distribution") and an unclaimed name invites
someone else to publish under it."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from pathlib import Path

from vgpumon.install_hints import extra_requirements, install_command, install_hint

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = ("load", "kubernetes", "libvirt")


def test_no_hint_names_the_unpublished_package() -> None:
    unpublished = re.compile(r"""pip install ['"]?vgpumon\[|install vgpumon\[""")
    offenders = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "vgpumon").rglob("*.py"))
        if path.name != "install_hints.py"  # it says why not
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if unpublished.search(line)
    ]
    offenders += [
        f"{path.relative_to(ROOT)}:{number}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if unpublished.search(line)
    ]
    assert offenders == []


def test_a_checkout_installs_the_extra_from_its_own_path(tmp_path: Path) -> None:
    checkout = tmp_path / "my checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for extra in EXTRAS:
        words = shlex.split(install_command(extra, root=checkout, python="/opt/vgpumon/bin/python"))
        python, *pip = words
        assert python == "/opt/vgpumon/bin/python"
        assert pip == ["-m", "pip", "install", "-e", f"{checkout}[{extra}]"]
    # This test's own interpreter and checkout (an editable install or a run from the tree).
    assert install_hint("load") == (
        f"install the [load] extra: {shlex.quote(sys.executable)} -m pip install -e "
        f"{shlex.quote(f'{ROOT}[load]')}"
    )


def test_an_installed_wheel_names_the_extras_packages_from_its_metadata(tmp_path: Path) -> None:
    info = tmp_path / "vgpumon-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vgpumon\nVersion: 0.1.0\n"
        "Requires-Dist: nvidia-ml-py>=12.535\n"
        'Requires-Dist: cuda-core[cu13]>=0.3; extra == "load"\n'
        'Requires-Dist: cuda-bindings>=12.8; extra == "load"\n'
        'Requires-Dist: libvirt-python>=9.0; extra == "libvirt"\n'
    )
    wheel = importlib.metadata.PathDistribution(info)
    site = tmp_path / "site-packages"  # no pyproject.toml beside the package
    command = install_command("load", root=site, distribution=wheel, python="python3")
    assert shlex.split(command) == [
        "python3",
        "-m",
        "pip",
        "install",
        "cuda-core[cu13]>=0.3",
        "cuda-bindings>=12.8",
    ]
    assert extra_requirements("libvirt", wheel) == ["libvirt-python>=9.0"]


def test_the_packages_named_are_the_extras_of_pyproject() -> None:
    """One place for the fact: the metadata installed from pyproject.toml's extras."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for extra in EXTRAS:
        declared = re.search(rf"^{extra} = \[(.*)\]$", text, re.MULTILINE)
        assert declared is not None, extra
        names = [re.split(r"[\[<>=]", r.strip(' "'))[0] for r in declared.group(1).split('",')]
        listed = [re.split(r"[\[<>=]", r)[0] for r in extra_requirements(extra)]
        assert sorted(listed) == sorted(names), extra
