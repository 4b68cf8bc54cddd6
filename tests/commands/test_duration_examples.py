"""Every duration a command's help shows (examples, defaults, "e.g." lists, example command lines)
is read by the one duration grammar, and each command reads its durations through it: ``vgpumon
usage --range 30d``, the command's own example, was refused as a bad duration."""

from __future__ import annotations

import argparse
import re
import time

import pytest

from vgpumon.cli import COMMANDS, _parse_once, build_parser
from vgpumon.units import DURATION_HELP, parse_duration

_EXAMPLE_LINE = re.compile(
    r"^\s*(vgpumon (?:" + "|".join(map(re.escape, COMMANDS)) + r")\b.*)$", re.M
)
_LIST = re.compile(r"(?:e\.g\.|such as|default)\s+([^;)]+)")


def _sub(command: str) -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    parser = build_parser(command)
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, action.choices[command]


def _duration_actions(sub: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in sub._actions if a.metavar == "DURATION"]


def test_the_grammar_s_own_help_examples_parse() -> None:
    examples = DURATION_HELP.split("such as", 1)[1].replace(",", " ").split()
    assert "1d" in examples and "2w" in examples
    for text in examples:
        parse_duration(text)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_duration_a_help_shows_parses(command: str) -> None:
    """Defaults and the examples in each DURATION flag's help line."""
    _parser, sub = _sub(command)
    for action in _duration_actions(sub):
        if isinstance(action.default, str):
            parse_duration(action.default)
        for listed in _LIST.findall(action.help or ""):
            for word in re.split(r"[\s,]+", listed.strip()):
                if re.fullmatch(r"\d[\w.]*", word):
                    parse_duration(word)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_example_command_line_in_a_help_parses(command: str) -> None:
    """The example lines of a command's help (its description): the flags parse, and each
    duration given reads in the grammar."""
    parser, sub = _sub(command)
    for line in _EXAMPLE_LINE.findall(sub.description or ""):
        argv = line.split()[1:]
        args, unknown = _parse_once(parser, argv)
        assert unknown == [], line
        for action in _duration_actions(sub):
            value = getattr(args, action.dest, None)
            if isinstance(value, str) and value != action.default:
                parse_duration(value)


def test_usage_range_takes_days_and_weeks() -> None:
    from vgpumon.commands.usage import time_range

    parser = build_parser("usage")
    now = time.time()
    for text, days in (("30d", 30), ("7d", 7), ("1w", 7)):
        args, _ = _parse_once(parser, ["usage", "--prometheus", "http://p:9090", "--range", text])
        start, end = time_range(args, now)
        assert end - start == pytest.approx(days * 86400)
