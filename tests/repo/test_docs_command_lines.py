"""Every ``vgpumon COMMAND --flag`` the docs, the packaging and the dashboards show uses a flag that
command has, by its current name (an old spelling works, but a reader copies what the docs say)."""

from __future__ import annotations

import argparse
import functools
import re
from pathlib import Path

from vgpumon.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
SOURCES = (
    "README.md",
    "CONTRIBUTING.md",
    "docs/*.md",
    "packaging/**/*",
    "dashboards/grafana/*.json",
    "dashboards/vgpumon_dashboards/*.py",
    "vgpumon/**/*.py",
    "bench/*.py",
    "bench/device/*",
)
# A command line: "vgpumon COMMAND" and what follows on its line (continuation lines joined),
# up to the end of an inline code span or a sentence's closing parenthesis.
_COMMAND = re.compile(r"\bvgpumon (" + "|".join(map(re.escape, COMMANDS)) + r")\b([^`\n\"')]*)")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9.\-]*[a-z0-9]")


@functools.cache
def flags_of(command: str) -> tuple[frozenset[str], frozenset[str]]:
    """(current flags, old spellings) of a command."""
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    current: set[str] = set()
    old: set[str] = set()
    for action in sub.choices[command]._actions:
        (old if action.help == argparse.SUPPRESS else current).update(action.option_strings)
    return frozenset(current), frozenset(old - current)


def _files() -> list[Path]:
    seen: dict[Path, None] = {}
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and "results" not in path.parts:
                seen[path] = None
    return list(seen)


def bad_flags(text: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", text)
    out = []
    for command, rest in _COMMAND.findall(joined):
        current, old = flags_of(command)
        for flag in _FLAG.findall(rest):
            if flag in old:
                out.append(f"vgpumon {command} {flag}: an old spelling")
            elif flag not in current and flag not in ("--help", "--version"):
                out.append(f"vgpumon {command} {flag}: no such flag")
    return out


def test_every_command_line_shown_uses_current_flags() -> None:
    problems = []
    for path in _files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        problems += [f"{path.relative_to(ROOT)}: {p}" for p in bad_flags(text)]
    assert problems == []


def test_the_check_finds_an_old_and_an_unknown_flag() -> None:
    assert bad_flags("run `vgpumon serve --listen :9100 --bogus-flag`") == [
        "vgpumon serve --listen: an old spelling",
        "vgpumon serve --bogus-flag: no such flag",
    ]
    assert bad_flags("vgpumon serve --sim x \\\n  --web.listen-address :1") == []
