"""Table-driven validation of scenario files, on PyYAML nodes so every error names its line.

A scenario is checked against declarative :class:`Type` objects. The top-level keys and the per-GPU
keys live in two registries (:data:`TOP_LEVEL`, :data:`GPU`) that other modules add to on import
— the vGPU simulation registers its ``vgpu``/``guest``/``vgpu_events`` sections this way without
touching this file. Keys named in ``reserve()`` are refused with a message that says why, so a file
written for a newer build fails clearly instead of being silently half-simulated.

Parsing returns plain Python values (dicts hold only the keys the file wrote); defaults are applied
by whoever builds runtime objects from them, which keeps model presets mergeable underneath a file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from vgpumon import units, yamlfile
from vgpumon.errors import ConfigError
from vgpumon.sim.patterns import PATTERN_PARAMS, PatternSpec


class Ctx:
    """Where we are: the file label for messages and the line of every key path seen."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: dict[str, int] = {}

    def record(self, path: str, node: yaml.Node) -> None:
        self.lines.setdefault(path, node.start_mark.line + 1)

    def error(self, node: yaml.Node, path: str, message: str) -> ConfigError:
        return ConfigError(
            f"scenario {self.label} line {node.start_mark.line + 1}: {path}: {message}"
        )

    def error_at(self, path: str, message: str) -> ConfigError:
        """An error found after parsing (cross-key checks): cite the nearest known line."""
        probe = path
        while probe:
            if probe in self.lines:
                return ConfigError(
                    f"scenario {self.label} line {self.lines[probe]}: {path}: {message}"
                )
            cut = max(probe.rfind("."), probe.rfind("["))
            probe = probe[:cut] if cut > 0 else ""
        return ConfigError(f"scenario {self.label}: {path}: {message}")


def describe(node: yaml.Node) -> str:
    """How a value is quoted back to the user in "expected X, got Y"."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    if node.tag.endswith(":null"):
        return "nothing"
    if node.tag.endswith(":str"):
        return json.dumps(node.value, ensure_ascii=False)
    return str(node.value)


def scalar_value(node: yaml.Node) -> Any:
    """The Python value of a scalar node (a string for anything YAML cannot type safely)."""
    try:
        # A constructor per value: a constructor memoises every node it constructs, so one kept
        # for the whole module held every scenario's node tree (and the marks of every token)
        # for the life of the process (megabytes for a large scenario).
        return yaml.constructor.SafeConstructor().construct_object(node, deep=True)
    except yaml.YAMLError:
        return node.value


MERGE_TAG = "tag:yaml.org,2002:merge"


def mapping_pairs(node: yaml.MappingNode) -> list[tuple[yaml.Node, yaml.Node, bool]]:
    """(key, value, came from a ``<<`` merge) pairs; the mapping's own keys override merged ones."""
    merged: list[tuple[yaml.Node, yaml.Node, bool]] = []
    own: list[tuple[yaml.Node, yaml.Node, bool]] = []
    for key_node, value_node in node.value:
        if key_node.tag == MERGE_TAG:
            sources = (
                value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            )
            for source in sources:
                if isinstance(source, yaml.MappingNode):
                    merged.extend((k, v, True) for k, v, _ in mapping_pairs(source))
        else:
            own.append((key_node, value_node, False))
    own_names = {k.value for k, _, _ in own if isinstance(k, yaml.ScalarNode)}
    kept: dict[str, tuple[yaml.Node, yaml.Node, bool]] = {}
    for k, v, m in merged:  # in YAML the first merge source that has a key wins
        if isinstance(k, yaml.ScalarNode) and k.value not in own_names and k.value not in kept:
            kept[k.value] = (k, v, m)
    return list(kept.values()) + own


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class Type:
    """One kind of value; ``expected`` is how error messages and docs phrase it."""

    expected = "a value"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> Any:
        raise NotImplementedError

    def fail(self, node: yaml.Node, path: str, ctx: Ctx) -> ConfigError:
        return ctx.error(node, path, f"expected {self.expected}, got {describe(node)}")

    def scalar(self, node: yaml.Node, path: str, ctx: Ctx) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, path, ctx)
        return scalar_value(node)


class Str(Type):
    def __init__(self, expected: str = "a string", check: Callable[[str], bool] | None = None):
        self.expected = expected
        self._check = check

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> str:
        value = self.scalar(node, path, ctx)
        if not isinstance(value, str) or (self._check is not None and not self._check(value)):
            raise self.fail(node, path, ctx)
        return value


