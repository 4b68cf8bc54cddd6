"""One meaning per module-level function name across the package, for the names that had several.

``text()`` was an NVML string decoder, a display placeholder, an XML reader and an HTTP response.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "vgpumon"
WATCHED = ("text",)


def test_a_watched_name_is_defined_in_one_module_at_most() -> None:
    where: dict[str, list[str]] = {name: [] for name in WATCHED}
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and node.name in where:
                where[node.name].append(str(path.relative_to(ROOT)))
    assert {name: files for name, files in where.items() if len(files) > 1} == {}
