"""`vgpumon check`: node-problem-detector's custom-plugin protocol (exit 0 OK, 1 problem, 2 unknown;
one line on standard output) on the local (simulated) NVML and on a running exporter's snapshot."""

from __future__ import annotations

import dataclasses
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from vgpu_helpers import CONTENTION, sampled

from vgpumon.cli import main
from vgpumon.model import CollectorStatus, Gpu, SamplerHealth, Snapshot, to_json

LOST = """
name: lost-now
description: GPU 1 of 2 is lost from the start
seed: 7
gpus:
  - model: h100-sxm-80gb
    count: 2
faults:
  - kind: gpu_lost
    gpus: [1]
    from: 0s
"""
XID = """
name: xid-now
description: GPU 0 reports Xid 79 (fallen off the bus) 300 ms after start
seed: 8
gpus:
  - model: h100-sxm-80gb
    xid_events:
      - {at: 300ms, xid: 79}
  - model: h100-sxm-80gb
"""


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["check", *args])
    out = capsys.readouterr().out
    assert out.count("\n") == 1, f"one line, got {out!r}"
    return code, out.strip()


def scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_healthy_node_is_ok(capsys: pytest.CaptureFixture[str]) -> None:
    for which in ("all", "gpus", "xid", "license"):
        code, line = check(capsys, which, "--sim", "h100-mig-backed-vgpu", "--window", "0")
        assert code == 0, line


def test_unlicensed_vgpu(capsys: pytest.CaptureFixture[str]) -> None:
    # vgpu-license-expiry: vGPU 36 starts unlicensed.
    code, line = check(capsys, "license", "--sim", "vgpu-license-expiry", "--window", "0")
    assert code == 1 and "vGPU 36" in line and "unlicensed" in line
    code, line = check(capsys, "gpus", "--sim", "vgpu-license-expiry", "--window", "0")
    assert code == 0


def test_lost_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, line = check(capsys, "gpus", "--sim", scenario(tmp_path, LOST), "--window", "0")
    assert code == 1 and line.startswith("GPU 1 (") and "down: gpu_is_lost" in line
    code, line = check(capsys, "all", "--sim", scenario(tmp_path, LOST), "--window", "0")
    assert code == 1 and "gpu_is_lost" in line