class IdOrName(Type):
    """An integer id or a name, looked up later in a table the scenario defines (vGPU types, MIG
    profiles), so either spelling is accepted here."""

    def __init__(self, expected: str):
        self.expected = expected

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> int | str:
        value = self.scalar(node, path, ctx)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise self.fail(node, path, ctx)
        return value


# NVML's widest integers are unsigned 64-bit: no count, id or counter a scenario gives may pass it
# (a larger one would wrap modulo 2^64 in a real driver's answer).
NVML_MAX_INT = 2**64 - 1


class Int(Type):
    def __init__(self, lo: int | None = None, hi: int | None = None, expected: str | None = None):
        if hi is None and lo is not None and lo >= 0:
            hi = NVML_MAX_INT
        self.lo, self.hi = lo, hi
        if expected is None:
            if lo is not None and hi == NVML_MAX_INT:
                expected = f"an integer >= {lo}"
            elif lo is not None and hi is not None:
                expected = f"an integer from {lo} to {hi}"
            elif lo is not None:
                expected = f"an integer >= {lo}"
            else:
                expected = "an integer"
        self.expected = expected

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> int:
        value = self.scalar(node, path, ctx)
        if isinstance(value, str):
            try:
                value = int(value, 0)  # hex masks such as 0x1FF read naturally
            except ValueError:
                raise self.fail(node, path, ctx) from None
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(node, path, ctx)
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            raise self.fail(node, path, ctx)
        return value


class Bool(Type):
    expected = "true or false"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> bool:
        value = self.scalar(node, path, ctx)
        if not isinstance(value, bool):
            raise self.fail(node, path, ctx)
        return value


class Enum(Type):
    """A name from a fixed table (case-insensitive), mapped to its value."""

    def __init__(self, choices: dict[str, Any], allow_values: bool = False):
        self.choices = {k.lower(): v for k, v in choices.items()}
        self.allow_values = allow_values
        self.expected = "one of " + ", ".join(choices)

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> Any:
        value = self.scalar(node, path, ctx)
        if isinstance(value, str) and value.lower() in self.choices:
            return self.choices[value.lower()]
        if self.allow_values and value in self.choices.values() and not isinstance(value, bool):
            return value
        raise self.fail(node, path, ctx)


# name -> (parser from the one units grammar, how the expectation is phrased in messages)
UNIT_PARSERS: dict[str, tuple[Callable[[Any], float], str]] = {
    "size": (lambda v: float(units.parse_size(v)), 'a size like "80GiB"'),
    "duration": (units.parse_duration, 'a duration like "10s" or "200ms"'),
    "watts": (units.parse_watts, 'a power like "700W"'),
    "mhz": (lambda v: units.parse_frequency(v) / 1e6, 'a frequency like "1980MHz"'),
    "celsius": (units.parse_celsius, "a temperature in °C like 56"),
    "ratio": (units.parse_ratio, 'a fraction in [0, 1] or a percentage like "85%"'),
    "percent_open": (units.parse_percent_open, 'a fraction or a percentage like "45%"'),
    "byte_rate": (units.parse_byte_rate, 'a rate like "3MiB/s"'),
    "number": (units.parse_number, "a number"),
}


class Unit(Type):
    """A number with a unit, parsed by the one grammar in :mod:`vgpumon.units`.

    ``lo``/``hi`` bound the value in the unit's base (bytes, seconds, watts, MHz, °C): a value
    outside physical sense is refused with its line rather than wrapped or clamped later.
    """

    def __init__(self, unit: str, lo: float | None = None, hi: float | None = None):
        self.unit = unit
        self.convert, self.expected = UNIT_PARSERS[unit]
        self.lo, self.hi = lo, hi

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> float:
        value = self.scalar(node, path, ctx)
        try:
            result = self.convert(value)
        except units.UnitError as err:
            if err.syntax:
                raise self.fail(node, path, ctx) from None
            raise ctx.error(node, path, f"{err.reason}, got {describe(node)}") from None
        except (ValueError, TypeError):
            raise self.fail(node, path, ctx) from None
        if self.lo is not None and result < self.lo:
            raise ctx.error(node, path, f"must be at least {self.lo:g}, got {describe(node)}")
        if self.hi is not None and result > self.hi:
            raise ctx.error(node, path, f"must be at most {self.hi:g}, got {describe(node)}")
        return result


