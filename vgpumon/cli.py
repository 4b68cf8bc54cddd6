"""The ``vgpumon`` command line.

Each subcommand lives in its own module under :mod:`vgpumon.commands` and is imported only when it
is run, so ``vgpumon snapshot`` never pays for aiohttp or CUDA imports, and a missing optional
dependency only affects the command that needs it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import NoReturn

from vgpumon import __version__
from vgpumon.errors import VgpumonError

# name -> (module, one-line help). Modules define add_arguments(parser) and run(args) -> int.
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("vgpumon.commands.serve", "run the Prometheus exporter"),
    "snapshot": ("vgpumon.commands.snapshot", "sample once and print the host's GPUs"),
    "scenarios": ("vgpumon.commands.scenarios", "list the built-in simulator scenarios"),
    "record": ("vgpumon.commands.record", "write this host as a simulator scenario file"),
    "load": ("vgpumon.commands.load", "run CUDA load with a known duty cycle and footprint"),
    "validate": ("vgpumon.commands.validate", "run known load and check the readings"),
    "top": ("vgpumon.commands.top", "live terminal view of local or remote GPUs"),
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
    parser = _Parser(
        prog="vgpumon",
        description="Observability for virtualized NVIDIA GPUs (vGPU, MIG, pass-through).",
    )
    parser.add_argument("--version", action="version", version=f"vgpumon {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (_module, help_text) in COMMANDS.items():
        if selected is not None and name != selected:
            sub.add_parser(name, help=help_text, add_help=False)
            continue
        module = _load(name)
        if module is None:
            continue
        p = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    selected = next((a for a in args_list if a in COMMANDS), None)
    try:
        parser = build_parser(selected)
        args = parser.parse_args(args_list)
        module = getattr(args, "_module", None)
        if module is None:
            parser.print_help()
            return 2
        return int(module.run(args) or 0)
    except VgpumonError as err:
        print(f"vgpumon: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
