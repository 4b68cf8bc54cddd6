"""The readers against a real GPU and driver, checked against nvidia-smi's own view.

Skipped cleanly without a GPU (tests/conftest.py) and, for the comparisons, without nvidia-smi.
"""

from __future__ import annotations

import asyncio
import csv
import io
import shutil
import subprocess
import time

import pytest

from vgpumon.collect import Sampler, SamplerConfig, take_snapshot
from vgpumon.collect.xid import SERVICE, XidWatcher
from vgpumon.model import Snapshot
from vgpumon.nvml.loader import open_session

pytestmark = pytest.mark.gpu

MIB = 1024 * 1024


def _smi(*args: str) -> str:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not installed")
    return subprocess.run(
        ["nvidia-smi", *args], capture_output=True, text=True, check=True, timeout=120
    ).stdout


@pytest.fixture(scope="module")
def snapshot() -> Snapshot:
    return asyncio.run(take_snapshot(open_session(), interval=0.5))


def test_identity_matches_nvidia_smi(snapshot: Snapshot) -> None:
    out = _smi(
        "--query-gpu=name,uuid,memory.total,driver_version,mig.mode.current",
        "--format=csv,noheader,nounits",
    )
    rows = [[c.strip() for c in row] for row in csv.reader(io.StringIO(out)) if row]
    assert len(rows) == len(snapshot.gpus)
    for name, uuid, memory_total, driver, mig in rows:
        gpu = snapshot.gpu(uuid)
        assert gpu is not None, f"{uuid} missing from the snapshot"
        assert gpu.up
        assert gpu.name == name
        assert gpu.memory.total_bytes is not None
        assert abs(gpu.memory.total_bytes / MIB - float(memory_total)) <= 1
        assert snapshot.driver.driver_version == driver
        expected_mig = {"enabled": True, "disabled": False}.get(mig.lower())
        assert gpu.mig_mode_current == expected_mig


def _virtualization_modes() -> dict[str, str]:
    """PCI bus id -> 'Virtualization Mode' from ``nvidia-smi -q``, normalised for comparison."""
    modes: dict[str, str] = {}
    bus_id = None
    for line in _smi("-q").splitlines():
        if line.startswith("GPU ") and ":" in line:
            bus_id = line.split(None, 1)[1].strip().lower()
        elif line.strip().startswith("Virtualization Mode") and bus_id is not None:
            value = line.split(":", 1)[1].strip()
            modes[bus_id] = value.lower().replace("-", "").replace(" ", "")
    return modes


def test_virtualization_mode_matches_nvidia_smi(snapshot: Snapshot) -> None:
    modes = _virtualization_modes()
    assert modes, "nvidia-smi -q printed no Virtualization Mode"
    for gpu in snapshot.gpus:
        assert gpu.pci_bus_id is not None
        expected = modes.get(gpu.pci_bus_id.lower())
        assert expected is not None, f"no nvidia-smi entry for {gpu.pci_bus_id}"
        assert gpu.virtualization_mode is not None
        assert gpu.virtualization_mode.replace("_", "") == expected


def test_core_readings_present(snapshot: Snapshot) -> None:
    for gpu in snapshot.gpus:
        assert gpu.power_watts is not None and gpu.power_watts > 0
        assert gpu.temperatures.gpu_celsius is not None
        assert gpu.clocks.sm_hertz is not None and gpu.clocks.sm_hertz > 1e8
        assert gpu.pcie.link_generation is not None
        assert gpu.processes is not None
        if gpu.architecture in ("hopper", "blackwell") and not gpu.mig_mode_current:
            # Two cycles 0.5 s apart: GPM values exist and are ratios.
            assert gpu.gpm is not None and gpu.gpm.interval_seconds is not None
            assert gpu.gpm.sm_active is not None and 0.0 <= gpu.gpm.sm_active <= 1.0
        if gpu.mig_mode_current:
            assert gpu.utilization.gpu is None  # not asked on MIG-enabled GPUs
        else:
            assert gpu.utilization.gpu is not None


def test_absent_calls_counted_once_and_xid_watcher_idle() -> None:
    async def cycles() -> tuple[list[Snapshot], int, int]:
        sampler = Sampler(open_session(), SamplerConfig(deadline_seconds=10.0))
        try:
            snaps = []
            for _ in range(4):
                snaps.append(await sampler.cycle())
                await asyncio.sleep(0.3)
            watcher = sampler.services[SERVICE]
            assert isinstance(watcher, XidWatcher)
            before = watcher.waits
            await asyncio.sleep(1.5)
            return snaps, before, watcher.waits
        finally:
            sampler.close()

    def absent(s: Snapshot) -> dict[tuple[str, str], int]:
        return {
            (e.function, e.error): e.count
            for e in s.nvml_errors
            if e.error in ("not_supported", "no_permission", "function_not_found")
        }

    started = time.monotonic()
    snaps, waits_before, waits_after = asyncio.run(cycles())
    snap = snaps[-1]
    n_gpus = len(snap.gpus)
    assert snap.health.up and not snap.health.wedged
    # Unsupported calls are paid for once: no count grows once every reader has run twice.
    assert absent(snaps[1]) == absent(snaps[3])
    for error in snap.nvml_errors:
        if error.error in ("not_supported", "no_permission", "function_not_found") and (
            "Vgpu" in error.function or "vgpu" in error.function
        ):
            assert error.count <= n_gpus, error
    # nvmlEventSetWait blocks up to 500 ms per call: at most a few waits in 1.5 s, never a spin.
    assert waits_after - waits_before <= 6
    if not any(e.function == "nvmlDeviceRegisterEvents" for e in snap.nvml_errors):
        assert waits_after > waits_before  # registered: the watcher is really waiting
    assert time.monotonic() - started < 60