class Size(Unit):
    """Bytes; the grammar caps every size at 2^50 (docs/design.md, rule 9)."""

    def __init__(self, lo: float | None = None, hi: float | None = None) -> None:
        super().__init__("size", lo, hi)

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> int:
        return int(super().parse(node, path, ctx))


class Seq(Type):
    def __init__(self, item: Type, min_len: int = 0, one_or_many: bool = False):
        self.item = item
        self.min_len = min_len
        self.one_or_many = one_or_many  # a single item may be written without the list
        self.expected = f"a list of {item.expected}"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> list[Any]:
        if not isinstance(node, yaml.SequenceNode):
            if self.one_or_many and not isinstance(node, yaml.MappingNode):
                return [self.item.parse(node, path, ctx)]
            raise self.fail(node, path, ctx)
        if len(node.value) < self.min_len:
            raise ctx.error(node, path, f"expected at least {self.min_len} entries")
        out = []
        for i, child in enumerate(node.value):
            child_path = f"{path}[{i}]"
            ctx.record(child_path, child)
            out.append(self.item.parse(child, child_path, ctx))
        return out


@dataclass(frozen=True)
class Key:
    """One key of a mapping: its type, whether it must be there, and its documentation."""

    type: Type
    doc: str = ""
    default: str = ""
    required: bool = False


