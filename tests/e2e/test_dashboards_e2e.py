"""Every dashboard query and every rule against a real Prometheus scraping simulated hosts.

One Prometheus (scrape and rule evaluation every second) loads packaging/prometheus's rules and
scrapes one ``vgpumon serve --sim`` per scenario kind the dashboards name (dashboard_helpers.py
maps kinds to scenarios): the quickstart vGPU host (with libvirt names, a KubeVirt pod, per-process,
PCIe throughput and pod series), a MIG host, a bare-metal host, an NVLink board with a link down, a
VM that runs vgpumon itself (guest licenses), a host with a lost GPU, the metering host (known
load, its processes in two Kubernetes pods and one dead, a starved vGPU; tests/e2e/metering_host.py
gives its metering stage a fake host /proc) and the three capacity scenarios with hand-computed
answers (docs/capacity.md). Every target carries the ``cluster`` label the file_sd example sets.
Prometheus loads every rule file (vgpumon.rules.yml, vgpumon-metering.rules.yml and
vgpumon-capacity.rules.yml). Then:

* every query, with the dashboard variables replaced by match-all, parses and evaluates;
* every query returns data on each scenario kind it names (``$instance`` set to that host);
* every variable lists values, ``$vm`` the VMs' names;
* every rule evaluates without error;
* the capacity dashboard's tables merge their queries into whole rows and show the scenarios'
  hand-computed answers (where one more fits, best fit first; fragmentation);
* the first Xid on a GPU fires its alert (the bare-metal host's idle GPUs get Xid 63 and 48 a few
  seconds after start instead of the scenario's 30 s), and nothing else fires a critical alert but
  the lost GPU.
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
from ci_helpers import missing
from dashboard_helpers import (
    RULE_FILES,
    RULES,
    SCENARIOS,
    generator,
    instantiate,
    label_values_query,
    recording_rule_names,
    variable_values,
)
from export_helpers import free_port
from prometheus_helpers import prometheus_binary, start, start_prometheus, stop_all

from vgpumon.sim.scenario import builtin_text

pytestmark = pytest.mark.e2e

METERING_HOST = Path(__file__).resolve().with_name("metering_host.py")
LIBVIRT_FIXTURE = Path(__file__).resolve().parents[1] / "fixtures/libvirt/kvm-vgpu-timesliced.xml"
KUBEVIRT_MDEV = "fe4138f0-efff-9274-4579-142902701cd9"  # kvm-vgpu-timesliced vGPU 3
try:
    import libvirt  # noqa: F401 - only whether the [libvirt] extra is there

    LIBVIRT = True
except ImportError:
    LIBVIRT = False

STARTUP_SECONDS = 30.0
# Rates over the recording rules' 5 m window need two samples of each counter, and the recording
# rules one evaluation after that; seconds in practice. The starvation verdict comes last: it
# needs its whole window of starved scheduler readings after the exporter's first, then a scrape
# and an evaluation. The bound is for a loaded machine (a CI box running other suites saw the
# verdict 58 s after start); a wait ends as soon as the data is there.
SETTLE_SECONDS = 90.0


# The bare-metal scenario with its Xid timeline compressed: one informational and one critical Xid
# on each idle GPU, early enough for the test and late enough that Prometheus saw the zeros first.
XID_AT = "6s"
XID_EVENTS = ({"at": XID_AT, "xid": 63}, {"at": XID_AT, "xid": 48})
IDLE_GPUS = ("6", "7")


def baremetal_scenario(directory: Path) -> Path:
    """The bare-metal scenario with its Xid timeline compressed, and fans on the idle GPUs (every
    built-in model is a passive board; the fan panel needs one that is not)."""
    doc = yaml.safe_load(builtin_text(SCENARIOS["baremetal"]))
    idle = doc["gpus"][-1]
    assert idle.get("count") == len(IDLE_GPUS) and "xid_events" in idle
    idle["xid_events"] = [dict(e) for e in XID_EVENTS]
    idle["fans"] = {"count": 2, "speed": 0.45}
    path = directory / f"{SCENARIOS['baremetal']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def lost_scenario(directory: Path) -> Path:
    """fault-gpu-lost with its GPU lost from 2 s on for the rest of the test (the built-in one
    comes back after 40 s)."""
    doc = yaml.safe_load(builtin_text(SCENARIOS["lost"]))
    lost = next(f for f in doc["faults"] if f["kind"] == "gpu_lost")
    lost["from"], lost["until"] = "2s", "1h"
    path = directory / f"{SCENARIOS['lost']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def metering_scenario(directory: Path) -> Path:
    """metering-known-load with what the Usage panels need on top: a process that holds memory
    without using the GPU (PID 7103, in a pod by metering_host.py; PID 7102 has no /proc entry
    there: a dead holder), and a third GPU where vGPU 13 is starved by two neighbours, as in
    tests/fixtures/scenarios/vgpu-contention.yaml (best effort, oversubscribed: vGPUs 11 and 12
    ask for 90 % each and get about 41 %, vGPU 13 asks for 20 % and gets 9 % of a third due). The
    exporter's verdict needs half a minute of counters (docs/verdicts.md)."""
    doc = yaml.safe_load(builtin_text(SCENARIOS["metering"]))
    shared = doc["gpus"][1]
    shared["processes"].append(
        {"pid": 7103, "name": "notebook", "memory": "2GiB", "utilization": {"sm": 0.0}}
    )
    demands = {11: 0.9, 12: 0.9, 13: 0.2}
    instances = [
        {"id": i, "type": "NVIDIA L40S-4Q", "load": {"sm": sm}, "framebuffer_used": "1GiB"}
        for i, sm in demands.items()
    ]
    contended = {
        "model": "l40s",
        "virtualization_mode": "host_vgpu",
        "power": {"draw": "300W"},
        "vgpu": {
            "types": doc["gpus"][0]["vgpu"]["types"],
            "scheduler": {"policy": "best_effort", "timeslice": "1ms"},
            "instances": instances,
        },
    }
    doc["gpus"].append(contended)
    path = directory / f"{SCENARIOS['metering']}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# Flags per kind on top of --sim: the opt-in families the dashboards show.
