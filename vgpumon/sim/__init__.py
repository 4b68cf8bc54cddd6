"""The simulated NVML: a drop-in stand-in for ``pynvml`` driven by scenario files.

``create("baremetal-8xh100")`` returns a module-like :class:`SimNvml` whose functions have pynvml's
names, parameters, structure classes, exceptions and sampling semantics, so every vgpumon code path
runs without a GPU. See ``docs/scenarios.md`` for the scenario format.
"""

from __future__ import annotations

from vgpumon.sim.clock import Clock, ManualClock, WallClock
from vgpumon.sim.core import SimCore, SimNvml
from vgpumon.sim.scenario import builtin_scenarios, load_scenario, parse_scenario
from vgpumon.sim.scenario_specs import Scenario

__all__ = [
    "Clock",
    "ManualClock",
    "Scenario",
    "SimNvml",
    "WallClock",
    "builtin_scenarios",
    "create",
    "load_scenario",
    "parse_scenario",
]


def create(name_or_path: str | Scenario, clock: Clock | None = None) -> SimNvml:
    """A fresh simulated NVML for a built-in scenario name, a scenario file, or a parsed Scenario.

    Scenario time starts now (``clock.now()``); the clock defaults to the wall clock.
    """
    scenario = name_or_path if isinstance(name_or_path, Scenario) else load_scenario(name_or_path)
    return SimNvml(SimCore(scenario, clock if clock is not None else WallClock()))
