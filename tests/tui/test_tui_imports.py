"""The terminal UI's import rules: ``tui`` reads data only through ``model``, ``view`` and
``sources`` (never NVML, the sampler or the simulator); ``view`` never imports textual."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import vgpumon

PACKAGE = Path(vgpumon.__file__).resolve().parent
TUI_ALLOWED = ("vgpumon.model", "vgpumon.view", "vgpumon.sources", "vgpumon.tui", "vgpumon.errors")


def imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append(node.module)
    return found


def offenders(folder: str, bad: Callable[[str], bool]) -> list[str]:
    return [
        f"{p.relative_to(PACKAGE)}: {name}"
        for p in sorted((PACKAGE / folder).rglob("*.py"))
        for name in imports(p)
        if bad(name)
    ]


def tui_bad(name: str) -> bool:
    return name.startswith("vgpumon") and not name.startswith(TUI_ALLOWED)


def view_bad(name: str) -> bool:
    return name == "textual" or name.startswith("textual.")


def test_tui_reads_only_model_view_and_sources() -> None:
    assert offenders("tui", tui_bad) == []


def test_view_never_imports_textual() -> None:
    assert offenders("view", view_bad) == []


def test_the_checks_catch_a_planted_violation(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("from vgpumon.collect import Sampler\nimport textual.widgets\n")
    names = imports(planted)
    assert [n for n in names if tui_bad(n)] == ["vgpumon.collect"]
    assert [n for n in names if view_bad(n)] == ["textual.widgets"]