class KeyRegistry:
    """The keys a mapping accepts, open to registration by other modules."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.keys: dict[str, Key] = {}
        self.reserved: dict[str, str] = {}

    def register(self, name: str, key: Key, *, replace: bool = False) -> None:
        if name in self.keys and not replace:
            raise RuntimeError(f"scenario key {self.where}.{name} registered twice")
        self.keys[name] = key
        self.reserved.pop(name, None)

    def reserve(self, name: str, purpose: str) -> None:
        if name not in self.keys:
            self.reserved[name] = purpose


class Map(Type):
    """A mapping with known keys; unknown keys are errors (with a "did you mean")."""

    def __init__(
        self,
        keys: dict[str, Key] | KeyRegistry,
        expected: str = "a mapping",
        check: Callable[[dict[str, Any], yaml.Node, str, Ctx], None] | None = None,
    ):
        self._keys = keys
        self.expected = expected
        self._check = check

    @property
    def keys(self) -> dict[str, Key]:
        return self._keys.keys if isinstance(self._keys, KeyRegistry) else self._keys

    @property
    def reserved(self) -> dict[str, str]:
        return self._keys.reserved if isinstance(self._keys, KeyRegistry) else {}

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> dict[str, Any]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, ctx)
        keys = self.keys
        out: dict[str, Any] = {}
        for key_node, value_node, _merged in mapping_pairs(node):
            name = scalar_value(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(name, str):
                raise ctx.error(key_node, path or "(top level)", "keys must be strings")
            key_path = join(path, name)
            if name in out:
                raise ctx.error(key_node, key_path, "duplicate key")
            if name not in keys:
                raise ctx.error(key_node, key_path, self._unknown(name, path))
            ctx.record(key_path, key_node)
            out[name] = keys[name].type.parse(value_node, key_path, ctx)
        for name, key in keys.items():
            if key.required and name not in out:
                raise ctx.error(node, join(path, name), "required key is missing")
        if self._check is not None:
            self._check(out, node, path, ctx)
        return out

    def _unknown(self, name: str, path: str) -> str:
        if name in self.reserved:
            return f"reserved for {self.reserved[name]}, which this build does not simulate"
        # The same wording as the serve config and the web-config (docs/design.md, rule 8).
        return yamlfile.unknown_key(name, path or "the top level", sorted(self.keys))


class OneOf(Type):
    """The first alternative whose shape (scalar, list, mapping) matches the node."""

    def __init__(self, *alternatives: tuple[type, Type], expected: str):
        self.alternatives = alternatives
        self.expected = expected

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> Any:
        for node_type, t in self.alternatives:
            if isinstance(node, node_type):
                return t.parse(node, path, ctx)
        raise self.fail(node, path, ctx)


class PatternOf(Type):
    """A value that may change over time: a plain value, or ``{pattern: square, ...}``."""

    def __init__(self, unit: str, lo: float | None = None, hi: float | None = None):
        self.value_type = Unit(unit, lo, hi)
        self.expected = f"{self.value_type.expected} or a pattern mapping"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> PatternSpec:
        if isinstance(node, yaml.ScalarNode):
            return PatternSpec.constant(self.value_type.parse(node, path, ctx))
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, ctx)
        raw = {
            scalar_value(k): (k, v)
            for k, v, _ in mapping_pairs(node)
            if isinstance(k, yaml.ScalarNode)
        }
        if "pattern" not in raw:
            raise ctx.error(node, join(path, "pattern"), "a pattern mapping needs a 'pattern' key")
        kind_node = raw["pattern"][1]
        kind = scalar_value(kind_node) if isinstance(kind_node, yaml.ScalarNode) else None
        if kind not in PATTERN_PARAMS:
            raise ctx.error(
                kind_node,
                join(path, "pattern"),
                f"expected one of {', '.join(PATTERN_PARAMS)}, got {describe(kind_node)}",
            )
        params_spec = PATTERN_PARAMS[kind]
        keys: dict[str, Key] = {"pattern": Key(Str())}
        for param, (how, default) in params_spec.items():
            keys[param] = Key(self._param_type(how), required=default is None)
        keys["jitter"] = Key(Unit(self.value_type.unit))
        keys["jitter_interval"] = Key(Unit("duration", lo=1e-3))
        keys["min"] = Key(Unit(self.value_type.unit))
        keys["max"] = Key(Unit(self.value_type.unit))
        if kind == "steps":
            keys["steps"] = Key(Seq(_StepType(self.value_type), min_len=1), required=True)
        parsed = Map(keys).parse(node, path, ctx)
        params: dict[str, float] = {}
        for param, (_how, default) in params_spec.items():
            value = parsed.get(param, default)
            params[param] = float(value) if value is not None else 0.0
        for param in ("period", "duration", "interval"):
            if param in params and params[param] <= 0:
                raise ctx.error_at(join(path, param), "must be greater than zero")
        steps: tuple[tuple[float, float], ...] = ()
        if kind == "steps":
            steps = tuple(sorted(parsed["steps"], key=lambda s: s[0]))
        return PatternSpec(
            kind=kind,
            params=params,
            steps=steps,
            jitter=float(parsed.get("jitter", 0.0)),
            jitter_interval=float(parsed.get("jitter_interval", 1.0)),
            lo=parsed.get("min"),
            hi=parsed.get("max"),
        )

    def _param_type(self, how: str) -> Type:
        if how == "value":
            return self.value_type
        if how == "duration":
            return Unit("duration")
        if how == "ratio":
            return Unit("ratio")
        return Bool()


class _StepType(Type):
    """``[at, value]`` or ``{at: 10s, value: 0.5}``."""

    def __init__(self, value_type: Type):
        self.value_type = value_type
        self.expected = "a step [at, value] or {at, value}"

    def parse(self, node: yaml.Node, path: str, ctx: Ctx) -> tuple[float, float]:
        if isinstance(node, yaml.SequenceNode) and len(node.value) == 2:
            at = Unit("duration").parse(node.value[0], path, ctx)
            return at, self.value_type.parse(node.value[1], path, ctx)
        if isinstance(node, yaml.MappingNode):
            d = Map(
                {
                    "at": Key(Unit("duration"), required=True),
                    "value": Key(self.value_type, required=True),
                }
            ).parse(node, path, ctx)
            return d["at"], d["value"]
        raise self.fail(node, path, ctx)


def compose(text: str, label: str) -> yaml.Node:
    """YAML text to a node tree through the shared hardened composer (depth cap, duplicate keys,
    alias budget); syntax errors become one-line ConfigErrors with the line."""
    node = yamlfile.compose(text, f"scenario {label}")
    if node is None:
        raise ConfigError(f"scenario {label}: the file is empty")
    return node


def node_of(value: Any) -> yaml.Node:
    """Python data to a node tree, so built-in presets go through the same checks as files."""
    node = yaml.compose(yaml.safe_dump(value, sort_keys=False), Loader=yaml.SafeLoader)
    if node is None:
        raise ValueError("empty data")
    return node


TOP_LEVEL = KeyRegistry("(top level)")
GPU = KeyRegistry("gpus[]")

TOP_LEVEL.reserve("vgpu_events", "vGPU instance churn (vGPUs created and destroyed over time)")
GPU.reserve("vgpu", "host vGPU simulation (vGPU types, instances, scheduler)")
GPU.reserve("guest", "the vGPU guest view and guest license features")
