"""Flags and set-up shared by the commands that read NVML."""

from __future__ import annotations

import argparse

from vgpumon.nvml.loader import ENV_MODULE, open_session
from vgpumon.nvml.session import NvmlSession


def add_nvml_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("NVML source")
    src = group.add_mutually_exclusive_group()
    src.add_argument(
        "--sim",
        metavar="SCENARIO",
        help="use the simulated NVML with a built-in scenario name or a scenario file "
        "('vgpumon scenarios' lists them)",
    )
    src.add_argument(
        "--nvml-module",
        metavar="NAME",
        help=f"import this module instead of pynvml (also ${ENV_MODULE})",
    )


def session_from_args(args: argparse.Namespace, *, init_attempts: int = 1) -> NvmlSession:
    return open_session(
        sim=getattr(args, "sim", None),
        module_name=getattr(args, "nvml_module", None),
        init_attempts=init_attempts,
    )
