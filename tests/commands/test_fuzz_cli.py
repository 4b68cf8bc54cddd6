"""Fuzzing the command line: any argument list is parsed and checked, or refused in one line.

Each example draws a command, then flags of that command (harvested from its own parser, so a new
flag is fuzzed without touching this file) with values from the edge-leaning strategies, parses
them and runs the command's own argument checks (settings, sampler config, load spec, validate
plan) without starting anything. Property: the result is a value or a
:class:`~vgpumon.errors.VgpumonError` of one line, never another exception.
"""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable
from typing import Any

import pytest
from fuzz_strategies import one_line_or_loaded, texts, unit_strings
from hypothesis import given, settings
from hypothesis import strategies as st

from vgpumon.cli import build_parser
from vgpumon.commands import load, serve, snapshot, validate
from vgpumon.errors import VgpumonError

CHECKS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "serve": serve.settings_from_args,
    "snapshot": snapshot.config_from_args,
    "record": snapshot.config_from_args,
    "load": load.spec_from_args,
    "validate": validate.plan_from_args,
}
NEVER = {"-h", "--help", "--version"}  # they print and exit by design


def _flags(command: str) -> dict[str, bool]:
    """Flag -> whether it takes a value, from the command's own parser."""
    parser = build_parser(command)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        flag: action.nargs != 0
        for action in sub.choices[command]._actions
        for flag in action.option_strings
        if flag not in NEVER
    }


FLAGS = {command: _flags(command) for command in CHECKS}
flag_values = st.one_of(
    unit_strings,
    st.integers(-5, 10**6).map(str),
    st.sampled_from(["0", "1", "0.5", "50%", "1G", "512MiB", "100us", "2m", "127.0.0.1:0", ":0"]),
    texts,
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A command and up to six flags, each with a value when it takes one; now and then a stray
    word or a flag without its value, so argparse's own refusals are fuzzed too."""
    command = draw(st.sampled_from(sorted(CHECKS)))
    argv = [command]
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.integers(0, 9)) == 0:
            argv.append(draw(texts))
            continue
        flag = draw(st.sampled_from(sorted(FLAGS[command])))
        argv.append(flag)
        if FLAGS[command][flag] and draw(st.integers(0, 19)) > 0:
            argv.append(draw(flag_values))
    return [a for a in argv if a not in NEVER]


def check(argv: list[str], tally: collections.Counter[str]) -> None:
    def parse_and_check() -> None:
        args = build_parser(argv[0]).parse_args(argv)
        CHECKS[argv[0]](args)

    tally[f"cli {one_line_or_loaded(parse_and_check, VgpumonError)}"] += 1


@given(argv=command_lines())
def test_command_lines_parse_or_refuse_in_one_line(
    argv: list[str], fuzz_tally: collections.Counter[str]
) -> None:
    check(argv, fuzz_tally)


@pytest.mark.fuzz
@settings(settings.get_profile("fuzz"))
@given(argv=command_lines())
def test_command_lines_long(argv: list[str], fuzz_tally: collections.Counter[str]) -> None:
    check(argv, fuzz_tally)
