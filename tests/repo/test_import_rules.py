"""The import rules of docs/design.md (rule 10), checked on the source with ``ast``.

Producers (``model``, ``nvml``, ``sim``, ``collect``, ``smi``) never import consumers; ``view`` is
free of textual; ``export`` never reaches into ``collect`` (it gets snapshots, not samplers),
textual (``serve`` must start on a host without a UI stack) nor ``config`` (the settings read the
HTTP side's types, not the other way round); ``tui`` sees snapshots only through the feed it is
handed (``feed``), ``sources`` and ``view``. Every import counts, also one inside a function or
under ``TYPE_CHECKING``: a lazy import is still an arrow in the wrong direction.

Each rule is also shown to fail: the checker runs on a temporary tree with one planted violation.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PRODUCERS = ("model", "nvml", "sim", "collect", "smi")
CONSUMERS = ("view", "sources", "export", "tui", "validate", "commands")
# What tui may import from vgpumon: the snapshot model, the feed shape (what it is handed), the
# shared presentation, the sources, the leaf modules every package may use (errors, text, units),
# and its own modules.
TUI_ALLOWED = ("model", "feed", "view", "sources", "errors", "text", "units", "tui")
# The metric vocabulary reads only the model: everything that speaks metric names (export,
# sources, validate, config, commands) imports it, so an import back would tie it in a circle.
METRICS_ALLOWED = ("model", "errors", "units", "metrics", "__version__")


@dataclass(frozen=True)
class Rule:
    name: str
    # parts below vgpumon: a package, a module such as model, or a sub-package such as tui.screens
    packages: tuple[str, ...]
    banned: tuple[str, ...]  # dotted prefixes: vgpumon.export, textual, pynvml
    allowed_vgpumon: tuple[str, ...] | None = None  # when set: only these vgpumon parts

    def broken_by(self, imported: str) -> bool:
        if any(imported == b or imported.startswith(b + ".") for b in self.banned):
            return True
        if self.allowed_vgpumon is not None and imported.startswith("vgpumon."):
            return imported.split(".")[1] not in self.allowed_vgpumon
        return False


RULES = (
    Rule(
        "producers never import consumers",
        PRODUCERS,
        # nor the metric vocabulary: names are the consumers' business, a snapshot has none
        (*(f"vgpumon.{c}" for c in CONSUMERS), "vgpumon.metrics"),
    ),
    Rule("view never imports textual", ("view",), ("textual", "pynvml")),
    Rule("export never imports collect", ("export",), ("vgpumon.collect",)),
    # The HTTP exporter is handed a feed and plain values (addresses, limits, paths): it reads
    # neither the settings (they read its types, vgpumon.export.address and limits) nor the
    # sources (the agentless hosts' feed lives in sources, their families in metrics).
    Rule(
        "export never imports config or sources",
        ("export",),
        ("vgpumon.config", "vgpumon.sources"),
    ),
    Rule("export (serve) never imports textual", ("export",), ("textual",)),
    Rule(
        "metrics imports only the model",
        ("metrics",),
        ("pynvml", "textual"),
        allowed_vgpumon=METRICS_ALLOWED,
    ),
    Rule(
        "tui imports only model, view, sources and textual",
        ("tui",),
        ("pynvml",),
        allowed_vgpumon=TUI_ALLOWED,
    ),
    # The app imports its screens; they read it through vgpumon.tui.state, never back.
    Rule(
        "the screens and widgets never import the app",
        ("tui.screens", "tui.widgets"),
        ("vgpumon.tui.app",),
    ),
)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute dotted name) of every import in a file, relative ones resolved."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            out.append((node.lineno, target))
            # ``from vgpumon import view`` imports the package vgpumon.view
            out += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return out


def violations(root: Path) -> list[str]:
    """Every broken rule under ``root/vgpumon`` as "file:line: imports X (rule)"."""
    found = []
    for path in sorted((root / "vgpumon").rglob("*.py")):
        parts = path.relative_to(root / "vgpumon").with_suffix("").parts
        dotted = ".".join(p for p in parts if p != "__init__")
        for rule in RULES:
            if not any(dotted == p or dotted.startswith(p + ".") for p in rule.packages):
                continue
            for line, imported in imports_of(path, root):
                if rule.broken_by(imported):
                    where = path.relative_to(root)
                    found.append(f"{where}:{line}: imports {imported} ({rule.name})")
    return found


def test_the_code_keeps_the_import_rules() -> None:
    assert violations(ROOT) == []


PLANTED = [
    ("vgpumon/collect/planted.py", "from vgpumon.export.server import serve\n", 0),
    ("vgpumon/export/planted.py", "from vgpumon.sources.ssh import SshFleet\n", 3),
    ("vgpumon/export/planted.py", "from vgpumon.config.serve import ListenAddress\n", 3),
    ("vgpumon/collect/planted.py", "from vgpumon.metrics.table import FAMILIES\n", 0),
    ("vgpumon/model.py", "def later():\n    import vgpumon.view.format\n", 0),
    ("vgpumon/sim/planted.py", "from ..commands import serve\n", 0),
    ("vgpumon/nvml/planted.py", "from vgpumon import tui\n", 0),
    ("vgpumon/smi/planted.py", "from vgpumon.sources.ssh import SshFleet\n", 0),
    ("vgpumon/view/planted.py", "from textual.widgets import DataTable\n", 1),
    ("vgpumon/export/planted.py", "from vgpumon.collect.sampler import Sampler\n", 2),
    ("vgpumon/export/planted.py", "import textual.app\n", 4),
    ("vgpumon/export/planted.py", "from vgpumon.config.serve import ServeSettings\n", 3),
    ("vgpumon/export/planted.py", "def later():\n    from vgpumon import config\n", 3),
    ("vgpumon/metrics/planted.py", "from vgpumon.config.fields import ExtraField\n", 5),
    ("vgpumon/metrics/planted.py", "from vgpumon.export.server import serve\n", 5),
    ("vgpumon/tui/planted.py", "from vgpumon.collect import take_snapshot\n", 6),
    ("vgpumon/tui/planted.py", "from vgpumon.nvml.session import NvmlSession\n", 6),
    ("vgpumon/tui/planted.py", "from vgpumon.sim import create\n", 6),
    ("vgpumon/tui/planted.py", "import pynvml\n", 6),
    ("vgpumon/tui/screens/planted.py", "from vgpumon.tui.app import VgpumonApp\n", 7),
    ("vgpumon/tui/widgets/planted.py", "def later():\n    from ..app import VgpumonApp\n", 7),
]


@pytest.mark.parametrize(("path", "source", "rule"), PLANTED)
def test_each_rule_fails_on_a_planted_violation(
    tmp_path: Path, path: str, source: str, rule: int
) -> None:
    for package in ("collect", "export", "metrics", "nvml", "sim", "smi", "tui", "view"):
        (tmp_path / "vgpumon" / package).mkdir(parents=True)
        (tmp_path / "vgpumon" / package / "__init__.py").write_text("")
    for package in ("tui/screens", "tui/widgets"):
        (tmp_path / "vgpumon" / package).mkdir(parents=True)
        (tmp_path / "vgpumon" / package / "__init__.py").write_text("")
    (tmp_path / "vgpumon" / "__init__.py").write_text("")
    # Allowed neighbours in the same tree: a clean file must not be reported.
    (tmp_path / "vgpumon" / "tui" / "ok.py").write_text(
        "import textual\nfrom vgpumon.view import rows\nfrom vgpumon.feed import Hub\n"
    )
    (tmp_path / "vgpumon" / "export" / "ok.py").write_text("from vgpumon.model import Snapshot\n")
    assert violations(tmp_path) == []
    (tmp_path / path).write_text(source)
    found = violations(tmp_path)
    assert len(found) >= 1, f"planted {source!r} in {path} was not caught"
    assert all(f"({RULES[rule].name})" in line for line in found), found
    assert all(line.startswith(path) for line in found), found


def cross_imports(root: Path) -> list[str]:
    """bench/ importing anything from tests/, or a test importing a test module."""
    tests_modules = {p.stem for p in (root / "tests").rglob("*.py") if p.stem != "conftest"}
    found = []
    for path in sorted((root / "bench").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if '"tests"' in text and "sys.path" in text:
            found.append(f"{path.relative_to(root)}: puts tests/ on sys.path")
        for line, name in imports_of(path, root):
            if name.split(".")[0] in tests_modules:
                found.append(f"{path.relative_to(root)}:{line}: imports {name} from tests/")
    for path in sorted((root / "tests").rglob("*.py")):
        for line, name in imports_of(path, root):
            if name.split(".")[0].startswith("test_"):
                found.append(f"{path.relative_to(root)}:{line}: imports the test module {name}")
    return found


def test_bench_and_tests_import_no_test_module() -> None:
    assert cross_imports(ROOT) == []


def test_cross_import_check_fails_on_a_planted_import(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "bench").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("X = 1\n")
    (tmp_path / "tests" / "test_b.py").write_text("from test_a import X\n")
    (tmp_path / "bench" / "run.py").write_text("from test_a import X\n")
    found = cross_imports(tmp_path)
    assert any("bench/run.py:1: imports test_a" in f for f in found), found
    assert any("tests/test_b.py:1: imports the test module test_a" in f for f in found), found
