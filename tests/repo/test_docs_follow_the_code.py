"""The docs follow the code: every repository path and ``vgpumon.*`` module the docs, the README,
CONTRIBUTING and the code's comments and docstrings cite exists (five moved test files were cited
eleven times), every Markdown link between the docs leads somewhere, and docs/design.md's package
table has every package and top-level module of ``vgpumon/`` (it had no ``metrics/``)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOP = r"(?:vgpumon|tests|docs|packaging|dashboards|bench|\.ci)"
# A path from the repository root: a top-level directory and at least one more part.
PATH = re.compile(r"(?<![\w./-])(" + TOP + r"/[\w.*/<>{}-]*[\w*/>}])")
# A dotted module of the package (an attribute after it is allowed: vgpumon.model.Snapshot);
# only where the first part is one of the package's own (vgpumon.io labels, the vgpumon.serve
# logger and the vgpumon.rules.yml file are not modules).
_PARTS = sorted(
    p.stem
    for p in (ROOT / "vgpumon").iterdir()
    if p.suffix == ".py" or (p / "__init__.py").exists()
)
MODULE = re.compile(r"(?<![\w./-])(vgpumon\.(?:" + "|".join(_PARTS) + r")(?:\.\w+)*)\b(?![./-]\w)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    files += sorted((ROOT / "docs").glob("*.md"))
    files += sorted(p for p in (ROOT / "packaging").rglob("*.md"))
    files += sorted((ROOT / "bench").glob("*.md"))
    return files


def code_files() -> list[Path]:
    out = []
    for top in ("vgpumon", "tests", "bench", "dashboards", "packaging"):
        out += sorted(p for p in (ROOT / top).rglob("*.py") if "results" not in p.parts)
    return out


def prose_of_code(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of a module's comments and docstrings: what is cited, not what is run."""
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None and node.body:
                start = node.body[0].lineno
                for offset, line in enumerate(doc.splitlines()):
                    yield start + offset, line


def prose_of_markdown(text: str) -> Iterator[tuple[int, str]]:
    yield from enumerate(text.splitlines(), 1)


def path_exists(cited: str, here: Path = ROOT) -> bool:
    """From the repository root, or from the citing file's directory (a chart's own files);
    ``.py`` may be left out (a test module named like one); placeholders pass."""
    path = cited.rstrip(".")
    if any(ch in path for ch in "<>{}") or any(p.isupper() for p in re.split(r"[/.]", path)):
        return True  # a placeholder: tests/fixtures/smi/<name>.xml, profiles/PROFILE.yaml
    for base in (ROOT, here):
        if "*" in path:
            if any(base.glob(path)):
                return True
            continue
        candidates = (path, path.split("::")[0], path + ".py")
        if any((base / c).exists() for c in candidates):
            return True
    return False


def module_exists(dotted: str) -> bool:
    """``vgpumon.a.b`` is a module or package, or an attribute (a name defined) of one."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:n])
        module = base.with_suffix(".py") if not base.is_dir() else base / "__init__.py"
        if module.exists():
            rest = parts[n:]
            if not rest:
                return True
            # Defined or imported there (a package re-exports: vgpumon.sim.load_scenario).
            text = module.read_text(encoding="utf-8")
            return re.search(rf"\b{re.escape(rest[0])}\b", text) is not None
    return False


def cited_problems(path: Path, lines: Iterator[tuple[int, str]]) -> list[str]:
    rel = path.relative_to(ROOT)
    problems = []
    for number, line in lines:
        for cited in PATH.findall(line):
            if not path_exists(cited, path.parent):
                problems.append(f"{rel}:{number}: no {cited}")
        for dotted in MODULE.findall(line):
            if not module_exists(dotted.rstrip(".")):
                problems.append(f"{rel}:{number}: no module or name {dotted}")
    return problems


def test_every_cited_path_and_module_exists() -> None:
    problems = []
    for path in markdown_files():
        problems += cited_problems(path, prose_of_markdown(path.read_text(encoding="utf-8")))
    for path in code_files():
        problems += cited_problems(path, prose_of_code(path.read_text(encoding="utf-8")))
    assert problems == []


def test_every_markdown_link_leads_to_a_file() -> None:
    broken = []
    for path in markdown_files():
        for number, line in prose_of_markdown(path.read_text(encoding="utf-8")):
            for link in LINK.findall(line):
                if re.match(r"[a-z]+:", link):
                    continue  # http:, https:, mailto:
                if not (path.parent / link).exists():
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {link}")
    assert broken == []


def test_the_design_package_table_has_every_package_and_module() -> None:
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    table = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`([\w]+(?:/|\.py))`", table))
    package = ROOT / "vgpumon"
    present = {p.name + "/" for p in package.iterdir() if (p / "__init__.py").exists()}
    present |= {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    assert sorted(present - named) == [], "add them to docs/design.md's package table"
    assert sorted(named - present) == [], "docs/design.md names what is not there"


def test_the_checks_find_what_is_missing(tmp_path: Path) -> None:
    assert not path_exists("tests/export/test_export_golden.py")
    assert path_exists("tests/metrics/test_golden.py")
    assert path_exists("tests/golden/*.prom") and not path_exists("tests/golden/*.nothing")
    assert path_exists("vgpumon/files/dashboards/*.json", ROOT / "packaging" / "helm")
    assert not path_exists("vgpumon/files/dashboards/*.json")
    assert module_exists("vgpumon.model.Snapshot") and module_exists("vgpumon.metrics")
    assert not module_exists("vgpumon.export.metrics") and not module_exists("vgpumon.model.Nope")
    assert MODULE.findall("vgpumon.io/mode, vgpumon.rules.yml, vgpumon.model.Gpu") == [
        "vgpumon.model.Gpu"
    ]
