"""`serve` loads only what serving needs: no UI, CUDA, load generator or validation modules.

Every module imported stays resident for the exporter's whole life, on every GPU host.
"""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from vgpumon.cli import build_parser
args = build_parser("serve").parse_args(["serve", "--sim", "kvm-vgpu-timesliced"])
import vgpumon.commands.serve as serve_command
settings = serve_command.settings_from_args(args)
from vgpumon.collect.sampler import Sampler
from vgpumon.export.server import process_families, serve
from vgpumon.nvml.loader import open_session
Sampler(open_session(sim=settings.sim), serve_command.sampler_config(settings))
process_families()
print("\\n".join(sorted(sys.modules)))
"""
NOT_FOR_SERVING = (
    "textual",
    "rich",
    "cuda",
    "cupy",
    "torch",
    "numpy",
    "vgpumon.loadgen",
    "vgpumon.validate",
    "vgpumon.view",
    "vgpumon.tui",
    "vgpumon.commands.load",
    "vgpumon.commands.validate",
    "vgpumon.commands.snapshot",
    "vgpumon.commands.record",
    "vgpumon.commands.top",
)


def test_serve_imports_nothing_it_does_not_use() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    modules = result.stdout.split()
    assert "vgpumon.export.server" in modules, "the probe reached the server"
    loaded = [m for m in modules if any(m == p or m.startswith(p + ".") for p in NOT_FOR_SERVING)]
    assert loaded == []
