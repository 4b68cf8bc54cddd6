"""For every built-in scenario, the agentless path (simulated nvidia-smi XML -> parser) and the NVML
path (simulated NVML -> readers) agree on every field nvidia-smi reports (the field lists are in
``tests/smi_helpers.py``: GPU_FIELDS, VGPU_FIELDS, DRIVER_FIELDS).

Both read one simulator at one frozen instant. Scenario faults are removed: a hanging or failing
nvidia-smi is a transport failure of the SSH source, tested in ``tests/sources/test_ssh_source.py``.
"""

from __future__ import annotations

import pytest
from smi_helpers import both_paths, differences

from vgpumon import sim


@pytest.mark.parametrize("name", sorted(sim.builtin_scenarios()))
def test_agentless_path_agrees_with_nvml_path(name: str) -> None:
    via_nvml, via_smi = both_paths(name)
    assert via_smi.gpus, "the agentless path saw no GPU"
    assert differences(via_nvml, via_smi) == {}


def test_the_comparison_covers_vgpu_instances() -> None:
    """A comparison that never saw a vGPU would pass vacuously on the vGPU fields."""
    _, via_smi = both_paths("kvm-vgpu-timesliced")
    assert sum(len(g.vgpu_instances) for g in via_smi.gpus) == 11


def test_the_comparison_covers_guest_licenses() -> None:
    """Inside a vGPU guest nvidia-smi prints the licensed product and its expiry."""
    _, via_smi = both_paths("vgpu-guest")
    (feature,) = via_smi.gpus[0].guest_licenses
    assert (feature.feature, feature.product_name, feature.expiry_status) == (
        "nvidia_rtx",
        "NVIDIA RTX Virtual Workstation",
        "valid",
    )


def test_the_comparison_catches_a_wrong_field() -> None:
    """Planted difference: one vGPU's framebuffer off by 1 MiB must be reported."""
    import dataclasses

    via_nvml, via_smi = both_paths("kvm-vgpu-timesliced")
    g = via_smi.gpus[0]
    v = dataclasses.replace(
        g.vgpu_instances[0],
        framebuffer_used_bytes=g.vgpu_instances[0].framebuffer_used_bytes + 2**20,
    )
    bad = dataclasses.replace(g, vgpu_instances=(v, *g.vgpu_instances[1:]))
    wrong = dataclasses.replace(via_smi, gpus=(bad, *via_smi.gpus[1:]))
    assert list(differences(via_nvml, wrong)) == ["gpu0.vgpu1.framebuffer_used_bytes"]


def test_the_stand_in_nvidia_smi_prints_parseable_reports() -> None:
    """``python -m vgpumon.sim.smi_xml`` is what a test host installs as its nvidia-smi."""
    import subprocess
    import sys

    from vgpumon.smi import parse_reports

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "vgpumon.sim.smi_xml", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    device = run("--sim", "h100-mig-backed-vgpu", "-q", "-x")
    vgpu = run("--sim", "h100-mig-backed-vgpu", "vgpu", "-q", "-x")
    snapshot = parse_reports(device.stdout, vgpu.stdout, timestamp=0)
    assert snapshot.gpus and any(g.vgpu_instances for g in snapshot.gpus)
    bad = run("--sim", "no-such-scenario", "-q", "-x")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
