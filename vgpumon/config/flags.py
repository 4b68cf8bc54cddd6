"""Flags and environment variables from the settings table (:mod:`vgpumon.config.table`).

:func:`add_flags` adds a row's flags to a parser (with its old spellings hidden, each saying
once that it is deprecated); :func:`flag_values` and :func:`env_values` read the values given,
checked by the row's check and named by the flag or variable.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from vgpumon import logs
from vgpumon.config.table import (
    GROUP_HELP,
    OLD_COLLECTORS_ENV,
    SETTINGS,
    Setting,
    collector_key,
    env_of,
    flag_of,
    no_flag,
    shown_default,
)
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
        self.append: bool = kwargs.pop("append", False)
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
        value = self.value if self.nargs == 0 or values is None else values
        if self.append:  # a repeatable flag: its old spelling adds to the new one's list
            value = [*(getattr(namespace, self.dest, None) or ()), value]
        setattr(namespace, self.dest, value)


def _help(row: Setting, env: bool | Collection[str]) -> str:
    reads = env if isinstance(env, bool) else row.name in env
    where = f"; ${row.env}" if reads else ""
    return f"{row.help} (default {shown_default(row)}{where})"


def _add_old(group: Any, spelling: str, new: str, dest: str, **kwargs: Any) -> None:
    """A hidden old spelling that does what ``new`` does and says so once."""
    group.add_argument(
        spelling, dest=dest, action=_Deprecated, new=new, help=argparse.SUPPRESS, **kwargs
    )


def add_flags(
    parser: argparse.ArgumentParser,
    rows: Iterable[Setting],
    *,
    env: bool | Collection[str] = True,
    groups: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The rows' flags, each group of rows under its title in ``--help``; returns the groups.

    ``env``: the command reads the rows' variables too (``serve``; or the rows of these names),
    so help names them.
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
            action: Any = argparse.BooleanOptionalAction if row.negatable else "store_const"
            extra: dict[str, Any] = {} if row.negatable else {"const": True}
            group.add_argument(
                row.flag, dest=row.name, action=action, default=None, help=_help(row, env), **extra
            )
            for old in row.old_flags:
                _add_old(group, old, row.flag, row.name, nargs=0, value=True)
                if row.negatable:
                    _add_old(group, no_flag(old), no_flag(row.flag), row.name, nargs=0, value=False)
            continue
        extra = {}
        if row.kind == "list":
            extra["action"] = "append"
        elif row.const is not None:
            extra.update(nargs="?", const=row.const)
        group.add_argument(
            row.flag, dest=row.name, metavar=row.metavar, help=_help(row, env), **extra
        )
        for old in row.old_flags:
            old_extra: dict[str, Any] = {"metavar": row.metavar}
            if row.kind == "list":
                old_extra["append"] = True
            elif row.const is not None:
                old_extra.update(nargs="?", value=row.const)
            _add_old(group, old, row.flag, row.name, **old_extra)
    return groups


COLLECTOR_DEST = "collector:"


def add_collector_flags(group: Any, readers: Iterable[tuple[str, bool]], *, env: bool) -> None:
    """``--collector.NAME`` / ``--no-collector.NAME`` for each (name, on by default) collector."""
    for name, default_on in readers:
        key = collector_key(name)
        where = f"; ${env_of(key)}" if env else ""
        state = "on" if default_on else "off"
        group.add_argument(
            flag_of(key),
            dest=COLLECTOR_DEST + name,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=f"the {name} collector (default {state}{where})",
        )
        old = f"--{key}"  # the name as the registry spells it, before flags had dashes
        if old != flag_of(key):
            _add_old(group, old, flag_of(key), COLLECTOR_DEST + name, nargs=0, value=True)
            _add_old(
                group, no_flag(old), no_flag(flag_of(key)), COLLECTOR_DEST + name, nargs=0,
                value=False,
            )  # fmt: skip


def collector_flag_values(args: argparse.Namespace) -> tuple[tuple[str, bool], ...]:
    """The collectors switched on or off on the command line, in no particular order."""
    return tuple(
        (dest[len(COLLECTOR_DEST) :], bool(value))
        for dest, value in vars(args).items()
        if dest.startswith(COLLECTOR_DEST) and value is not None
    )


def flag_values(args: argparse.Namespace, rows: Iterable[Setting]) -> dict[str, Any]:
    """The rows' flags given on the command line, checked, by settings field."""
    out: dict[str, Any] = {}
    for row in rows:
        value = getattr(args, row.name, None)
        if value is not None:
            out[row.name] = row.check(value, row.flag)
    return out


