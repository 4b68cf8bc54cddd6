"""Kubernetes manifests: valid against the Kubernetes schemas (kubernetes-validate ships them),
with each optional component's patches applied too; the PrometheusRule is the rules file."""

from __future__ import annotations

import copy
import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "packaging" / "kubernetes"
RULES = ROOT / "packaging" / "prometheus" / "vgpumon.rules.yml"
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}  # CRDs: no bundled schema

kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="needs kubernetes-validate (a dev dependency)"
)


def kustomization(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load((path / "kustomization.yaml").read_text(encoding="utf-8")))


def base_resources() -> list[dict[str, Any]]:
    docs = []
    for name in kustomization(K8S)["resources"]:
        docs.extend(d for d in yaml.safe_load_all((K8S / name).read_text(encoding="utf-8")) if d)
    return docs


def validate(resource: dict[str, Any]) -> None:
    kubernetes_validate.validate(resource, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_lists_every_manifest() -> None:
    listed = set(kustomization(K8S)["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk


def test_core_manifests_are_valid() -> None:
    kinds = set()
    for resource in base_resources():
        kinds.add(resource["kind"])
        if resource["kind"] in OPERATOR_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                validate(resource)
            continue
        validate(resource)
    assert {"Namespace", "ServiceAccount", "DaemonSet", "Service"} | OPERATOR_KINDS <= kinds


def test_an_invalid_manifest_is_caught() -> None:
    daemonset = next(r for r in base_resources() if r["kind"] == "DaemonSet")
    broken = copy.deepcopy(daemonset)
    broken["spec"]["template"]["spec"]["hostPid"] = True  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON-patch subset the components use: add (with "-" to append) and replace."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = op["path"].strip("/").split("/")
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op["op"] == "add" and isinstance(node, list):
            node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace":
                assert last in node, f"replace of a missing {op['path']}"
            node[last] = op["value"]
        else:
            raise AssertionError(f"unsupported op {op['op']}")
    return doc


@pytest.mark.parametrize("component", ["processes", "web-config"])
def test_components_patch_into_valid_manifests(component: str) -> None:
    spec = kustomization(K8S / "components" / component)
    assert spec["kind"] == "Component"
    resources = {r["kind"]: r for r in base_resources()}
    for patch in spec["patches"]:
        kind = patch["target"]["kind"]
        resources[kind] = apply_patch(resources[kind], yaml.safe_load(patch["patch"]))
    for resource in resources.values():
        if resource["kind"] not in OPERATOR_KINDS:
            validate(resource)
    pod = resources["DaemonSet"]["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    if component == "processes":
        assert pod["hostPID"] is True and "--processes" in args
    else:
        for generated in spec["secretGenerator"][0]["files"]:
            assert generated in {"web-config.yml", "tls.crt", "tls.key", "ca.crt"}
        assert (K8S / "components" / component / "web-config.yml").exists()
        assert any(a.startswith("--web.config.file=") for a in args)


def test_host_pid_only_with_per_process_series() -> None:
    daemonset = next(r for r in base_resources() if r["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostPID"] is False
    assert "--processes" not in pod["containers"][0]["args"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["securityContext"]["runAsNonRoot"] is True


def load_generator() -> Any:
    path = K8S / "generate_prometheusrule.py"
    spec = importlib.util.spec_from_file_location("vgpumon_generate_prometheusrule", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_prometheusrule_is_the_rules_file() -> None:
    committed = (K8S / "prometheusrule.yaml").read_text(encoding="utf-8")
    assert committed == load_generator().render(), (
        "run python packaging/kubernetes/generate_prometheusrule.py"
    )
    rule = yaml.safe_load(committed)
    groups = [
        group
        for path in (RULES, RULES.with_name("vgpumon-metering.rules.yml"))
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    ]
    assert rule["spec"]["groups"] == groups
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