EXTRA_FLAGS = {
    "vgpu": ["--process-series", "--pcie-throughput", "--kubernetes.pod-series"],
    "mig": ["--process-series"],
    "baremetal": ["--process-series"],
    "metering": ["--process-series"],
}
CLUSTER = "e2e"  # the target label the file_sd example sets


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
            derive = {
                "baremetal": baremetal_scenario,
                "lost": lost_scenario,
                "metering": metering_scenario,
            }.get(kind)
            scenario = str(derive(tmp)) if derive else builtin
            target = f"127.0.0.1:{free_port()}"
            log = tmp / f"vgpumon-{kind}.log"
            cmd = [sys.executable, "-m", "vgpumon.cli", "serve", "--sim", scenario]
            if kind == "metering":
                host = str(tmp / "metering-host")
                cmd = [sys.executable, str(METERING_HOST), host, *cmd[3:]]
            cmd += EXTRA_FLAGS.get(kind, [])
            if kind == "vgpu" and LIBVIRT:
                # Names from libvirt's test driver for some of the vGPUs (docs/names.md); the
                # others keep NVML's VM id, so the dashboards' fallback is exercised too.
                cmd += ["--libvirt.uri", f"test://{LIBVIRT_FIXTURE}"]
            if kind == "vgpu":
                kubelet = _kubelet()  # a KubeVirt pod holding vGPU 3, for the pod panels
                cleanups += [kubelet.stop, functools.partial(_remove_dir, kubelet.path)]
                cmd += ["--kubernetes.socket", kubelet.path]
            procs.append(start([*cmd, "--web.listen-address", target, "--interval", "0.5"], log))
            logs.append(log)
            targets[kind] = target
            static = {"targets": [target], "labels": {"cluster": CLUSTER}}
            jobs.append({"job_name": f"vgpumon-{kind}", "static_configs": [static]})
        url, proc, log = start_prometheus(tmp, jobs, rule_files=RULE_FILES)
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
    """Each query named by dashboard, panel, legend and refId: two queries of a panel may share a
    legend, and a name that two queries share would check only one of them."""
    gen = generator()
    found = []
    for d in gen.DASHBOARDS:
        for panel in d.panels():
            for i, query in enumerate(panel.queries):
                ref = chr(ord("A") + i)  # as the dashboard gives it (common.py, targets)
                where = f"{d.uid} / {panel.title} / {ref} {query.legend}"
                found.append((where, query.expr, query.kinds))
    return found


