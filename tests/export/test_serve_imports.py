"""`serve` loads only what serving needs: no UI, CUDA, load generator or validation modules, and
nothing of a feature that is off (SSH, libvirt, the kubelet).

Every module imported stays resident for the exporter's whole life, on every GPU host
(docs/exporter.md, "Memory"). Two checks: the pieces ``serve`` is made of, imported as ``run``
does; and a real ``serve`` in a fresh interpreter, run until it has answered a scrape and a
snapshot request, then stopped with SIGTERM. An import added anywhere on that path (at module
level, or inside a function serving calls) fails them.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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

# Run serve in this interpreter until it has answered /metrics with GPU series and
# /api/v1/snapshot, stop it the way an operator does (SIGTERM), print what was imported.
RUN = r"""
import json, os, signal, sys, threading, time, urllib.request

port = int(sys.argv[1])


def drive():
    base = f"http://127.0.0.1:{port}"
    give_up = time.monotonic() + 120
    while time.monotonic() < give_up:
        try:
            if b"vgpumon_gpu_up" in urllib.request.urlopen(base + "/metrics", timeout=10).read():
                urllib.request.urlopen(base + "/api/v1/snapshot", timeout=10).read()
                break
        except OSError:
            pass
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGTERM)


threading.Thread(target=drive, daemon=True).start()
from vgpumon.cli import main

status = main(["serve", "--sim", "vgpu-churn", "--web.listen-address", f"127.0.0.1:{port}"])
print(json.dumps({"status": status, "modules": sorted(sys.modules)}))
"""

NOT_FOR_SERVING = (
    "aiohttp",  # the HTTP client of remote sources and `validate --url`; serve speaks h11
    "multidict",
    "yarl",
    "textual",  # the TUI (`top`)
    "rich",  # tables and progress of `snapshot` and `validate`
    "cuda",  # the load generator (cuda-core, cuda-bindings)
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
    "vgpumon.commands.scenarios",
)
# What the features a plain `serve` leaves off need: agentless hosts (--ssh.targets), VM names
# (--libvirt.uri), pods (--kubernetes.socket).
NOT_WHEN_OFF = (
    "asyncssh",
    "defusedxml",  # nvidia-smi XML of agentless hosts
    "vgpumon.smi",
    "vgpumon.sources.ssh",  # the SSH source (its flags' parsing is vgpumon.sources.ssh_targets)
    "vgpumon.sources.remote",
    "libvirt",
    "vgpumon.collect.enrich.libvirt",
    "vgpumon.collect.enrich.domains",
    "grpc",
    "google.protobuf",
    "vgpumon.collect.enrich.kubelet",
    "vgpumon.collect.enrich.kubeapi",
    "vgpumon.collect.enrich.pods",
    "vgpumon.collect.enrich.podresources",
)


def unneeded(modules: list[str]) -> list[str]:
    banned = NOT_FOR_SERVING + NOT_WHEN_OFF
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in banned)]


def test_the_check_names_what_it_should() -> None:
    assert unneeded(["rich", "rich.console", "textual.app", "vgpumon.sources.ssh"]) == [
        "rich",
        "rich.console",
        "textual.app",
        "vgpumon.sources.ssh",
    ]
    assert unneeded(["richtext", "vgpumon.sources.ssh_targets", "vgpumon.collect.enrich"]) == []


def test_serve_imports_nothing_it_does_not_use() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    modules = result.stdout.split()
    assert "vgpumon.export.server" in modules, "the probe reached the server"
    assert unneeded(modules) == []


# The real-host path with no config file: what `run` builds before serving, with no simulator
# (whose scenarios are YAML) and no --config.
REAL_HOST_PROBE = """
import sys
from vgpumon.cli import build_parser
args = build_parser("serve").parse_args(["serve"])
import vgpumon.commands.serve as serve_command
settings = serve_command.settings_from_args(args)
from vgpumon.collect.sampler import Sampler
from vgpumon.export.server import process_families, serve
from vgpumon.nvml.loader import resolve_module
from vgpumon.nvml.session import NvmlSession
Sampler(NvmlSession(*resolve_module(None, None)), serve_command.sampler_config(settings),
        enrichers=serve_command.sampler_recipe(settings).enrichers())
serve_command.serve_arguments(settings, args)
process_families()
print("\\n".join(sorted(sys.modules)))
"""


def test_serve_without_a_config_file_loads_no_yaml() -> None:
    """PyYAML (about 0.9 MB resident) is for config files and scenarios, not for serving."""
    result = subprocess.run(
        [sys.executable, "-c", REAL_HOST_PROBE],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    modules = result.stdout.split()
    assert "vgpumon.export.server" in modules, "the probe reached the server"
    assert [m for m in modules if m == "yaml" or m.startswith(("yaml.", "vgpumon.yamlfile"))] == []
    assert "difflib" not in modules


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def imported_by_any_process(stderr: str) -> list[str]:
    """Every module an interpreter imported with ``PYTHONPROFILEIMPORTTIME`` set (which each
    process of ``serve``, the sampler process too, writes to the stderr they share)."""
    return [
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line and not line.endswith("package")
    ]


def test_a_running_serve_imports_nothing_it_does_not_use() -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(free_port())],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["status"] == 0, done.stderr[-3000:]
    serving = report["modules"]
    everywhere = imported_by_any_process(done.stderr)
    # It really served: the server here; the sampler and the simulator here (the first cycle) and
    # in the sampler process (a vGPU host's sampler runs in one, vgpumon.collect.placement).
    for needed in ("vgpumon.export.server", "h11", "vgpumon.collect.sampler", "vgpumon.sim"):
        assert needed in serving
    assert everywhere.count("vgpumon.collect.sampler") == 2, "a sampler process ran too"
    assert unneeded(serving) == [], "imported by serve although its feature is off"
    assert unneeded(everywhere) == [], "imported by its sampler process although it is off"
