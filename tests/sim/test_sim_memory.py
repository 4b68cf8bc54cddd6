"""What the simulator keeps: a scenario's parse leaves no YAML behind, constant loads share one
function, and shares are computed, not cached (the same answer every time they are asked)."""

from __future__ import annotations

import gc
import math
import types

import yaml

import vgpumon.sim as sim
from vgpumon.sim.patterns import PatternSpec
from vgpumon.sim.scheduler import scheduler_of
from vgpumon.sim.vgpu import host_of


def yaml_nodes() -> int:
    gc.collect()
    return sum(isinstance(o, yaml.Node) for o in gc.get_objects())


def test_a_parsed_scenario_keeps_no_yaml_nodes() -> None:
    before = yaml_nodes()
    module = sim.create("kvm-vgpu-timesliced")
    assert module.scenario.gpus, "parsed"
    assert yaml_nodes() == before, "the node tree (and every token's marks) was kept"


def test_constant_patterns_share_one_function_per_value_and_clamp() -> None:
    a = PatternSpec.constant(0.0).build(1, "gpus[0].load.memory", 0.0, 1.0)
    b = PatternSpec.constant(0.0).build(2, "gpus[7].load.encoder", 0.0, 1.0)
    assert a is b
    assert a(0.0) == 0.0 and a(1e6) == 0.0
    assert PatternSpec.constant(1.7).build(1, "x", 0.0, 1.0)(3.0) == 1.0, "clamped to hi"
    assert PatternSpec.constant(-2.0).build(1, "x", 0.0)(3.0) == 0.0, "clamped to lo"
    negative_zero = PatternSpec.constant(-0.0).build(1, "x")
    assert math.copysign(1.0, negative_zero(0.0)) == -1.0, "-0.0 is not 0.0's function"
    jittered = PatternSpec("constant", {"value": 0.5}, jitter=0.1).build(1, "x", 0.0, 1.0)
    assert jittered is not PatternSpec.constant(0.5).build(1, "x", 0.0, 1.0)


def test_shares_are_the_same_each_time_they_are_asked() -> None:
    module = sim.create("kvm-vgpu-timesliced")
    gpu = next(g for g in module._core.gpus if host_of(g) is not None)
    sched = scheduler_of(gpu)
    assert sched is not None
    t = module._core.t()
    first = sched.shares(t)
    assert first, "the scenario has time-sliced vGPUs"
    assert sched.shares(t) == first


def reachable(root: object) -> list[object]:
    """Every object ``root`` holds, directly or not (classes and modules not followed)."""
    seen = {id(root)}
    out = [root]
    stack = [root]
    while stack:
        for ref in gc.get_referents(stack.pop()):
            if id(ref) in seen or isinstance(ref, (type, types.ModuleType, types.FunctionType)):
                continue
            seen.add(id(ref))
            out.append(ref)
            stack.append(ref)
    return out


def test_a_parsed_scenario_keeps_no_line_of_each_key() -> None:
    """The loader notes the line of every key path to cite it in errors; once the scenario is
    built, nothing reads that map, and on a host of many vGPUs it was thousands of strings held
    by the serving process for its whole life (docs/exporter.md, "Memory")."""
    scenario = sim.create("kvm-vgpu-timesliced").scenario
    line_maps = [
        o
        for o in reachable(scenario)
        if isinstance(o, dict) and "gpus[0]" in o and isinstance(o["gpus[0]"], int)
    ]
    assert line_maps == []
