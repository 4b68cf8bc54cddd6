"""List the simulator's built-in scenarios, print one, or check a scenario file.

Any of the listed names (or a path to your own YAML file) can be passed to ``--sim``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vgpumon.errors import ConfigError
from vgpumon.sim import builtin_scenarios, load_scenario
from vgpumon.sim.scenario import builtin_text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--show", metavar="NAME", help="print the YAML of a built-in scenario")
    group.add_argument(
        "--check",
        metavar="PATH",
        help="validate a scenario file and summarize it (exit 2 on errors)",
    )


def run(args: argparse.Namespace) -> int:
    if args.show:
        text = builtin_text(args.show)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return 0
    if args.check:
        # --check takes a file: a missing one is said as such, not as an unknown scenario name.
        if args.check not in builtin_scenarios() and not Path(args.check).exists():
            raise ConfigError(f"scenario file {args.check} does not exist")
        scenario = load_scenario(args.check)
        models = sorted({g.model or g.name for g in scenario.gpus})
        mig = sum(1 for g in scenario.gpus if g.mig_enabled)
        print(
            f"{scenario.name}: ok - {len(scenario.gpus)} GPU(s) ({', '.join(models)}), "
            f"{mig} with MIG, {len(scenario.faults)} fault(s)"
        )
        return 0
    scenarios = builtin_scenarios()
    width = max((len(name) for name in scenarios), default=0)
    for name, description in scenarios.items():
        print(f"{name:<{width}}  {description}")
    return 0
