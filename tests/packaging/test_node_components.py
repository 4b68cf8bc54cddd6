"""The Kubernetes pieces of node capacity and health: the node-features component (NFD's
features.d mounted, serve writing into it) and the node-problem-detector custom plugin config."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpumon.cli import build_parser
from vgpumon.commands.check import CHECKS

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "packaging" / "kubernetes"
NPD = K8S / "node-problem-detector"
FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"


def kustomize(tmp_path: Path, components: list[str]) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (its kustomize builds the overlay)")
    base = tmp_path / "base"
    shutil.copytree(K8S, base)
    for name in ("tls.crt", "tls.key", "ca.crt"):  # web-config's Secret is built from these
        (base / "components" / "web-config" / name).write_text("placeholder\n")
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    spec = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["../base"],
        "components": [f"../base/components/{c}" for c in components],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    result = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.mark.parametrize(
    "components", [["node-features"], ["processes", "web-config", "node-features"]]
)
def test_node_features_component_mounts_features_d(tmp_path: Path, components: list[str]) -> None:
    docs = kustomize(tmp_path, components)
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    flag = next(a for a in container["args"] if a.startswith("--nfd-features-file="))
    path = Path(flag.partition("=")[2])
    assert str(path.parent) == FEATURES_D and not path.name.startswith(".")
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == FEATURES_D)
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == FEATURES_D
    # Writing root's directory without any capability: uid 0, nothing more.
    sc = container["securityContext"]
    assert sc["runAsUser"] == 0 and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    if "processes" in components:
        assert "--process-series" in container["args"]
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kubernetes_validate.validate(ds, kubernetes_validate.latest_version(), strict=True)
    # serve accepts the flag the component adds.
    args = build_parser("serve").parse_args(container["args"])
    assert args.nfd_features_file == str(path)


def npd_config() -> dict[str, Any]:
    return dict(json.loads((NPD / "vgpumon-check.json").read_text(encoding="utf-8")))


def test_npd_rules_run_vgpumon_check() -> None:
    config = npd_config()
    assert config["plugin"] == "custom"
    conditions = {c["type"] for c in config["conditions"]}
    assert {"VgpuLicenseProblem", "GpuLost"} <= conditions
    entrypoint = next(
        line.split('"')[1]
        for line in (ROOT / "packaging" / "container" / "Containerfile").read_text().splitlines()
        if line.startswith("ENTRYPOINT")
    )
    checks = set()
    for rule in config["rules"]:
        assert rule["type"] == "permanent" and rule["condition"] in conditions
        assert rule["path"] == entrypoint
        args = build_parser("check").parse_args(rule["args"])
        checks.add(args.check)
        assert args.url  # the exporter's counts: Xids since it started, not one window's
    assert checks == set(CHECKS) - {"all"}  # every check has its condition


def test_npd_configmap_carries_the_config(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed")
    result = subprocess.run(
        [kubectl, "kustomize", str(NPD)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    cm = yaml.safe_load(result.stdout)
    assert cm["kind"] == "ConfigMap"
    assert json.loads(cm["data"]["vgpumon-check.json"]) == npd_config()
