"""NVML fields an operator adds to the exporter (``fields:`` in the serve config).

vgpumon exports what its readers know. A site that wants one more NVML field value (a counter a
new driver added, a field vgpumon has no family for) declares it, as it would in dcgm-exporter's
counters file::

    fields:
      - id: NVML_FI_DEV_PCIE_REPLAY_ROLLOVER_COUNTER   # or the number, 95
        name: vgpumon_gpu_pcie_replay_rollovers_total
        type: counter
        help: PCIe replay counter rollovers.
      - id: 187
        name: vgpumon_gpu_power_min_limit_watts
        type: gauge
        help: Lowest power limit that can be set.
        scale: 0.001                                   # NVML gives mW
      - {id: 140, scope_id: 0, name: vgpumon_gpu_nvlink0_raw_tx_bytes_total, type: counter,
         help: Raw bytes sent on link 0., scale: 1024}    # per link: scope_id is the link

An id is an integer or a constant name of the installed pynvml (``NVML_FI_*``), resolved when the
file is read. Every entry is checked when the file is read, so a bad one stops ``serve`` (or is
refused by a reload) with one line naming the entry and its line: the name keeps the naming rules
(:mod:`vgpumon.metrics.naming`: ``vgpumon_`` prefix, snake case, base units, ``_total`` exactly on
counters) and takes no name of the metric table nor another entry's (in either exposition
format), and no field (id and scope) is declared twice.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from vgpumon.errors import ConfigError
from vgpumon.metrics.extra_fields import ExtraField
from vgpumon.metrics.naming import base_name, name_problem

if TYPE_CHECKING:
    import yaml

# The config file's nodes come from vgpumon.yamlfile, which this module imports only when it
# parses them: a serve without a config file never loads PyYAML.

MAX_FIELDS = 256  # more would make each cycle's batched NVML call large for no known use
MAX_FIELD_ID = 2**32 - 1  # NVML's fieldId and scopeId are unsigned ints
CONSTANT_PREFIX = "NVML_FI_"
MAX_CONSTANT = "NVML_FI_MAX"  # one past the last id pynvml knows, not a field
ENTRY_KEYS = ("id", "name", "type", "help", "scale", "scope_id")
REQUIRED_KEYS = ("id", "name", "type", "help")


def table_names() -> frozenset[str]:
    """Every name the metric table uses, in text format and in OpenMetrics (counters' families
    drop ``_total`` there), which a declared field must not take."""
    from vgpumon.metrics.table import FAMILIES

    return frozenset({f.name for f in FAMILIES} | {f.base_name for f in FAMILIES})


def parse_fields(
    node: yaml.Node, label: str, taken: Collection[str] | None = None
) -> tuple[ExtraField, ...]:
    """The ``fields`` list of a config file; ``taken``: names already in use (default: the
    metric table's)."""
    import yaml

    from vgpumon import yamlfile

    if yamlfile.is_null(node):
        return ()
    if not isinstance(node, yaml.SequenceNode):
        raise ConfigError(f"{label} line {yamlfile.line(node)}: fields must be a list of entries")
    if len(node.value) > MAX_FIELDS:
        raise ConfigError(
            f"{label} line {yamlfile.line(node)}: fields: at most {MAX_FIELDS} entries, "
            f"got {len(node.value)}"
        )
    reserved = table_names() if taken is None else frozenset(taken)
    names: dict[str, str] = {}  # name in either format -> the entry that has it
    keys: dict[tuple[int, int], str] = {}  # (id, scope; NVML reads no scope as 0) -> entry
    out = []
    for index, entry_node in enumerate(node.value):
        entry = _Entry(entry_node, label, index)
        spec = entry.spec()
        own = tuple(dict.fromkeys((spec.name, base_name(spec.name, spec.type))))  # text, OM
        for name in own:
            if name in reserved:
                raise entry.error("name", f"{name} is a name of vgpumon's metric table")
            if name in names:
                raise entry.error("name", f"{name} is already taken by {names[name]}")
        key = (spec.field_id, spec.scope_id or 0)
        if key in keys:
            raise entry.error(
                "id", f"field {key[0]} (scope {key[1]}) is already declared by {keys[key]}"
            )
        names.update(dict.fromkeys(own, entry.where))
        keys[key] = entry.where
        out.append(spec)
    return tuple(out)


class _Entry:
    """One entry while it is checked: its nodes by key, and how errors name it."""

    def __init__(self, node: yaml.Node, label: str, index: int) -> None:
        from vgpumon import yamlfile

        self.node, self.label = node, label
        self.where = f"fields[{index}]"
        self.pairs = yamlfile.mapping(node, label, self.where, ENTRY_KEYS)  # or one-line error
        name = self.value("name") if "name" in self.pairs else None
        if isinstance(name, str) and name:
            self.where += f" ({name})"
        missing = [k for k in REQUIRED_KEYS if k not in self.pairs]
        if missing:
            raise self._error(node, f"missing {', '.join(missing)}")

    def value(self, key: str) -> Any:
        from vgpumon import yamlfile

        return yamlfile.to_python(self.pairs[key][1], self.label)

    def _error(self, node: yaml.Node, message: str) -> ConfigError:
        from vgpumon import yamlfile

        return ConfigError(f"{self.label} line {yamlfile.line(node)}: {self.where}: {message}")

    def error(self, key: str, message: str) -> ConfigError:
        return self._error(self.pairs[key][1], f"{key}: {message}")

    def spec(self) -> ExtraField:
        field_type = self.value("type")
        if field_type not in ("gauge", "counter"):
            raise self.error("type", f"expected gauge or counter, got {field_type!r}")
        name = self.value("name")
        if not isinstance(name, str):
            raise self.error("name", f"expected a metric name, got {name!r}")
        problem = name_problem(name, field_type)
        if problem is not None:
            raise self.error("name", f"{name!r}: {problem}")
        text = self.value("help")
        if not isinstance(text, str) or not text.strip() or "\0" in text:
            raise self.error("help", f"expected a non-empty line of text, got {text!r}")
        try:
            field_id = resolve_field_id(self.value("id"))
        except ValueError as err:
            raise self.error("id", str(err)) from None
        return ExtraField(
            field_id=field_id,
            name=name,
            type=field_type,
            help=text,
            scale=self._scale(),
            scope_id=self._scope(),
        )

    def _scale(self) -> float:
        if "scale" not in self.pairs:
            return 1.0
        value = self.value("scale")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error("scale", f"expected a number, got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise self.error("scale", f"must be a finite number above 0, got {value!r}")
        return float(value)

    def _scope(self) -> int | None:
        if "scope_id" not in self.pairs:
            return None
        value = self.value("scope_id")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FIELD_ID:
            raise self.error(
                "scope_id", f"expected an integer from 0 to {MAX_FIELD_ID}, got {value!r}"
            )
        return value


def resolve_field_id(value: Any) -> int:
    """An NVML field id from an integer or a ``NVML_FI_*`` constant name of the installed pynvml
    (what the simulator uses too); ValueError with the reason otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not 0 < value <= MAX_FIELD_ID:
            raise ValueError(f"field ids are from 1 to {MAX_FIELD_ID}, got {value}")
        return value
    if not isinstance(value, str) or not value.startswith(CONSTANT_PREFIX):
        raise ValueError(f"expected a field id number or an {CONSTANT_PREFIX}* name, got {value!r}")
    import pynvml  # only when a name is used: reading numbers needs no NVML binding

    resolved = getattr(pynvml, value, None) if value != MAX_CONSTANT else None
    if isinstance(resolved, int) and not isinstance(resolved, bool) and resolved > 0:
        return resolved
    known = [n for n in vars(pynvml) if n.startswith(CONSTANT_PREFIX) and n != MAX_CONSTANT]
    import difflib  # only for this hint

    close = difflib.get_close_matches(value, known, n=1)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    raise ValueError(f"{value} is not a field id of the installed pynvml{hint}")
