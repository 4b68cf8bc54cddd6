"""What a missing tool or optional extra means: a skip that says why on a developer's machine, a
failure under ``CI=true`` (``.ci/run`` installs everything, so a missing piece there is a broken
CI, not a reason to test less).

An extra counts as missing however its import fails: not installed (ImportError), or installed
but refusing to load, as the committed pod-resources stubs do under a grpcio older than the one
that generated them (RuntimeError) or an older protobuf (its VersionError).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """``CI=true`` (any case), as CI services and ``.ci/run``'s callers set it."""
    return os.environ.get("CI", "").strip().lower() == "true"


def missing(what: str, *, module_level: bool = False) -> NoReturn:
    """Skip, with ``what`` as the reason; under CI=true, fail instead."""
    if in_ci():
        pytest.fail(f"CI must have it: {what}")
    pytest.skip(what, allow_module_level=module_level)


def optional_binding(name: str, extra: str) -> ModuleType:
    """Import an optional extra's module; skip without it (module level too), fail in CI."""
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any failed import: the extra is not usable here
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
        missing(f"needs the [{extra}] extra ({name}: {reason})", module_level=True)


def tool(name: str, package: str) -> str:
    """The path of a program the tests run (``promtool``); skip without it, fail in CI."""
    import shutil

    found = shutil.which(name)
    if found is None:
        missing(f"{name} not installed ({package}; .ci/run installs it)")
    return found


def promtool() -> str:
    return tool("promtool", "Debian package prometheus")
