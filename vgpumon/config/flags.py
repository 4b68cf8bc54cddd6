"""Flags and environment variables from the settings table (:mod:`vgpumon.config.table`).

:func:`add_flags` adds a row's flags to a parser (with its old spellings hidden, each saying
once that it is deprecated); :func:`flag_values` and :func:`env_values` read the values given,
checked by the row's check and named by the flag or variable.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vgpumon import logs
from vgpumon.config.table import COLLECTORS_ENV, GROUP_HELP, Setting, shown_default
from vgpumon.errors import ConfigError

TRUE = ("true", "1", "yes", "on")
FALSE = ("false", "0", "no", "off")


def deprecated(old: str, new: str, where: str = "") -> None:
    """The one line an old spelling gets: on stderr while flags parse (before logging is set
    up), a log record in the chosen format after (a config file re-read on SIGHUP)."""
    prefix = f"{where}: " if where else ""
    message = f"{prefix}{old} is deprecated; use {new}"
    if logs.configured():
        logging.getLogger("vgpumon.config").warning("%s", message)
    else:
        sys.stderr.write(f"vgpumon: warning: {message}\n")


class _Deprecated(argparse.Action):
    """An old flag: does what its new spelling does, and says so once per command line."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        self.new: str = kwargs.pop("new")
        self.value: Any = kwargs.pop("value", None)
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        warned: set[str] = namespace.__dict__.setdefault("_deprecated_warned", set())
        if option_string not in warned:
            warned.add(option_string or "")
            deprecated(option_string or "", self.new)
        setattr(namespace, self.dest, self.value if self.nargs == 0 else values)


def _help(row: Setting, env: bool) -> str:
    where = f"; ${row.env}" if env else ""
    return f"{row.help} (default {shown_default(row)}{where})"


def add_flags(
    parser: argparse.ArgumentParser,
    rows: Iterable[Setting],
    *,
    env: bool = True,
    groups: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The rows' flags, each group of rows under its title in ``--help``; returns the groups.

    ``env``: the command reads the rows' variables too (``serve``), so help names them.
    """
    groups = {} if groups is None else groups
    exclusive: dict[str, Any] = {}
    for row in rows:
        group = groups.get(row.group)
        if group is None:
            group = groups[row.group] = parser.add_argument_group(
                row.group, GROUP_HELP.get(row.group)
            )
        if row.exclusive is not None:
            if row.exclusive not in exclusive:
                exclusive[row.exclusive] = group.add_mutually_exclusive_group()
            group = exclusive[row.exclusive]
        if row.kind == "switch":
            if row.negatable:
                group.add_argument(
                    *row.flags,
                    dest=row.name,
                    action=argparse.BooleanOptionalAction,
                    default=None,
                    help=_help(row, env),
                )
            else:
                group.add_argument(
                    *row.flags,
                    dest=row.name,
                    action="store_const",
                    const=True,
                    help=_help(row, env),
                )
            for old in row.old_flags:
                pairs = [(old, row.flags[0], True)]
                if row.negatable:
                    pairs.append((_no(old), _no(row.flags[0]), False))
                for spelling, new, value in pairs:
                    group.add_argument(
                        spelling,
                        dest=row.name,
                        action=_Deprecated,
                        nargs=0,
                        new=new,
                        value=value,
                        help=argparse.SUPPRESS,
                    )
            continue
        extra: dict[str, Any] = {}
        if row.kind == "list":
            extra["action"] = "append"
        elif row.const is not None:
            extra.update(nargs="?", const=row.const)
        group.add_argument(
            *row.flags, dest=row.name, metavar=row.metavar, help=_help(row, env), **extra
        )
        for old in row.old_flags:
            group.add_argument(
                old,
                dest=row.name,
                action=_Deprecated,
                new=row.flags[0],
                metavar=row.metavar,
                help=argparse.SUPPRESS,
            )
    return groups


def _no(flag: str) -> str:
    return "--no-" + flag.removeprefix("--")


def flag_values(args: argparse.Namespace, rows: Iterable[Setting]) -> dict[str, Any]:
    """The rows' flags given on the command line, checked, by settings field."""
    out: dict[str, Any] = {}
    for row in rows:
        value = getattr(args, row.name, None)
        if value is not None:
            out[row.name] = row.check(value, row.flags[0])
    return out


def env_value(row: Setting, text: str) -> Any:
    """A variable's text as the row's check takes it: switches true/false, lists by commas."""
    if row.kind == "switch":
        word = text.strip().lower()
        if word in TRUE:
            return True
        if word in FALSE:
            return False
        raise ConfigError(f"{row.env}: expected true or false, got {text!r}")
    if row.kind == "list":
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def env_values(environ: Mapping[str, str], rows: Iterable[Setting]) -> dict[str, Any]:
    """The rows' ``VGPUMON_*`` variables that are set (an empty one counts as unset), checked."""
    out: dict[str, Any] = {}
    for row in rows:
        text = environ.get(row.env)
        if text:
            out[row.name] = row.check(env_value(row, text), row.env)
    return out


def env_collectors(
    environ: Mapping[str, str], known: Iterable[str]
) -> tuple[tuple[str, bool], ...]:
    """``VGPUMON_COLLECTORS=pcie=false,nvlink=true``: the file's ``collectors`` map, as text."""
    text = environ.get(COLLECTORS_ENV)
    if not text:
        return ()
    names = set(known)
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ConfigError(f"{COLLECTORS_ENV}: expected NAME=true or NAME=false, got {item!r}")
        if name not in names:
            raise ConfigError(
                f"{COLLECTORS_ENV}: unknown collector {name!r} (known: {', '.join(sorted(names))})"
            )
        word = value.strip().lower()
        if word not in TRUE + FALSE:
            raise ConfigError(f"{COLLECTORS_ENV}: {name}: expected true or false, got {value!r}")
        out.append((name, word in TRUE))
    return tuple(out)
