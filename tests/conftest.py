"""Shared test setup: the ``gpu`` marker skips cleanly on machines without an NVIDIA GPU; the
hypothesis profiles (bounded in every run, long behind the ``fuzz`` marker) and their tally."""

from __future__ import annotations

import collections
import functools
import os

import pytest
from hypothesis import HealthCheck, settings

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
# Every run (CI included) tries this many inputs per fuzz property: bounded and deterministic
# enough for a 2-core CI, no per-example deadline (a loaded machine must not fail a test).
settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=_HEALTH, database=None
)
# ``pytest -m fuzz`` runs the same properties much longer (VGPUMON_FUZZ_EXAMPLES per property).
settings.register_profile(
    "fuzz",
    max_examples=int(os.environ.get("VGPUMON_FUZZ_EXAMPLES", "5000")),
    deadline=None,
    suppress_health_check=_HEALTH,
    database=None,
)
settings.load_profile("ci")

FUZZ_TALLY: collections.Counter[str] = collections.Counter()


@pytest.fixture(scope="session")
def fuzz_tally() -> collections.Counter[str]:
    """Inputs tried per property and outcome ("scenario accepted", "cli refused", ...)."""
    return FUZZ_TALLY


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FUZZ_TALLY:
        terminalreporter.section("fuzz inputs tried")
        for key, count in sorted(FUZZ_TALLY.items()):
            terminalreporter.write_line(f"{key}: {count}")


@functools.cache
def real_gpu_count() -> int:
    """Number of GPUs real NVML sees here; 0 when there is no driver or no pynvml."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - any failure means "no GPU here"
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # noqa: BLE001
        return 0
    finally:
        pynvml.nvmlShutdown()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if any(item.get_closest_marker("gpu") for item in items) and real_gpu_count() == 0:
        skip = pytest.mark.skip(reason="needs a real NVIDIA GPU and driver")
        for item in items:
            if item.get_closest_marker("gpu"):
                item.add_marker(skip)
