"""Scenario files: built-in ones by name, files by path, YAML text; each parsed against the keys of
:mod:`vgpumon.sim.scenario_keys` and built by :mod:`vgpumon.sim.scenario_build`."""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

import yaml

from vgpumon import yamlfile
from vgpumon.errors import ConfigError
from vgpumon.sim import registry
from vgpumon.sim.scenario_build import build_scenario
from vgpumon.sim.scenario_keys import DOCUMENT
from vgpumon.sim.scenario_specs import Scenario
from vgpumon.sim.schema import Ctx, compose

_BUILTIN_PACKAGE = "vgpumon.sim"


def _builtin_dir() -> Any:
    return resources.files(_BUILTIN_PACKAGE).joinpath("scenarios")


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in _builtin_dir().iterdir() if p.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    if name not in builtin_names():
        known = ", ".join(builtin_names())
        raise ConfigError(f"unknown built-in scenario {name!r}; built-in scenarios: {known}")
    return str(_builtin_dir().joinpath(f"{name}.yaml").read_text(encoding="utf-8"))


def builtin_scenarios() -> dict[str, str]:
    """name -> one-line description, sorted by name."""
    out = {}
    for name in builtin_names():
        try:
            data = yaml.safe_load(builtin_text(name)) or {}
        except yaml.YAMLError:
            data = {}
        description = str(data.get("description", "")).strip().splitlines()
        out[name] = description[0] if description else ""
    return out


def parse_scenario(text: str, label: str = "<string>", source: str | None = None) -> Scenario:
    """A scenario from YAML text; ``label`` names it in error messages."""
    registry.load_modules()
    ctx = Ctx(label)
    doc = DOCUMENT.parse(compose(text, label), "", ctx)
    default_name = label[:-5] if label.endswith(".yaml") else label
    return build_scenario(doc, ctx, default_name, source or label, text)


def load_scenario(name_or_path: str) -> Scenario:
    """A built-in scenario by name, or a scenario file by path."""
    if name_or_path in builtin_names():
        return parse_scenario(
            builtin_text(name_or_path), f"{name_or_path}.yaml", f"builtin:{name_or_path}"
        )
    if "\0" in name_or_path or os.path.lexists(name_or_path):
        # Regular files only, size cap, UTF-8: the shared hardened reader.
        text = yamlfile.read_text(name_or_path, "scenario", yamlfile.SCENARIO_MAX_BYTES)
        return parse_scenario(text, os.path.basename(name_or_path), name_or_path)
    known = ", ".join(builtin_names())
    raise ConfigError(
        f"unknown scenario {name_or_path!r}: not a built-in ({known}) and no such file"
    )