def test_xid_in_the_window(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, line = check(capsys, "xid", "--sim", scenario(tmp_path, XID), "--window", "1s")
    assert code == 1 and line.startswith("Xid 79 on GPU 0")


class _Exporter(http.server.BaseHTTPRequestHandler):
    body = b""

    def do_GET(self) -> None:
        status = 200 if self.path == "/api/v1/snapshot" else 404
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def exporter() -> Iterator[tuple[str, type[_Exporter]]]:
    handler = type("Handler", (_Exporter,), {})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_from_a_running_exporter(
    capsys: pytest.CaptureFixture[str], exporter: tuple[str, type[_Exporter]]
) -> None:
    url, handler = exporter
    xid_ran = tuple(  # every collector the checks read ran and succeeded
        CollectorStatus(n, True, 0.0) for n in ("device", "remapped_rows", "guest", "xid")
    )
    healthy = Snapshot(
        timestamp=1.0,
        gpus=(Gpu(index=0, uuid="GPU-a", xid_errors={63: 1}),),
        collectors=xid_ran,
        health=SamplerHealth(up=True),
    )
    handler.body = to_json(healthy).encode()
    code, line = check(capsys, "all", "--url", url)
    assert code == 0 and "1 informational" in line
    # Xid 48 (double-bit ECC) since the exporter started: a problem until it restarts.
    sick = Snapshot(
        timestamp=2.0,
        gpus=(Gpu(index=0, uuid="GPU-a", xid_errors={48: 2}),),
        collectors=xid_ran,
        health=SamplerHealth(up=True),
    )
    handler.body = to_json(sick).encode()
    assert check(capsys, "xid", "--url", url) == (1, "Xid 48 on GPU 0 (GPU-a) (2x)")
    handler.body = to_json(Snapshot(timestamp=3.0, health=SamplerHealth(up=False))).encode()
    code, line = check(capsys, "gpus", "--url", url)
    assert code == 2 and line.startswith("NVML not available")


def test_unknown_when_it_cannot_tell(capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing listens on port 1 of loopback: the exporter cannot be read.
    code, line = check(capsys, "all", "--url", "http://127.0.0.1:1")
    assert code == 2 and line.startswith("cannot check:")
    code, line = check(capsys, "--window", "forever", "--sim", "baremetal-8xh100")
    assert code == 2 and "--window" in line
    code, line = check(capsys, "--url", "http://127.0.0.1:1", "--sim", "baremetal-8xh100")
    assert code == 2


def test_a_bad_check_name_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "licence"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice" in err


# -- issue 33, finding 2: unknown whenever the snapshot cannot support a verdict ---------------


def _faulty(tmp_path: Path, name: str, faults: list[dict[str, object]]) -> str:
    """kvm-vgpu-timesliced (unlicensed vGPUs on GPU 0) with ``faults``."""
    import yaml

    from vgpumon.sim.scenario import builtin_text

    doc = yaml.safe_load(builtin_text("kvm-vgpu-timesliced"))
    doc.update(name=name, faults=faults)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


LICENSE_CALLS = ["nvmlVgpuInstanceGetLicenseInfo", "nvmlVgpuInstanceGetLicenseStatus"]


@pytest.mark.parametrize(
    ("faults", "expected"),
    [
        # every call about a GPU times out from the start: no GPU can be acquired
        (
            [{"kind": "error", "function": "*", "code": "timeout", "gpus": [0, 1, 2]}],
            {"gpus": 2, "license": 2, "xid": 2},
        ),
        # every call about a GPU times out once the GPUs were read (the window's second cycle)
        (
            [
                {
                    "kind": "error",
                    "function": "*",
                    "code": "timeout",
                    "gpus": [0, 1, 2],
                    "from": "0.5s",
                }
            ],
            {"gpus": 1, "license": 2, "xid": 0},  # the Xid watcher still works
        ),
        # the vGPU list fails on a host whose vGPUs are unlicensed
        (
            [{"kind": "error", "function": "nvmlDeviceGetActiveVgpus", "code": "timeout"}],
            {"gpus": 0, "license": 2, "xid": 0},
        ),
        # the license calls fail
        (
            [{"kind": "error", "function": LICENSE_CALLS, "code": "timeout"}],
            {"gpus": 0, "license": 2, "xid": 0},
        ),
    ],
    ids=["gpus unreadable", "every call times out", "vgpu list fails", "license calls fail"],
)
def test_a_check_that_cannot_tell_is_unknown_never_ok(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    faults: list[dict[str, object]],
    expected: dict[str, int],
) -> None:
    path = _faulty(tmp_path, "faulty", faults)
    got = {}
    for which in expected:
        got[which] = check(capsys, which, "--sim", path, "--window", "1s")
    assert {k: code for k, (code, _) in got.items()} == expected, got


def test_gpu_whose_every_call_fails_is_down_in_the_snapshot(tmp_path: Path) -> None:
    """Every call about GPU 0 times out (after it was acquired): GPU 0 is down with the reason,
    its collectors' success is 0, the others' GPUs are up."""
    import asyncio

    from vgpumon.collect.base import SamplerConfig
    from vgpumon.collect.sampler import Sampler
    from vgpumon.nvml.loader import open_session
    from vgpumon.sim import ManualClock

    path = _faulty(
        tmp_path,
        "gpu0-times-out",
        [{"kind": "error", "function": "*", "code": "timeout", "gpus": [0], "from": "5s"}],
    )
    clock = ManualClock()
    sampler = Sampler(open_session(sim=path, clock=clock), SamplerConfig(), clock=clock.now)

    async def two() -> tuple[Snapshot, Snapshot]:
        first = await sampler.cycle()
        clock.advance(10)
        return first, await sampler.cycle()

    try:
        first, second = asyncio.run(two())
    finally:
        sampler.close()
    assert all(g.up for g in first.gpus)
    assert all(c.success for c in first.collectors), first.collectors
    gpu0 = second.gpus[0]
    assert not gpu0.up and "timeout" in (gpu0.down_reason or "")
    assert all(g.up for g in second.gpus[1:])
    failed = {c.name for c in second.collectors if not c.success}
    assert {"device", "memory", "power", "vgpu"} <= failed, failed
    # ... and so says the exporter.
    from vgpumon.metrics.exposition import render

    text = render(second).decode()
    up = [line for line in text.splitlines() if line.startswith("vgpumon_gpu_up{")]
    assert sum(line.endswith(" 0.0") for line in up) == 1 and len(up) == 3, up
    assert 'vgpumon_scrape_collector_success{collector="memory"} 0.0' in text


def test_a_wedged_sampler_is_unknown_through_the_exporter(
    capsys: pytest.CaptureFixture[str], exporter: tuple[str, type[_Exporter]]
) -> None:
    url, handler = exporter
    every = tuple(
        CollectorStatus(n, True, 0.0)
        for n in ("device", "remapped_rows", "vgpu", "license", "guest", "xid")
    )
    wedged = Snapshot(
        timestamp=1.0,
        gpus=(Gpu(index=0, uuid="GPU-a"),),
        collectors=every,
        health=SamplerHealth(up=True, wedged=True),
    )
    handler.body = to_json(wedged).encode()
    for which in ("license", "xid", "recovery", "repair", "memory", "all"):
        code, line = check(capsys, which, "--url", url)
        assert code == 2 and "wedged" in line, (which, line)


@pytest.mark.parametrize("trouble", ["wedged", "gpu down", "recovery failed"])
def test_the_driver_health_checks_are_unknown_when_the_snapshot_cannot_tell(
    capsys: pytest.CaptureFixture[str], exporter: tuple[str, type[_Exporter]], trouble: str
) -> None:
    """recovery / repair / memory say "ok" only when every GPU was read this cycle: a stale
    snapshot, a GPU not read or a recovery collector that failed is "cannot tell" (they said ok
    from the GPUs that answered)."""
    from vgpumon.model import Recovery

    url, handler = exporter
    fine = Recovery(
        action="none",
        channel_repair_pending=False,
        tpc_repair_pending=False,
        unrepairable_memory=False,
    )
    gpus = (
        Gpu(index=0, uuid="GPU-a", recovery=fine),
        Gpu(index=1, uuid="GPU-b", recovery=fine, up=trouble != "gpu down"),
    )
    names = ("device", "remapped_rows", "xid", "guest", "recovery")
    statuses = tuple(
        CollectorStatus(n, not (trouble == "recovery failed" and n == "recovery"), 0.0)
        for n in names
    )
    snap = Snapshot(
        timestamp=1.0,
        gpus=gpus,
        collectors=statuses,
        health=SamplerHealth(up=True, wedged=trouble == "wedged"),
    )
    handler.body = to_json(snap).encode()
    for which in ("recovery", "repair", "memory"):
        code, line = check(capsys, which, "--url", url)
        assert code == 2 and line.startswith("cannot tell"), (which, line)
    # ... and so does "all" (which lets only an older driver's silence pass).
    code, line = check(capsys, "all", "--url", url)
    assert code == (1 if trouble == "gpu down" else 2), line


def test_failed_collectors_are_unknown_through_the_exporter(
    capsys: pytest.CaptureFixture[str], exporter: tuple[str, type[_Exporter]]
) -> None:
    url, handler = exporter
    names = ("device", "remapped_rows", "vgpu", "license", "guest", "xid")
    for broken, which in (
        ("license", "license"),
        ("vgpu", "license"),
        ("xid", "xid"),
        ("remapped_rows", "gpus"),
    ):
        statuses = tuple(CollectorStatus(n, n != broken, 0.0) for n in names)
        snap = Snapshot(
            timestamp=1.0,
            gpus=(Gpu(index=0, uuid="GPU-a", virtualization_mode="host_vgpu"),),
            collectors=statuses,
            health=SamplerHealth(up=True),
        )
        handler.body = to_json(snap).encode()
        code, line = check(capsys, which, "--url", url)
        assert code == 2 and broken in line, (broken, line)


def test_deeply_nested_json_from_the_exporter_is_one_line(
    capsys: pytest.CaptureFixture[str], exporter: tuple[str, type[_Exporter]]
) -> None:
    url, handler = exporter
    handler.body = b"[" * 100_000 + b"]" * 100_000
    code = main(["check", "all", "--url", url])
    captured = capsys.readouterr()
    assert code == 2 and captured.out.startswith("cannot check:") and captured.err == ""


# ---- what the driver says the GPU needs (recovery-reset: GPU 0 asks for a reset from 2 s to
# 5 s, GPU 1 has a TPC repair pending, GPU 2's memory is beyond repair from 20 s)


def test_recovery_exits_1_while_the_driver_asks_for_a_reset_and_0_after(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = check(capsys, "recovery", "--sim", "recovery-reset", "--window", "0")
    assert code == 0, line
    code, line = check(capsys, "recovery", "--sim", "recovery-reset", "--window", "3s")
    assert code == 1, line
    assert line.startswith("GPU 0 (GPU-") and "needs gpu reset" in line
    code, line = check(capsys, "recovery", "--sim", "recovery-reset", "--window", "6s")
    assert code == 0, line


def test_pending_repair_and_unrepairable_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, line = check(capsys, "repair", "--sim", "recovery-reset", "--window", "0")
    assert code == 1 and "GPU 1" in line and "tpc repair pending" in line, line
    code, line = check(capsys, "memory", "--sim", "recovery-reset", "--window", "0")
    assert code == 0, line  # not before 20 s
    code, line = check(capsys, "all", "--sim", "recovery-reset", "--window", "0")
    assert code == 1 and "tpc repair" in line, line


def test_an_older_driver_cannot_support_a_recovery_verdict(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    old = scenario(tmp_path, "name: r550\ndriver: {version: '550.54.14'}\ngpus: [{model: l40s}]\n")
    for which in ("recovery", "repair", "memory"):
        code, line = check(capsys, which, "--sim", old, "--window", "0")
        assert code == 2 and "does not report" in line, line
    code, line = check(capsys, "all", "--sim", old, "--window", "0")
    assert code == 0, line  # said, but the other checks decide


def test_scheduler_reads_the_exporters_starvation_verdict(
    capsys: pytest.CaptureFixture[str], exporter: tuple[str, type[_Exporter]]
) -> None:
    """vgpu-contention's vGPU 3 is starved (docs/verdicts.md): check says so from the exporter's
    snapshot, the verdict the alert and top read; a node without a verdict yet is unknown."""
    url, handler = exporter
    snap = sampled(CONTENTION, 65.0)
    handler.body = to_json(snap).encode()
    code, line = check(capsys, "scheduler", "--url", url)
    assert code == 1 and line.startswith("vGPU 3 on GPU 0 (VM "), line
    assert line.endswith("starved: received 10% of a 33% due"), line
    code, line = check(capsys, "all", "--url", url)
    assert code == 1 and "vGPU 3" in line
    early = sampled(CONTENTION, 10.0)
    handler.body = to_json(early).encode()
    assert check(capsys, "scheduler", "--url", url) == (
        2,
        "scheduler: no verdict: window too short",
    )
    # In all, no verdict yet is said but does not make the node unknown.
    watched = dataclasses.replace(
        early, collectors=(*early.collectors, CollectorStatus("xid", True, 0.0))
    )
    handler.body = to_json(watched).encode()
    code, line = check(capsys, "all", "--url", url)
    assert code == 0 and "scheduler: no verdict: window too short" in line


def test_scheduler_on_a_one_shot_local_read_has_no_verdict(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = check(capsys, "scheduler", "--sim", "kvm-vgpu-timesliced", "--window", "0")
    assert (code, line) == (2, "scheduler: no verdict: window too short")
    code, line = check(capsys, "scheduler", "--sim", "baremetal-8xh100", "--window", "0")
    assert (code, line) == (0, "no vGPU scheduler on this node")
