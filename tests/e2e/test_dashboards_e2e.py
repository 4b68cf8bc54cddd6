"""Every dashboard query and every rule against a real Prometheus scraping simulated hosts.

One Prometheus (scrape and rule evaluation every second) loads packaging/prometheus's rules and
scrapes one ``vgpumon serve --sim`` per scenario kind the dashboards name: a vGPU host, a MIG host,
a bare-metal host and a vGPU host whose guests' licenses expire (the only built-in scenario with
expiry dates). Then:

* every query, with the dashboard variables replaced by match-all, parses and evaluates;
* every query returns data on each scenario kind it names (``$instance`` set to that host);
* every variable's ``label_values`` query lists values;
* every rule evaluates without error;
* the first Xid on a GPU fires its alert (the bare-metal host's idle GPUs get Xid 63 and 48 a few
  seconds after start instead of the scenario's 30 s), and nothing else fires a critical alert.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from dashboard_helpers import (
    RULES,
    SCENARIOS,
    generator,
    instantiate,
    label_values_query,
    recording_rule_names,
)
from export_helpers import free_port
from prometheus_helpers import prometheus_binary, start, start_prometheus, stop_all

from vgpumon.sim.scenario import builtin_text

pytestmark = pytest.mark.e2e

LIBVIRT_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/libvirt/kvm-vgpu-timesliced.xml"
KUBEVIRT_MDEV = "fe4138f0-efff-9274-4579-142902701cd9"  # kvm-vgpu-timesliced vGPU 3
try:
    import libvirt  # noqa: F401 - only whether the [libvirt] extra is there

    LIBVIRT = True
except ImportError:
    LIBVIRT = False

STARTUP_SECONDS = 30.0
# Rates over the recording rules' 5 m window need two samples of each counter, and the recording
# rules one evaluation after that; seconds in practice, this bounds a loaded machine.
SETTLE_SECONDS = 45.0


# The bare-metal scenario with its Xid timeline compressed: one informational and one critical Xid
# on each idle GPU, early enough for the test and late enough that Prometheus saw the zeros first.
XID_AT = "6s"
XID_EVENTS = ({"at": XID_AT, "xid": 63}, {"at": XID_AT, "xid": 48})
IDLE_GPUS = ("6", "7")


def compressed_xid_scenario(directory: Path) -> Path:
    doc = yaml.safe_load(builtin_text(SCENARIOS["baremetal"]))
    idle = doc["gpus"][-1]
    assert idle.get("count") == len(IDLE_GPUS) and "xid_events" in idle
    idle["xid_events"] = [dict(e) for e in XID_EVENTS]
    path = directory / f"{SCENARIOS['baremetal']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class QueryError(Exception):
    """Prometheus refused the query (a parse or evaluation error)."""


@dataclass
class Stack:
    url: str
    targets: dict[str, str]  # scenario kind -> host:port (the instance label)
    logs: list[Path]

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as resp:
                data = json.load(resp)
        except urllib.error.HTTPError as err:  # 400/422: the body says why
            raise QueryError(err.read().decode(errors="replace")) from None
        if data.get("status") != "success":
            raise QueryError(str(data))
        return data["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        return list(self.get("/api/v1/query", query=promql)["result"])


def _remove_dir(socket: str) -> None:
    shutil.rmtree(os.path.dirname(socket), ignore_errors=True)


def _kubelet() -> Any:
    """A pod-resources server (tests/kubelet_helpers.py) on a short socket path."""
    import tempfile

    from kubelet_helpers import FakeKubelet, pod

    kubelet = FakeKubelet(os.path.join(tempfile.mkdtemp(prefix="vgk", dir="/tmp"), "k.sock"))
    kubelet.pods = [
        pod("virt-launcher-vdi-desk-03-x7k2p", "vdi", "nvidia.com/NVIDIA_L40S-2B", KUBEVIRT_MDEV)
    ]
    return kubelet.start()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    prometheus_binary()  # skip (or fail in CI) before starting anything
    tmp = tmp_path_factory.mktemp("dashboards-e2e")
    procs: list[subprocess.Popen[bytes]] = []
    cleanups: list[Callable[[], None]] = []
    logs: list[Path] = []
    targets: dict[str, str] = {}
    jobs = []
    try:
        for kind, builtin in SCENARIOS.items():
            scenario = str(compressed_xid_scenario(tmp)) if kind == "baremetal" else builtin
            target = f"127.0.0.1:{free_port()}"
            log = tmp / f"vgpumon-{kind}.log"
            cmd = [sys.executable, "-m", "vgpumon.cli", "serve", "--sim", scenario]
            if kind == "vgpu" and LIBVIRT:
                # Names from libvirt's test driver for some of the vGPUs (docs/names.md); the
                # others keep NVML's VM id, so the dashboards' fallback is exercised too.
                cmd += ["--libvirt-uri", f"test://{LIBVIRT_FIXTURE}"]
            if kind == "vgpu":
                kubelet = _kubelet()  # a KubeVirt pod holding vGPU 3, for the pod panels
                cleanups += [kubelet.stop, functools.partial(_remove_dir, kubelet.path)]
                cmd += ["--kubelet-socket", kubelet.path]
            procs.append(start([*cmd, "--listen", target, "--interval", "0.5"], log))
            logs.append(log)
            targets[kind] = target
            jobs.append({"job_name": f"vgpumon-{kind}", "static_configs": [{"targets": [target]}]})
        url, proc, log = start_prometheus(tmp, jobs, rule_files=[RULES])
        procs.append(proc)
        logs.append(log)
        result = Stack(url, targets, logs)
        give_up = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                ups = result.query("up")
                if len(ups) == len(jobs) and all(u["value"][1] == "1" for u in ups):
                    break
            except (OSError, QueryError):
                pass
            if time.monotonic() > give_up:
                tails = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs)
                pytest.fail(f"exporters not all up within {STARTUP_SECONDS} s\n{tails}")
            time.sleep(0.25)
        yield result
    finally:
        for cleanup in cleanups:
            cleanup()
        stop_all(procs)


def all_queries() -> list[tuple[str, str, tuple[str, ...]]]:
    gen = generator()
    return [
        (f"{d.uid} / {panel.title} / {query.legend}", query.expr, query.kinds)
        for d in gen.DASHBOARDS
        for panel, query in d.queries()
    ]


def test_every_dashboard_query_parses_with_match_all(stack: Stack) -> None:
    failures = {}
    for where, expr, _ in all_queries():
        try:
            stack.query(instantiate(expr))
        except QueryError as err:
            failures[where] = str(err)
    assert failures == {}


def test_every_dashboard_query_returns_data_on_its_scenarios(stack: Stack) -> None:
    """Polled until all have data: rates and recording rules need a few scrapes first."""
    pending = {
        (where, kind): instantiate(expr, instance=stack.targets[kind])
        for where, expr, kinds in all_queries()
        for kind in kinds
    }
    assert len(pending) > 100
    give_up = time.monotonic() + SETTLE_SECONDS
    while pending and time.monotonic() < give_up:
        pending = {key: q for key, q in pending.items() if not stack.query(q)}
        if pending:
            time.sleep(1.0)
    assert sorted(f"{where} on {SCENARIOS[kind]}" for where, kind in pending) == []


def test_a_query_on_the_wrong_scenario_returns_nothing(stack: Stack) -> None:
    """The data check can fail: vGPU series are not on the bare-metal host."""
    gen = generator()
    expr = next(q.expr for _, q in gen.VGPU_HOST.queries() if "vgpumon_vgpu_utilization" in q.expr)
    assert stack.query(instantiate(expr, instance=stack.targets["baremetal"])) == []


def test_every_variable_lists_values(stack: Stack) -> None:
    gen = generator()
    for name, (_, definition) in gen.VARIABLES.items():
        kind = "vgpu"  # the vGPU host has a value for every variable, vm included
        promql = instantiate(label_values_query(definition), instance=stack.targets[kind])
        assert stack.query(promql), f"${name}: {definition} lists nothing"


def test_vgpu_dashboard_names_vms_by_name_or_id(stack: Stack) -> None:
    if not LIBVIRT:
        if os.environ.get("CI"):
            pytest.fail("CI must install the [libvirt] extra")
        pytest.skip("needs the [libvirt] extra")
    expr = instantiate(
        generator().by_vm("vgpumon_vgpu_utilization_ratio"), instance=stack.targets["vgpu"]
    )
    give_up = time.monotonic() + SETTLE_SECONDS
    names: dict[str, str] = {}
    while time.monotonic() < give_up:
        names = {r["metric"]["vgpu_id"]: r["metric"]["vm_name"] for r in stack.query(expr)}
        if names.get("1") == "vm-render-07":
            break
        time.sleep(0.5)
    assert names.get("1") == "vm-render-07"  # from libvirt
    assert names.get("4") == "6f9c984a-d134-bbaa-478c-f15eeba17637"  # NVML's VM id


def test_every_rule_evaluates_without_error(stack: Stack) -> None:
    give_up = time.monotonic() + SETTLE_SECONDS
    while True:
        groups = stack.get("/api/v1/rules")["groups"]
        loaded = [rule for group in groups for rule in group["rules"]]
        evaluated = all(rule.get("lastEvaluation", "").startswith("20") for rule in loaded)
        if evaluated or time.monotonic() > give_up:
            break
        time.sleep(0.5)
    assert {r["name"] for r in loaded if r["type"] == "recording"} == recording_rule_names()
    errors = {r["name"]: r.get("lastError") for r in loaded if r.get("health") != "ok"}
    assert errors == {}
    # The recording rules the scheduler panels and alerts build on produce data on the vGPU host.
    target = stack.targets["vgpu"]
    for record in recording_rule_names():
        if record.startswith("vgpumon:vgpu"):
            assert stack.query(f'{record}{{instance="{target}"}}'), record


def test_the_first_xid_on_a_gpu_fires_its_alert(stack: Stack) -> None:
    """The catalogued Xid counters exist at 0, so increase() sees the very first event."""
    target = stack.targets["baremetal"]
    expected = {("VgpumonXidInformational", gpu, "63") for gpu in IDLE_GPUS} | {
        ("VgpumonXidCritical", gpu, "48") for gpu in IDLE_GPUS
    }

    def firing() -> set[tuple[str, str, str]]:
        alerts = stack.query(f'ALERTS{{alertstate="firing", instance="{target}"}}')
        return {(a["metric"]["alertname"], a["metric"]["gpu"], a["metric"]["xid"]) for a in alerts}

    give_up = time.monotonic() + SETTLE_SECONDS
    while firing() != expected and time.monotonic() < give_up:
        time.sleep(0.5)
    assert firing() == expected
    # The simulated hosts are otherwise healthy: no other critical alert anywhere.
    critical = stack.query('ALERTS{alertstate="firing", severity="critical"}')
    assert {(a["metric"]["alertname"], a["metric"]["instance"]) for a in critical} == {
        ("VgpumonXidCritical", target)
    }
