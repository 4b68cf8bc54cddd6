"""Shared pieces of the enricher tests: waiting on a background thread, optional bindings.

The enrichers work on their own threads, so tests wait for an outcome (a refresh, an event) with a
generous bound instead of sleeping a fixed time; the bound only limits how long a broken build
takes to fail, it is never a timing assertion.
"""

from __future__ import annotations

import time
from collections.abc import Callable

WAIT_SECONDS = 30.0


def wait_for(condition: Callable[[], object], what: str, timeout: float = WAIT_SECONDS) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
