"""How to install one of vgpumon's extras (``load``, ``kubernetes``, ``libvirt``) from where this
vgpumon was installed.

vgpumon is not on a public index, so ``pip install 'vgpumon[load]'`` cannot work (and would invite
someone else to publish under the name). The hint names the interpreter running vgpumon, then:

- a source checkout (an editable install, or a run from the tree):
  ``pip install -e 'CHECKOUT[load]'``, the extra itself, from the ``pyproject.toml`` beside the
  package;
- an installed wheel: the extra's packages themselves, as the installed distribution's metadata
  lists them (``Requires-Dist: ...; extra == "load"``), so the extras in ``pyproject.toml`` stay
  the one place for that fact.
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import sys
from pathlib import Path

DISTRIBUTION = "vgpumon"
_EXTRA_MARKER = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


def _checkout(root: Path, extra: str) -> bool:
    """Whether ``root`` is a vgpumon source tree that defines ``extra`` (read as text: tomllib
    is not in Python 3.10, and two lines of a file this project writes need no parser)."""
    try:
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False
    named = re.search(rf'^name\s*=\s*"{DISTRIBUTION}"\s*$', text, re.MULTILINE)
    defines = re.search(rf"^{re.escape(extra)}\s*=\s*\[", text, re.MULTILINE)
    return bool(named and defines)


def extra_requirements(
    extra: str, distribution: importlib.metadata.Distribution | None = None
) -> list[str]:
    """The requirements of ``extra`` as the installed distribution's metadata lists them."""
    try:
        dist = distribution or importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return []
    out = []
    for requirement in dist.requires or ():
        spec, _, marker = requirement.partition(";")
        if extra in _EXTRA_MARKER.findall(marker):
            out.append(spec.strip())
    return out


def install_command(
    extra: str,
    *,
    root: Path | None = None,
    distribution: importlib.metadata.Distribution | None = None,
    python: str | None = None,
) -> str:
    """The shell command that installs ``extra`` into the environment running vgpumon."""
    pip = f"{shlex.quote(python or sys.executable)} -m pip install"
    root = root if root is not None else Path(__file__).resolve().parent.parent
    if _checkout(root, extra):
        return f"{pip} -e {shlex.quote(f'{root}[{extra}]')}"
    packages = extra_requirements(extra, distribution)
    if packages:
        return f"{pip} " + " ".join(shlex.quote(p) for p in packages)
    # Neither a checkout nor metadata (a copied tree): the extra is all that can be named.
    return f"{pip} the packages of vgpumon's [{extra}] extra (pyproject.toml)"


def install_hint(extra: str, *, root: Path | None = None) -> str:
    """``install the [extra] extra: COMMAND``, for the end of a one-line error."""
    return f"install the [{extra}] extra: {install_command(extra, root=root)}"
