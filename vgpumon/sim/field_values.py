"""The ``field_values`` GPU key: answers for any NVML field id, given by the scenario.

The simulator models the field ids vgpumon's own readers use (:mod:`vgpumon.sim.api.fields`).
An operator may declare any other id in the serve config (``fields:``); to test such a config
without a GPU, a scenario gives the values itself::

    gpus:
      - model: h100-sxm-80gb
        field_values:
          94: 3                # PCIe replay counter: overrides the modelled value
          250: 12.5            # any id, even one the installed pynvml does not name
          112: not_supported   # this GPU answers NOT_SUPPORTED (3) for it

A given value wins over the modelled one for every scope id, and is answered even for ids past
what the simulated driver knows. Whole numbers are answered as unsigned (or, when negative,
signed) 64-bit integers, other numbers as doubles, the value types real drivers use.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from vgpumon.sim.schema import GPU, Ctx, Key, Type, describe, join, scalar_value

NOT_SUPPORTED = "not_supported"
MAX_FIELD_ID = 2**32 - 1  # fieldId is an unsigned int
INT_RANGE = (-(2**63), 2**64 - 1)  # signed and unsigned long long
# A field's answer: a number, or None for NOT_SUPPORTED.
FieldAnswer = int | float | None


class FieldValues(Type):
    """``{field id: number or not_supported}``."""

    expected = "a mapping of NVML field id to a number or not_supported"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> dict[int, FieldAnswer]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, ctx)
        out: dict[int, FieldAnswer] = {}
        for key_node, value_node in node.value:
            fid = scalar_value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if isinstance(fid, bool) or not isinstance(fid, int) or not 0 < fid <= MAX_FIELD_ID:
                raise ctx.error(
                    key_node,
                    path,
                    f"field ids are integers from 1 to {MAX_FIELD_ID}, got {describe(key_node)}",
                )
            key_path = join(path, str(fid))
            if fid in out:
                raise ctx.error(key_node, key_path, "duplicate field id")
            ctx.record(key_path, key_node)
            out[fid] = _answer(value_node, key_path, ctx)
        return out


def _answer(node: yaml.Node, path: str, ctx: Ctx) -> FieldAnswer:
    value: Any = scalar_value(node) if isinstance(node, yaml.ScalarNode) else None
    if value == NOT_SUPPORTED:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise ctx.error(node, path, f"out of NVML's 64-bit range, got {describe(node)}")
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise ctx.error(
        node, path, f"expected a finite number or {NOT_SUPPORTED}, got {describe(node)}"
    )


GPU.register(
    "field_values",
    Key(
        FieldValues(),
        "answers for any field id: a number, or not_supported (see docs/scenarios.md)",
        "none",
    ),
)