def test_every_dashboard_query_parses_with_match_all(stack: Stack) -> None:
    failures = {}
    for where, expr, _ in all_queries():
        try:
            stack.query(instantiate(expr))
        except QueryError as err:
            failures[where] = str(err)
    assert failures == {}


def needs_libvirt(expr: str) -> bool:
    """A query of a family only the libvirt enricher fills (the VM state panel)."""
    from vgpumon.metrics.table import FAMILIES

    return any(f.collector == "libvirt" and f.name in expr for f in FAMILIES)


def test_every_dashboard_query_returns_data_on_its_scenarios(stack: Stack) -> None:
    """Polled until all have data: rates and recording rules need a few scrapes first. The
    libvirt enricher's panels are the next test's (they need the [libvirt] extra)."""
    pending = {
        (where, kind): instantiate(expr, instance=stack.targets[kind])
        for where, expr, kinds in all_queries()
        for kind in kinds
        if not needs_libvirt(expr)
    }
    assert len(pending) > 100
    # every query and scenario is checked, none hidden behind another's name
    assert len(pending) == sum(
        len(kinds) for _, expr, kinds in all_queries() if not needs_libvirt(expr)
    )
    _wait_for_data(stack, pending)


def test_the_libvirt_panels_return_data(stack: Stack) -> None:
    if not LIBVIRT:
        missing("needs the [libvirt] extra (libvirt-python) for the VM state panel's data")
    pending = {
        (where, kind): instantiate(expr, instance=stack.targets[kind])
        for where, expr, kinds in all_queries()
        for kind in kinds
        if needs_libvirt(expr)
    }
    assert pending, "the VM state panel reads a libvirt family"
    _wait_for_data(stack, pending)


def _wait_for_data(stack: Stack, pending: dict[tuple[str, str], str]) -> None:
    give_up = time.monotonic() + SETTLE_SECONDS
    while pending and time.monotonic() < give_up:
        pending = {key: q for key, q in pending.items() if not stack.query(q)}
        if pending:
            time.sleep(1.0)
    assert sorted(f"{where} on {SCENARIOS[kind]}" for where, kind in pending) == []


def test_a_query_on_the_wrong_scenario_returns_nothing(stack: Stack) -> None:
    """The data check can fail: vGPU series are not on the bare-metal host."""
    gen = generator()
    board = next(b for b in gen.DASHBOARDS if b.uid == "vgpumon-vgpu-host")
    expr = next(q.expr for _, q in board.queries() if "vgpumon_vgpu_utilization" in q.expr)
    assert stack.query(instantiate(expr, instance=stack.targets["baremetal"])) == []


def test_every_variable_lists_values(stack: Stack) -> None:
    gen = generator()
    for name, variable in gen.VARIABLES.items():
        if name == "host":
            continue  # only agentless exporters (serve --ssh.targets) label series with host
        promql, _ = label_values_query(variable.query)
        results = stack.query(instantiate(promql, instance=stack.targets["vgpu"]))
        assert variable_values(variable, results), f"${name}: {variable.query} lists nothing"
    cluster, _ = label_values_query(gen.VARIABLES["cluster"].query)
    assert variable_values(gen.VARIABLES["cluster"], stack.query(instantiate(cluster))) == {CLUSTER}


def test_vm_variable_lists_names(stack: Stack) -> None:
    """$vm lists the VMs by name where libvirt or the kubelet named them, by id elsewhere."""
    variable = generator().VARIABLES["vm"]
    promql, _ = label_values_query(variable.query)
    expr = instantiate(promql, instance=stack.targets["vgpu"])
    give_up = time.monotonic() + SETTLE_SECONDS
    values: set[str] = set()
    while time.monotonic() < give_up:
        values = variable_values(variable, stack.query(expr))
        if "vdi-desk-03" in values and (not LIBVIRT or "vm-render-07" in values):
            break
        time.sleep(0.5)
    assert "vdi-desk-03" in values  # the KubeVirt pod's VM
    assert "6f9c984a-d134-bbaa-478c-f15eeba17637" in values  # no name anywhere: NVML's VM id
    if LIBVIRT:
        assert "vm-render-07" in values  # from libvirt


