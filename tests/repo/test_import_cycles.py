"""No import circles between vgpumon's modules, function-level (lazy) imports included.

A circle hidden behind an import inside a function still ties two modules into one: neither can
be understood, tested or moved without the other, and the order in which they are first imported
decides whether it works. Imports under ``if TYPE_CHECKING:`` are exempt (they never run).

The modules are read with :mod:`ast`; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Circles known when this check was written, each being removed by its owner. The snapshot
# tables' circle (collect/render <-> vgpu_render) went with their move to view/. Never add to this
# list.
KNOWN: set[frozenset[str]] = set()


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for path in (root / "vgpumon").rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The vgpumon modules ``name`` imports when it runs (TYPE_CHECKING blocks left out)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(target: str) -> str | None:
        while target and target not in known:
            target = target.rpartition(".")[0]
        return target or None

    found: set[str] = set()

    def walk(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    walk_one(other)
                continue
            walk_one(child)

    def walk_one(child: ast.AST) -> None:
        targets: list[str] = []
        if isinstance(child, ast.Import):
            targets = [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (child.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            targets = [f"{base}.{alias.name}" for alias in child.names]
        for target in targets:
            module = resolve(target)
            if module is not None and module != name:
                found.add(module)
        walk(child)

    walk(ast.parse(path.read_text(), str(path)))
    return found


def circles(root: Path) -> list[frozenset[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    known = modules(root)
    graph = {name: imports(name, path, known) for name, path in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_new_import_circles() -> None:
    new = [sorted(c) for c in circles(ROOT) if c not in KNOWN]
    assert not new, f"import circles: {new}"


def test_the_check_finds_a_planted_circle(tmp_path: Path) -> None:
    package = tmp_path / "vgpumon" / "validate"
    package.mkdir(parents=True)
    (tmp_path / "vgpumon" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "report.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from vgpumon.validate.run import Report\n"
        "def show():\n    from vgpumon.validate.display import print_report\n"
    )
    (package / "display.py").write_text("from vgpumon.validate.report import show\n")
    (package / "run.py").write_text("from . import report\n")
    assert circles(tmp_path) == [frozenset({"vgpumon.validate.report", "vgpumon.validate.display"})]
