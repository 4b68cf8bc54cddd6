"""A real Prometheus scrapes `vgpumon serve --sim ...` and sees what the scenario files say.

One Prometheus (scrape interval 1 s) scrapes one exporter per scenario, each as its own job, and
the test asks Prometheus' HTTP API, so the whole path is exercised: content negotiation (Prometheus
asks for OpenMetrics first), parsing by Prometheus itself, staleness when a series disappears.

Adding a check is one line in ``CASES``: (scenario, PromQL selector without ``job``, value), with
None for "this series must not exist". The selector gets ``job="<scenario>"`` added.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from export_helpers import free_port
from prometheus_helpers import prometheus_binary, start, start_prometheus, stop_all

from vgpumon.sim.scenario import builtin_text

pytestmark = pytest.mark.e2e

GIB = 1024**3
STARTUP_SECONDS = 30.0
SETTLE_SECONDS = 20.0


class Case(NamedTuple):
    scenario: str
    selector: str
    value: float | None


CASES = (
    # load.duty 0.95 on the trainers
    Case("baremetal-8xh100", 'vgpumon_gpu_utilization_ratio{gpu="0"}', 0.95),
    # the idle GPUs run no process
    Case("baremetal-8xh100", 'vgpumon_gpu_processes{gpu="7"}', 0.0),
    Case("baremetal-8xh100", 'vgpumon_gpu_processes{gpu="0"}', 1.0),
    # GPU 0 is MIG-enabled: no NVML utilization for it (absent, not 0); GPU 1 runs duty 0.5
    Case("a100-mig-mixed", 'vgpumon_gpu_mig_mode_enabled{gpu="0"}', 1.0),
    Case("a100-mig-mixed", 'vgpumon_gpu_utilization_ratio{gpu="0"}', None),
    Case("a100-mig-mixed", 'vgpumon_gpu_utilization_ratio{gpu="1"}', 0.5),
    # GPU instance 1 (2g.10gb): processes of 6 GiB and 2 GiB; the A100-40GB 2g.10gb profile size
    Case("a100-mig-mixed", 'vgpumon_mig_memory_used_bytes{gpu="0",gpu_instance="1"}', 8 * GIB),
    Case("a100-mig-mixed", 'vgpumon_mig_memory_total_bytes{gpu="0",gpu_instance="1"}', 10468982784),
    # four vGPU instances on GPU 0
    Case("kvm-vgpu-timesliced", 'vgpumon_gpu_vgpu_instances{gpu="0"}', 4.0),
    # equal share on GPU 1: busy vGPUs 11 and 12 get 40 % each; fixed share on GPU 2: 25 % each
    Case("kvm-vgpu-timesliced", 'vgpumon_vgpu_utilization_ratio{gpu="1",vgpu_id="11"}', 0.4),
    Case("kvm-vgpu-timesliced", 'vgpumon_vgpu_utilization_ratio{gpu="2",vgpu_id="21"}', 0.25),
    Case("kvm-vgpu-timesliced", 'vgpumon_vgpu_scheduler_policy{gpu="2",policy="fixed_share"}', 1),
    # license states: vGPU 1 licensed, vGPU 3 restricted, vGPU 4 has no guest driver (absent)
    Case("kvm-vgpu-timesliced", 'vgpumon_vgpu_license_state{vgpu_id="1",state="licensed"}', 1.0),
    Case(
        "kvm-vgpu-timesliced",
        'vgpumon_vgpu_license_state{vgpu_id="3",state="unlicensed_restricted"}',
        1.0,
    ),
    Case("kvm-vgpu-timesliced", 'vgpumon_vgpu_license_state{vgpu_id="4",state="licensed"}', None),
    # 6 GiB in use: above 4 GiB, where pynvml's 32-bit wrapper would have wrapped it to 2 GiB
    Case("kvm-vgpu-timesliced", 'vgpumon_vgpu_framebuffer_used_bytes{vgpu_id="1"}', 6 * GIB),
)

# fault-gpu-lost with its timeline compressed so that the test waits seconds, not a minute: GPU 2
# is lost from LOST_FROM to LOST_UNTIL seconds after the exporter starts.
LOSS_JOB = "fault-gpu-lost"
LOST_GPU = "2"
LOST_FROM, LOST_UNTIL = 8, 14


def compressed_loss_scenario(directory: Path) -> Path:
    doc = yaml.safe_load(builtin_text(LOSS_JOB))
    for fault in doc["faults"]:
        if fault["kind"] == "gpu_lost":
            fault.update(
                {"gpus": [int(LOST_GPU)], "from": f"{LOST_FROM}s", "until": f"{LOST_UNTIL}s"}
            )
        else:
            fault["from"] = f"{LOST_FROM}s"
    path = directory / f"{LOSS_JOB}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@dataclass
class Stack:
    url: str
    started: float  # monotonic time the exporters were started
    logs: list[Path]

    def query(self, promql: str) -> list[dict[str, Any]]:
        params = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{params}", timeout=5) as resp:
            data = json.load(resp)
        assert data["status"] == "success", data
        return list(data["data"]["result"])

    def value(self, selector: str, job: str) -> float | None:
        result = self.query(with_job(selector, job))
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def eventually(self, what: str, check: Callable[[], bool], seconds: float) -> None:
        give_up = time.monotonic() + seconds
        while time.monotonic() < give_up:
            if check():
                return
            time.sleep(0.25)
        tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in self.logs)
        pytest.fail(f"{what}: not seen within {seconds} s\n{tails}")


def with_job(selector: str, job: str) -> str:
    label = f'job="{job}"'
    if "{" in selector:
        return selector.replace("{", "{" + label + ",", 1)
    return selector + "{" + label + "}"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_binary()  # skip (or fail in CI) before starting anything
    tmp = tmp_path_factory.mktemp("e2e")
    scenarios: dict[str, str] = {c.scenario: c.scenario for c in CASES}
    scenarios[LOSS_JOB] = str(compressed_loss_scenario(tmp))
    procs: list[subprocess.Popen[bytes]] = []
    logs: list[Path] = []
    jobs = []
    try:
        started = time.monotonic()
        for job, scenario in scenarios.items():
            port = free_port()
            log = tmp / f"vgpumon-{job}.log"
            cmd = [
                sys.executable,
                "-m",
                "vgpumon.cli",
                "serve",
                "--sim",
                scenario,
                "--web.listen-address",
                f"127.0.0.1:{port}",
                "--interval",
                "0.5",
            ]
            procs.append(start(cmd, log))
            logs.append(log)
            jobs.append({"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]})
        url, proc, log = start_prometheus(tmp, jobs)
        procs.append(proc)
        logs.append(log)
        result = Stack(url, started, logs)

        def all_up() -> bool:
            try:
                ups = result.query("up")
            except (OSError, urllib.error.URLError):
                return False
            return len(ups) == len(jobs) and all(u["value"][1] == "1" for u in ups)

        result.eventually("every exporter scraped and up", all_up, STARTUP_SECONDS)
        yield result
    finally:
        stop_all(procs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.scenario}:{c.selector}")
def test_prometheus_sees_the_scenario(stack: Stack, case: Case) -> None:
    if case.value is None:
        # Present or not, the exporter must have been scraped first for absence to mean anything.
        stack.eventually(
            "exporter scraped", lambda: stack.value("vgpumon_up", case.scenario) == 1.0, 10
        )
        assert stack.value(case.selector, case.scenario) is None
        return
    expected = case.value
    stack.eventually(
        f"{case.selector} == {expected}",
        lambda: (
            (v := stack.value(case.selector, case.scenario)) is not None
            and abs(v - expected) <= 1e-9 * max(1.0, abs(expected))
        ),
        SETTLE_SECONDS,
    )


def test_gpu_loss_and_recovery(stack: Stack) -> None:
    job = LOSS_JOB
    util = f'vgpumon_gpu_utilization_ratio{{gpu="{LOST_GPU}"}}'
    up = f'vgpumon_gpu_up{{gpu="{LOST_GPU}"}}'
    if time.monotonic() - stack.started < LOST_FROM - 1:
        stack.eventually("the GPU before the loss", lambda: stack.value(util, job) == 0.5, 5)
    stack.eventually(
        "the lost GPU down with its series gone",
        lambda: stack.value(up, job) == 0.0 and stack.value(util, job) is None,
        LOST_FROM + SETTLE_SECONDS,
    )
    assert stack.value('vgpumon_gpu_utilization_ratio{gpu="1"}', job) == 0.5, "others unharmed"
    info = stack.query(with_job(f'vgpumon_gpu_info{{gpu="{LOST_GPU}"}}', job))
    assert len(info) == 1, "identity stays while the GPU is down"
    stack.eventually(
        "the GPU back with its series",
        lambda: stack.value(up, job) == 1.0 and stack.value(util, job) == 0.5,
        LOST_UNTIL + SETTLE_SECONDS,
    )