def test_vgpu_dashboard_names_vms_by_name_or_id(stack: Stack) -> None:
    if not LIBVIRT:
        missing("needs the [libvirt] extra (libvirt-python)")
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
    # The vGPU recording rules produce data (the per-GPU ones on the vGPU host itself), once they
    # had two scrapes and an evaluation: this test may be the first of the module to run (one
    # worker of several runs it on a stack of its own), so it waits as the data test does.
    target = stack.targets["vgpu"]
    _wait_for_data(
        stack,
        {
            (record, "vgpu"): f'{record}{{instance="{target}"}}'
            for record in recording_rule_names(RULES)
            if record.startswith("vgpumon:vgpu")
        },
    )


# Alerts the stack raises (pending at least) once it settled: a lost GPU, a critical Xid, and the
# starved vGPU (the starvation verdict needs its minute, so the test waits for all three).
ALERTS_SEEN = {"VgpumonGpuLost", "VgpumonXidCritical", "VgpumonVgpuStarved"}
# Fleet rules that give series only while something is wrong that these scenarios do not have
# (tests/packaging/test_rule_labels.py proves their labels on inputs that have it).
ONLY_WHEN_WRONG = {
    "vgpumon:host_idle_holders:count",
    "vgpumon:host_gpus_unrepairable_memory:count",
    "vgpumon:host_licenses_expiring:count",
    "vgpumon:vgpu_license_expiring:info",
    "vgpumon:host_gpus_recovery_action:count",
}


def test_every_vgpumon_alert_and_recorded_series_carries_the_target_label(stack: Stack) -> None:
    """Every target has cluster="e2e" (a target label, as the file_sd example sets): every
    recording rule's series and every vgpumon alert, pending or firing, carries it
    (docs/verdicts.md, "Rules keep target labels"), so Alertmanager can route by cluster."""
    constants = {"vgpumon:tenant_map:namespace", "vgpumon:tenant_map:vm"}  # from no target
    wanted = recording_rule_names() - constants
    give_up = time.monotonic() + SETTLE_SECONDS
    while True:
        recorded = [
            r for r in stack.query('{__name__=~"vgpumon:.+|DCGM_FI_.+"}')
            if r["metric"]["__name__"] not in constants
        ]  # fmt: skip
        found = {r["metric"]["__name__"] for r in recorded}
        alerts = stack.query('ALERTS{alertname=~"Vgpumon.+"}')
        names = {a["metric"]["alertname"] for a in alerts}
        if (found == wanted - ONLY_WHEN_WRONG and names >= ALERTS_SEEN) or (
            time.monotonic() > give_up
        ):
            break
        time.sleep(1.0)
    assert found - ONLY_WHEN_WRONG == wanted - ONLY_WHEN_WRONG  # every other rule gives series
    assert names >= ALERTS_SEEN
    unlabelled = [r["metric"] for r in recorded + alerts if r["metric"].get("cluster") != CLUSTER]
    assert unlabelled == []


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
    # The simulated hosts are otherwise healthy: no other critical alert anywhere but the lost
    # GPU's, once it has been lost for the alert's minute.
    critical = stack.query('ALERTS{alertstate="firing", severity="critical"}')
    found = {(a["metric"]["alertname"], a["metric"]["instance"]) for a in critical}
    assert ("VgpumonXidCritical", target) in found
    assert found <= {("VgpumonXidCritical", target), ("VgpumonGpuLost", stack.targets["lost"])}


# --------------------------------------------------------------------------- capacity

GIB = 2**30


def capacity_panel(title: str) -> Any:
    board = next(b for b in generator().DASHBOARDS if b.uid == "vgpumon-capacity")
    return next(p for p in board.panels() if p.title == title)


