"""Shared test setup: the ``gpu`` marker skips cleanly on machines without an NVIDIA GPU."""

from __future__ import annotations

import functools

import pytest


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
