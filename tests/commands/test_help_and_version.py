"""``--help`` and ``--version`` print once, and ``--version`` imports no subcommand (it answered
in 2-3 s when it imported all of them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vgpumon import __version__
from vgpumon.cli import COMMANDS


def _run(*argv: str, python: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *python, "-m", "vgpumon.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_version_prints_once_without_importing_a_command() -> None:
    done = _run("--version", python=("-X", "importtime"))
    assert done.returncode == 0
    assert done.stdout == f"vgpumon {__version__}\n"
    imported = [line.split("|")[-1].strip() for line in done.stderr.splitlines()]
    assert "vgpumon.errors" in imported  # the importtime listing is there
    heavy = [m for m in imported if m.startswith(("vgpumon.commands", "vgpumon.collect"))]
    assert heavy == [], heavy


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_each_help_prints_once(command: str) -> None:
    done = _run(*([command] if command else []), "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("usage: vgpumon") == 1, done.stdout
    assert done.stderr == ""


def test_the_top_level_help_lists_every_command() -> None:
    text = _run("--help").stdout
    for name, (_module, help_text) in COMMANDS.items():
        assert name in text and help_text.split()[0] in text