def table_rows(stack: Stack, panel: Any, kind: str) -> list[dict[str, Any]]:
    """A table panel's rows as Grafana's merge builds them: the series of each query (``Value
    #A``, ``#B``, ...) joined on their labels. Polled until every query has data."""
    rows: dict[frozenset[tuple[str, str]], dict[str, Any]] = {}
    give_up = time.monotonic() + SETTLE_SECONDS
    while True:
        results = [
            stack.query(instantiate(query.expr, instance=stack.targets[kind]))
            for query in panel.queries
        ]
        if all(results) or time.monotonic() > give_up:
            break
        time.sleep(0.5)
    for i, series in enumerate(results):
        for one in series:
            labels = one["metric"]
            # A metric name differs per query and would keep the rows apart.
            assert "__name__" not in labels or len(panel.queries) == 1, (panel.title, labels)
            row = rows.setdefault(frozenset(labels.items()), dict(labels))
            row[f"Value #{chr(ord('A') + i)}"] = float(one["value"][1])
    return list(rows.values())


def test_capacity_tables_merge_their_queries_into_whole_rows(stack: Stack) -> None:
    """Every series of a later query joins a row of the first: same labels, no metric name."""
    board = next(b for b in generator().DASHBOARDS if b.uid == "vgpumon-capacity")
    orphans = []
    checked = 0
    for panel in board.panels():
        if panel.kind != "table" or len(panel.queries) < 2:
            continue
        for kind in panel.queries[0].kinds:
            rows = table_rows(stack, panel, kind)
            checked += 1
            orphans += [f"{panel.title} on {kind}: {r}" for r in rows if "Value #A" not in r]
    assert checked >= 6
    assert orphans == []


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        # capacity-l40s-homogeneous: 8Q 3 more on GPU 0 (24 GiB free), 1Q 16 more on GPU 1
        # (32 GiB free): the half-filled GPU is the tighter fit.
        (
            "capacity-homogeneous",
            [("0", "NVIDIA L40S-8Q", 3, 16 * GIB), ("1", "NVIDIA L40S-1Q", 16, 31 * GIB)],
        ),
        # capacity-l40s-heterogeneous: 8Q 2 more (28 GiB free); 4Q at its limit, 16Q blocked.
        ("capacity-heterogeneous", [("0", "NVIDIA L40S-8Q", 2, 20 * GIB)]),
    ],
)
def test_where_one_more_vgpu_fits_best_fit_first(
    stack: Stack, kind: str, expected: list[tuple[str, str, int, int]]
) -> None:
    panel = capacity_panel("Where one more vGPU fits")
    rows = table_rows(stack, panel, kind)
    shown = sorted(
        ((r["gpu"], r["vgpu_type"], int(r["Value #A"]), int(r["Value #B"])) for r in rows),
        key=lambda r: r[3],  # the table's sort: framebuffer left after one more, ascending
    )
    assert shown == expected


def test_where_one_more_mig_instance_fits_best_fit_first(stack: Stack) -> None:
    """capacity-a100-mig: 2 free slices; 2g.10gb fills them, 1g.5gb (2 more) and 1g.5gb+me (1)
    leave one; 3g, 4g and 7g do not fit."""
    rows = table_rows(stack, capacity_panel("Where one more MIG instance fits"), "capacity-mig")
    shown = sorted(
        (int(r["Value #B"]), r["gpu_instance_profile"], int(r["Value #A"])) for r in rows
    )
    assert shown == [(0, "2g.10gb", 1), (1, "1g.5gb", 2), (1, "1g.5gb+me", 1)]


@pytest.mark.parametrize(
    ("kind", "ratio"),
    [
        ("capacity-homogeneous", 16 / (24 + 32)),  # 16 GiB stranded of 56 GiB free
        ("capacity-heterogeneous", 12 / 28),  # slots 0, 7 and 10 of 28 GiB free
    ],
)
def test_fragmentation_is_stranded_over_free(stack: Stack, kind: str, ratio: float) -> None:
    (query,) = capacity_panel("Fragmentation").queries
    expr = instantiate(query.expr, instance=stack.targets[kind])
    give_up = time.monotonic() + SETTLE_SECONDS
    while not (result := stack.query(expr)) and time.monotonic() < give_up:
        time.sleep(0.5)
    (value,) = result
    assert float(value["value"][1]) == pytest.approx(ratio)
