"""Every module-level definition in the package is named somewhere else (code, tests, benchmarks):
a constant, function or class that nothing reads is dead weight a reader has to understand.

Classes registered by a decorator (the simulator's NVML providers) are read through the registry.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEARCHED = ("vgpumon", "tests", "bench", "dashboards", "packaging")
# NVML's return codes, kept complete as a reference beside docs/nvml-notes.md.
KEPT = {("vgpumon/nvml/errors.py", "NO_DATA")}


def _definitions(tree: ast.Module) -> list[tuple[int, str]]:
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if not node.decorator_list:
                out.append((node.lineno, node.name))
        elif isinstance(node, ast.Assign):
            out += [(node.lineno, t.id) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.lineno, node.target.id))
    return out


def test_no_module_level_definition_is_unread() -> None:
    texts = {p: p.read_text(encoding="utf-8") for d in SEARCHED for p in (ROOT / d).rglob("*.py")}
    words = Counter(w for text in texts.values() for w in re.findall(r"\b\w+\b", text))
    unread = []
    for path, text in sorted(texts.items()):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("vgpumon/") or "_pb2" in path.name:
            continue
        for line, name in _definitions(ast.parse(text)):
            if name.startswith("__") or (rel, name) in KEPT:
                continue
            if words[name] <= 1:
                unread.append(f"{rel}:{line}: {name}")
    assert unread == []
