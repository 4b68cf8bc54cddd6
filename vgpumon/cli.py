"""The ``vgpumon`` command line.

Each subcommand lives in its own module under :mod:`vgpumon.commands` and is imported only when it
is run, so ``vgpumon snapshot`` never pays for aiohttp or CUDA imports, and a missing optional
dependency only affects the command that needs it.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import io
import os
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from vgpumon import __version__
from vgpumon.errors import VgpumonError, one_line

# name -> (module, one-line help). Modules define add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("vgpumon.commands.serve", "run the Prometheus exporter"),
    "snapshot": ("vgpumon.commands.snapshot", "sample once and print the host's GPUs"),
    "scenarios": ("vgpumon.commands.scenarios", "list the built-in simulator scenarios"),
    "record": ("vgpumon.commands.record", "write this host as a simulator scenario file"),
    "load": ("vgpumon.commands.load", "run CUDA load with a known duty cycle and footprint"),
    "validate": ("vgpumon.commands.validate", "run known load and check the readings"),
    "top": ("vgpumon.commands.top", "live terminal view of local or remote GPUs"),
    "node-features": (
        "vgpumon.commands.node_features",
        "write this node's GPU facts as a node-feature-discovery feature file",
    ),
    "check": ("vgpumon.commands.check", "check license, GPUs and Xids (node-problem-detector)"),
    "usage": ("vgpumon.commands.usage", "GPU usage per tenant, VM, pod or namespace, for invoices"),
}


def _load(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as exc:
        # Only a command whose own module is absent is hidden; a missing dependency of an existing
        # command is reported when that command runs.
        if exc.name == COMMANDS[name][0]:
            return None
        raise


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line (the CLI's error rule), not usage + error."""

    def error(self, message: str) -> NoReturn:
        where = self.prog.partition(" ")[2]
        prefix = f"{where}: " if where else ""
        raise VgpumonError(f"{prefix}{message} (see '{self.prog} --help')")


def build_parser(selected: str | None = None) -> argparse.ArgumentParser:
    """The parser with the flags of ``selected`` (the other commands are names with their help
    line: ``vgpumon --version`` and ``vgpumon --help`` import no command module)."""
    parser = _Parser(
        prog="vgpumon",
        description="Observability for virtualized NVIDIA GPUs (vGPU, MIG, pass-through).",
    )
    parser.add_argument("--version", action="version", version=f"vgpumon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (_module, help_text) in COMMANDS.items():
        if name != selected:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        module = _load(name)
        if module is None:
            continue
        p = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


# Errors writing our own output (a full disk, a closed descriptor): the environment's failure, not
# a bug, so one line and a non-zero status rather than a traceback.
OUTPUT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EBADF, errno.EIO, errno.EFBIG, errno.EDQUOT, errno.EROFS}
)
EXIT_OUTPUT_FAILED = 1


class _ClosedOutput(io.TextIOBase):
    """Stands in for ``sys.stdout`` when descriptor 1 is closed (``vgpumon record >&-``): writing
    fails like a write to a closed descriptor, so the handler below reports it in one line."""

    @property
    def buffer(self) -> _ClosedOutput:
        return self

    def write(self, _text: object) -> int:
        raise OSError(errno.EBADF, "standard output is closed")

    def flush(self) -> None:
        """Nothing was written, so nothing to flush (also what runs at interpreter exit)."""


def _silence_stdout() -> None:
    """Point descriptor 1 at /dev/null so the interpreter's final flush of whatever is still
    buffered cannot fail a second time (the recipe of Python's signal documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def _parse_once(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[argparse.Namespace, list[str]]:
    """One parse of the command line (help, version and deprecation lines are printed once),
    with required options checked after unknown flags: a mistyped flag is the mistake to name,
    not the required option it may have hidden."""
    required = [
        action
        for group in parser._actions  # argparse keeps its subcommands only here
        if isinstance(group, argparse._SubParsersAction)
        for sub in group.choices.values()
        for action in sub._actions
        if action.required
    ]
    for action in required:
        action.required = False
    try:
        args, unknown = parser.parse_known_args(argv)
    finally:
        for action in required:
            action.required = True
    if not unknown:
        missing = [a for a in required if getattr(args, a.dest, None) is None]
        if missing:
            names = ", ".join("/".join(a.option_strings) or a.dest for a in missing)
            command = getattr(args, "command", None)
            raise VgpumonError(
                f"{command}: the following arguments are required: {names} "
                f"(see 'vgpumon {command} --help')"
            )
    return args, unknown


def _run(argv: list[str]) -> int:
    selected = next((a for a in argv if a in COMMANDS), None)
    parser = build_parser(selected)
    args, unknown = _parse_once(parser, argv)
    if unknown:
        # argparse leaves a subcommand's unknown flags to the top level, whose error would point
        # to 'vgpumon --help'; the subcommand's own help is the one that lists its flags.
        command = getattr(args, "command", None) or selected
        prog = f"vgpumon {command}" if command else "vgpumon"
        where = f"{command}: " if command else ""
        raise VgpumonError(
            f"{where}unrecognized arguments: {' '.join(unknown)} (see '{prog} --help')"
        )
    module = getattr(args, "_module", None)
    if module is None:
        parser.print_help()
        return 2
    status = int(module.run(args) or 0)
    sys.stdout.flush()  # a full disk must fail here, inside the handler, not at exit
    return status


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if sys.stdout is None:
        sys.stdout = _ClosedOutput()
    try:
        return _run(args_list)
    except VgpumonError as err:
        print(f"vgpumon: error: {one_line(err, limit=2000)}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (``vgpumon snapshot | head``): like other CLI tools, not an error.
        _silence_stdout()
        return 0
    except SystemExit as exc:
        # rich turns a broken pipe into SystemExit(1) raised while handling the BrokenPipeError.
        if isinstance(exc.__context__, BrokenPipeError):
            _silence_stdout()
            return 0
        raise
    except OSError as err:
        if err.errno not in OUTPUT_ERRNOS:
            raise
        _silence_stdout()
        print(f"vgpumon: error: cannot write output: {err.strerror or err}", file=sys.stderr)
        return EXIT_OUTPUT_FAILED


if __name__ == "__main__":
    sys.exit(main())
