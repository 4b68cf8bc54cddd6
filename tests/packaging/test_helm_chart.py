"""The Helm chart: `helm lint` and `helm template` of every documented values profile, every
rendered object valid against a current Kubernetes (kubernetes-validate --strict), and what each
profile promises read from the rendered spec: NVML without the runtime class on vGPU hosts, the
kubelet and API server wired with the least rights, node-problem-detector reaching the exporter,
kube-prometheus-stack finding the monitors, rules and dashboards. The kustomize base is the
chart's default rendering (packaging/helm/render.py) and the components agree with the chart."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_tools import (
    CHART,
    K8S,
    PROFILES,
    ROOT,
    documents,
    kustomize,
    load_script,
    overlay,
    run,
    tool,
)

from vgpumon.cli import build_parser

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="needs kubernetes-validate (a dev dependency)"
)

OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}  # CRDs: no bundled schema
PROFILE_NAMES = sorted(p.stem for p in PROFILES.glob("*.yaml"))
DOCUMENTED = ["default", *PROFILE_NAMES]


render = load_script(ROOT / "packaging" / "helm" / "render.py")


def values_args(profile: str) -> list[str]:
    return [] if profile == "default" else ["--values", str(PROFILES / f"{profile}.yaml")]


@functools.cache
def rendered(profile: str, *sets: str) -> tuple[dict[str, Any], ...]:
    args = [tool("helm"), "template", "vgpumon", str(CHART), "--namespace", "vgpumon"]
    args += values_args(profile)
    for assignment in sets:
        args += ["--set", assignment]
    result = run(args)
    assert result.returncode == 0, result.stderr
    return tuple(documents(result.stdout))


def refused(profile: str, *sets: str) -> str:
    args = [tool("helm"), "template", "vgpumon", str(CHART), *values_args(profile)]
    for assignment in sets:
        args += ["--set", assignment]
    result = run(args)
    assert result.returncode != 0, "helm rendered what the chart must refuse"
    return result.stderr


def one(docs: tuple[dict[str, Any], ...], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [d for d in docs if d["kind"] == kind and name in (None, d["metadata"]["name"])]
    return found


def pod(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return dict(one(docs, "DaemonSet")["spec"]["template"]["spec"])


def exporter(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    return next(c for c in pod(docs)["containers"] if c["name"] == "vgpumon")


def test_every_profile_is_documented() -> None:
    text = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    for name in PROFILE_NAMES:
        assert f"profiles/{name}.yaml" in text, name


@pytest.mark.parametrize("profile", DOCUMENTED)
def test_helm_lint(profile: str) -> None:
    result = run([tool("helm"), "lint", "--strict", str(CHART), *values_args(profile)])
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("profile", DOCUMENTED)
def test_rendered_objects_are_valid(profile: str) -> None:
    version = kubernetes_validate.latest_version()
    docs = rendered(profile)
    assert docs
    for doc in docs:
        if doc["kind"] in OPERATOR_KINDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert doc["spec"]
            continue
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_misspelt_field_is_caught() -> None:
    broken = json.loads(json.dumps(one(rendered("default"), "DaemonSet")))
    broken["spec"]["template"]["spec"]["hostPid"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, kubernetes_validate.latest_version(), strict=True)


def test_kustomize_base_is_the_charts_default_rendering() -> None:
    committed = (K8S / "vgpumon.yaml").read_text(encoding="utf-8")
    assert committed == render.base(tool("helm")), "run python packaging/helm/render.py"
    assert "managed-by" not in committed and "helm.sh/chart" not in committed
    built = kustomize(K8S)
    assert {d["metadata"].get("namespace") for d in built if d["kind"] != "Namespace"} == {
        "vgpumon"
    }


def test_the_charts_rules_and_dashboards_are_their_sources() -> None:
    for path, text in render.chart_files().items():
        assert path.read_text(encoding="utf-8") == text, (
            f"run python packaging/helm/render.py ({path.name})"
        )
    shipped = {p.name for p in (CHART / "files" / "dashboards").glob("*.json")}
    assert shipped == {p.name for p in (ROOT / "dashboards" / "grafana").glob("*.json")}


# ---------------------------------------------------------------- finding 1: NVML on vGPU hosts


def test_vm_vgpu_reaches_nvml_without_the_runtime_class() -> None:
    docs = rendered("vm-vgpu")
    spec = pod(docs)
    container = exporter(docs)
    assert "runtimeClassName" not in spec
    # Only vm-vgpu nodes.
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "nvidia.com/gpu.workload.config", "operator": "In", "values": ["vm-vgpu"]} in (
        term["matchExpressions"]
    )
    # The vGPU manager's driver root, read-only, following a driver container that (re)starts.
    volume = next(v for v in spec["volumes"] if v["name"] == "driver-root")
    assert volume["hostPath"] == {"path": "/run/nvidia/driver", "type": "Directory"}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "driver-root")
    assert mount["readOnly"] is True and mount["mountPropagation"] == "HostToContainer"
    # NVML is loaded from inside that mount (vgpumon/nvml/library.py).
    env = {e["name"]: e.get("value") for e in container["env"]}
    library = env["VGPUMON_NVML_LIBRARY"]
    assert library == f"{mount['mountPath']}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    # The device nodes: privileged, but as uid 10001 with a read-only root and nothing else.
    sc = container["securityContext"]
    assert sc["privileged"] is True and sc["readOnlyRootFilesystem"] is True
    assert "runAsUser" not in sc and spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["hostPID"] is False and spec["automountServiceAccountToken"] is False
    # Nothing else of the host: the driver root is the only hostPath.
    assert [v["name"] for v in spec["volumes"] if "hostPath" in v] == ["driver-root"]


def test_the_default_is_container_nodes_through_the_runtime_class() -> None:
    docs = rendered("default")
    spec = pod(docs)
    assert spec["runtimeClassName"] == "nvidia"
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {
        "key": "nvidia.com/gpu.workload.config",
        "operator": "NotIn",
        "values": ["vm-vgpu", "vm-passthrough"],
    } in term["matchExpressions"]
    sc = exporter(docs)["securityContext"]
    assert sc["capabilities"]["drop"] == ["ALL"] and sc["allowPrivilegeEscalation"] is False


def test_device_plugin_access_is_not_privileged() -> None:
    docs = rendered("vm-vgpu-device-plugin")
    container = exporter(docs)
    assert "privileged" not in container["securityContext"]
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"]["squat.ai/nvidia-nvml"] == 1
    assert "runtimeClassName" not in pod(docs)


def test_labelled_nodes_mount_only_the_library_directory() -> None:
    docs = rendered("labelled-nodes")
    spec = pod(docs)
    assert spec["nodeSelector"] == {"vgpumon.io/exporter": "true"}
    assert "affinity" not in spec or not spec["affinity"]
    volume = next(v for v in spec["volumes"] if v["name"] == "driver-root")
    assert volume["hostPath"]["path"] == "/usr/lib/x86_64-linux-gnu"
    env = {e["name"]: e.get("value") for e in exporter(docs)["env"]}
    assert env["VGPUMON_NVML_LIBRARY"] == "/driver-root/libnvidia-ml.so.1"
    assert "the whole host" in refused("labelled-nodes", "nvml.hostDriver.root=/")


def test_root_in_a_privileged_container_is_refused() -> None:
    message = refused("vm-vgpu", "attribution.kubelet.enabled=true")
    assert "uid 0" in message and "devicePlugin" in message
    allowed = exporter(
        rendered(
            "vm-vgpu",
            "attribution.kubelet.enabled=true",
            "nvml.hostDriver.allowPrivilegedRoot=true",
        )
    )
    assert allowed["securityContext"]["runAsUser"] == 0


def test_vm_passthrough_scrapes_the_guests() -> None:
    docs = rendered("vm-passthrough")
    assert not [d for d in docs if d["kind"] == "DaemonSet"]
    monitor = one(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "kubevirt.io": "virt-launcher",
        "vgpumon.io/scrape": "true",
    }
    relabel = monitor["spec"]["podMetricsEndpoints"][0]["relabelings"]
    address = next(r for r in relabel if r.get("targetLabel") == "__address__")
    assert address["replacement"] == "${1}:9839"
    assert any(r.get("targetLabel") == "vm" for r in relabel)


# ---------------------------------------------------------------- finding 2: pods and VMs


def test_pods_and_vms_are_wired_with_the_least_rights() -> None:
    docs = rendered("vm-vgpu-device-plugin")
    spec = pod(docs)
    container = exporter(docs)
    args = build_parser("serve").parse_args(container["args"])
    socket_dir = "/var/lib/kubelet/pod-resources"
    assert args.kubelet_socket == f"{socket_dir}/kubelet.sock" and args.kubernetes_api is True
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == socket_dir)
    assert mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == socket_dir
    # The socket admits root: uid 0 without any capability.
    sc = container["securityContext"]
    assert sc["runAsUser"] == 0 and sc["capabilities"]["drop"] == ["ALL"]
    # The token is mounted, and all it may do is get pods.
    assert spec["automountServiceAccountToken"] is True
    role = one(docs, "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": "vgpumon"}
    ]


def test_no_token_and_no_role_without_the_api_server() -> None:
    docs = rendered("container")
    assert pod(docs)["automountServiceAccountToken"] is False
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role")]
    assert one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    args = build_parser("serve").parse_args(exporter(docs)["args"])
    assert args.kubelet_socket and args.kubernetes_pod_series is True
    assert "the VMs of pods the kubelet reports" in refused(
        "default", "attribution.kubernetesApi.enabled=true"
    )


def test_the_image_carries_the_kubelet_client() -> None:
    """The chart's kubelet attribution needs grpcio and protobuf (the kubernetes extra): the
    image installs them, pinned in its lock file."""
    text = (ROOT / "packaging" / "container" / "Containerfile").read_text(encoding="utf-8")
    assert "requirements.lock" in text
    lock = (ROOT / "packaging" / "container" / "requirements.lock").read_text(encoding="utf-8")
    for package in ("grpcio==", "protobuf==", "nvidia-ml-py==", "h11=="):
        assert package in lock, package


# ---------------------------------------------------------------- finding 3: kube-prometheus-stack


def test_kube_prometheus_stack_selects_the_monitors_and_rules() -> None:
    docs = rendered("kube-prometheus-stack")
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert one(docs, kind)["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == "30s"
    # Another release name, and labels of one's own.
    docs = rendered(
        "default", "prometheusLabels.release=monitoring", "serviceMonitor.labels.team=gpu"
    )
    labels = one(docs, "ServiceMonitor")["metadata"]["labels"]
    assert labels["release"] == "monitoring" and labels["team"] == "gpu"
    assert one(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "monitoring"


def test_dashboards_are_configmaps_for_the_grafana_sidecar() -> None:
    docs = rendered("kube-prometheus-stack")
    maps = [d for d in docs if d["kind"] == "ConfigMap" and "-dashboard-" in d["metadata"]["name"]]
    sources = {p.name: p for p in (ROOT / "dashboards" / "grafana").glob("*.json")}
    assert len(maps) == len(sources)
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "monitoring"
        ((name, text),) = cm["data"].items()
        assert json.loads(text) == json.loads(sources[name].read_text(encoding="utf-8"))


def test_prometheusrule_is_the_rules_files_with_the_runbook_base() -> None:
    gen = render._rule_generator()
    rule = one(rendered("default"), "PrometheusRule")
    assert rule["spec"]["groups"] == gen.groups()
    base = "https://wiki.example.net/vgpumon"
    rule = one(rendered("default", f"prometheusRule.runbookBase={base}"), "PrometheusRule")
    assert rule["spec"]["groups"] == gen.groups(base)


# ------------------------------------------------------- finding 4: NPD reaches the exporter


def npd_config(docs: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    cm = one(docs, "ConfigMap", "vgpumon-node-problem-detector")
    return dict(json.loads(cm["data"]["vgpumon-check.json"]))


def test_npd_runs_in_the_exporters_pod_and_asks_it_on_loopback() -> None:
    docs = rendered("node-problem-detector")
    spec = pod(docs)
    npd = next(c for c in spec["containers"] if c["name"] == "node-problem-detector")
    port = next(p["containerPort"] for p in exporter(docs)["ports"] if p["name"] == "metrics")
    # Same pod, same network namespace: 127.0.0.1 is the exporter's.
    assert "hostNetwork" not in spec
    config = npd_config(docs)
    entrypoint = next(
        line.split('"')[1]
        for line in (ROOT / "packaging" / "container" / "Containerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    )
    assert npd["image"] == exporter(docs)["image"]  # where `vgpumon check` is
    checks = set()
    for rule in config["rules"]:
        assert rule["path"] == entrypoint
        args = build_parser("check").parse_args(rule["args"])
        assert args.url == f"http://127.0.0.1:{port}"
        checks.add(args.check)
    assert checks == {"license", "gpus", "xid", "scheduler", "recovery", "repair"}
    assert {c["type"] for c in config["conditions"]} == {r["condition"] for r in config["rules"]}
    # NPD reads the config the ConfigMap holds, and its binary from the init container's copy.
    flag = next(a for a in npd["args"] if a.startswith("--config.custom-plugin-monitor="))
    mounts = {m["name"]: m["mountPath"] for m in npd["volumeMounts"]}
    assert flag.partition("=")[2] == f"{mounts['npd-config']}/vgpumon-check.json"
    (init,) = spec["initContainers"]
    copy_to = init["command"][-1]
    assert npd["command"] == [copy_to] and copy_to.startswith(mounts["npd-bin"] + "/")
    assert spec["automountServiceAccountToken"] is True
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == "system:node-problem-detector"


def test_npd_checks_follow_tls() -> None:
    config = npd_config(
        rendered("node-problem-detector", "webConfig.secretName=vgpumon-web-config")
    )
    for rule in config["rules"]:
        args = build_parser("check").parse_args(rule["args"])
        assert args.url.startswith("https://127.0.0.1:") and args.ca_file == "/etc/vgpumon/ca.crt"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


NO_VERDICT_YET = "scheduler: no verdict: window too short\n"


def test_npd_checks_reach_a_running_exporter(tmp_path: Path) -> None:
    """The rendered rules, run as NPD runs them, against `vgpumon serve` listening as the
    rendered container does: each answers from the exporter (exit 0 or 1), never 'cannot tell'
    (but for the scheduler check, whose verdict needs half a minute of the exporter's counters:
    until then it says so, from the exporter)."""
    port = free_port()
    docs = rendered("node-problem-detector", f"serve.port={port}")
    args = exporter(docs)["args"]
    vgpumon = str(Path(sys.executable).parent / "vgpumon")
    serve = subprocess.Popen(
        [vgpumon, *args, "--sim", "kvm-vgpu-timesliced"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        for rule in npd_config(docs)["rules"]:
            while True:
                result = subprocess.run(
                    [vgpumon, *rule["args"]], capture_output=True, text=True, timeout=30
                )
                if result.returncode in (0, 1) or time.monotonic() > deadline:
                    break
                if rule["args"][1] == "scheduler" and result.stdout == NO_VERDICT_YET:
                    break
                time.sleep(0.2)
            answered = result.returncode in (0, 1) or result.stdout == NO_VERDICT_YET
            assert answered, (rule["args"], result.stdout, result.stderr)
    finally:
        serve.terminate()
        serve.wait(timeout=30)


# ---------------------------------------------------------------- the kustomize components agree


COMPONENT_VALUES = {
    "processes": ["serve.processSeries=true"],
    "node-features": ["nodeFeatures.enabled=true"],
    "web-config": ["webConfig.secretName=vgpumon-web-config"],
    "basic-auth": [
        "webConfig.secretName=vgpumon-web-config",
        "serviceMonitor.basicAuthSecretName=vgpumon-scrape-auth",
    ],
}


def comparable(docs: Any) -> dict[str, Any]:
    """What a component changes: the pod spec (lists in a set order) and the scrape endpoint."""
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    spec = json.loads(json.dumps(ds["spec"]["template"]["spec"]))
    for container in spec["containers"]:
        container["args"] = sorted(container["args"])
        container["volumeMounts"] = sorted(
            container.get("volumeMounts", []), key=lambda m: m["name"]
        )
        container.pop("image")
    spec["volumes"] = sorted(spec.get("volumes", []), key=lambda v: v["name"])
    endpoint = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]["endpoints"][0]
    return {"pod": spec, "endpoint": endpoint}


@pytest.mark.parametrize("component", sorted(COMPONENT_VALUES))
def test_kustomize_components_match_the_chart(tmp_path: Path, component: str) -> None:
    components = ("web-config", "basic-auth") if component == "basic-auth" else (component,)
    built = kustomize(overlay(tmp_path, components))
    assert comparable(built) == comparable(rendered("default", *COMPONENT_VALUES[component]))
