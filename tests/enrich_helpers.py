"""Shared pieces of the enricher tests: waiting on a background thread, optional bindings.

The enrichers work on their own threads, so tests wait for an outcome (a refresh, an event) with a
generous bound instead of sleeping a fixed time; the bound only limits how long a broken build
takes to fail, it is never a timing assertion.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from types import ModuleType

import pytest

WAIT_SECONDS = 30.0


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT_SECONDS) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def optional_binding(name: str, extra: str) -> ModuleType:
    """Import an optional extra's module; skip without it, except in CI, where it must be there."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("CI"):
            raise AssertionError(
                f"CI must install the [{extra}] extra ({name} is missing)"
            ) from None
        pytest.skip(f"needs the [{extra}] extra ({name})", allow_module_level=True)