def _switch(text: str, where: str) -> bool:
    word = text.strip().lower()
    if word in TRUE:
        return True
    if word in FALSE:
        return False
    raise ConfigError(f"{where}: expected true or false, got {text!r}")


def env_value(row: Setting, text: str, name: str | None = None) -> Any:
    """A variable's text as the row's check takes it: switches true/false, lists by commas."""
    if row.kind == "switch":
        return _switch(text, name or row.env)
    if row.kind == "list":
        return [item.strip() for item in text.split(",") if item.strip()]
    return text


def _old_env(environ: Mapping[str, str], new: str, old: str) -> str | None:
    """The text of an old variable (saying once that it is deprecated), or None when unset."""
    text = environ.get(old)
    if not text:
        return None
    if environ.get(new):
        raise ConfigError(f"{old} and {new} are both set: {old} is the old name of {new}")
    deprecated(old, new)
    return text


def env_values(environ: Mapping[str, str], rows: Iterable[Setting]) -> dict[str, Any]:
    """The rows' ``VGPUMON_*`` variables that are set (an empty one counts as unset), checked;
    an old variable is read too, with one deprecation line."""
    out: dict[str, Any] = {}
    for row in rows:
        name, text = row.env, environ.get(row.env)
        for old in row.old_envs:
            old_text = _old_env(environ, row.env, old)
            if old_text is not None:
                name, text = old, old_text
        if text:
            out[row.name] = row.check(env_value(row, text, name), name)
    return out


def env_collectors(
    environ: Mapping[str, str], known: Iterable[str]
) -> tuple[tuple[str, bool], ...]:
    """``VGPUMON_COLLECTOR_NAME=false`` for each collector; the old ``VGPUMON_COLLECTORS`` map
    (``pcie=false,nvlink=true``) first, so a new variable has the last word."""
    names = list(known)
    out = list(_old_env_collectors(environ, names))
    own = {env_of(collector_key(name)): name for name in names}
    prefix = env_of(collector_key(""))
    for variable in sorted(environ):
        if not variable.startswith(prefix) or not environ[variable]:
            continue
        if variable in own:
            out.append((own[variable], _switch(environ[variable], variable)))
        elif variable not in _ROW_ENVS:
            raise ConfigError(
                f"{variable}: no collector {variable.removeprefix(prefix).lower()!r} "
                f"(known: {', '.join(sorted(names))})"
            )
    return tuple(out)


_ROW_ENVS = frozenset(row.env for row in SETTINGS)


def _old_env_collectors(environ: Mapping[str, str], names: list[str]) -> list[tuple[str, bool]]:
    text = environ.get(OLD_COLLECTORS_ENV)
    if not text:
        return []
    deprecated(OLD_COLLECTORS_ENV, env_of(collector_key("NAME")))
    out = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ConfigError(
                f"{OLD_COLLECTORS_ENV}: expected NAME=true or NAME=false, got {item!r}"
            )
        if name not in names:
            raise ConfigError(
                f"{OLD_COLLECTORS_ENV}: unknown collector {name!r} "
                f"(known: {', '.join(sorted(names))})"
            )
        out.append((name, _switch(value, f"{OLD_COLLECTORS_ENV}: {name}")))
    return out
