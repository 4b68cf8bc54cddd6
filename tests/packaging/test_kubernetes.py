"""The kustomize base: valid against the Kubernetes schemas (kubernetes-validate ships them), and
the rules generator for a PrometheusRule or rules file outside the chart (tests/packaging/
test_helm_chart.py checks that the base is the chart's rendering, and the components)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_tools import load_script

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
    assert listed == on_disk == {"namespace.yaml", "vgpumon.yaml"}


def test_core_manifests_are_valid() -> None:
    kinds = set()
    for resource in base_resources():
        kinds.add(resource["kind"])
        if resource["kind"] in OPERATOR_KINDS:
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                validate(resource)
            continue
        validate(resource)
    assert {
        "Namespace",
        "ServiceAccount",
        "DaemonSet",
        "Service",
        "ConfigMap",
    } | OPERATOR_KINDS <= (kinds)


def test_an_invalid_manifest_is_caught() -> None:
    daemonset = next(r for r in base_resources() if r["kind"] == "DaemonSet")
    broken = copy.deepcopy(daemonset)
    broken["spec"]["template"]["spec"]["hostPid"] = True  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


def test_host_pid_only_with_per_process_series() -> None:
    daemonset = next(r for r in base_resources() if r["kind"] == "DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostPID"] is False
    assert "--process-series" not in pod["containers"][0]["args"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["securityContext"]["runAsNonRoot"] is True


def load_generator() -> Any:
    return load_script(K8S / "generate_prometheusrule.py")


def test_the_rules_generator_writes_the_rules_files(tmp_path: Path) -> None:
    out = tmp_path / "rule.yaml"
    gen = load_generator()
    assert gen.main(["--out", str(out)]) == 0
    rule = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert rule["spec"]["groups"] == gen.groups()
    rule_files = {p.name for p in gen.RULE_FILES}
    assert rule_files == {p.name for p in RULES.parent.glob("*.rules.yml")}, "every rules file"
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")


def test_runbook_links_follow_a_configured_base(tmp_path: Path) -> None:
    """One base for every runbook link, set on the command line (mixin style)."""
    base = "https://wiki.example.net/gpu/vgpumon-runbooks"
    out, rules_out = tmp_path / "rule.yaml", tmp_path / "vgpumon.rules.yml"
    gen = load_generator()
    assert gen.main(["--runbook-base", base, "--out", str(out), "--rules-out", str(rules_out)]) == 0
    for doc in (yaml.safe_load(out.read_text())["spec"], yaml.safe_load(rules_out.read_text())):
        alerts = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
        assert alerts
        for rule in alerts:
            assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"
    # The plain rules file keeps everything else of the shipped one.
    shipped = [g for path in gen.RULE_FILES for g in yaml.safe_load(path.read_text())["groups"]]
    rewritten = yaml.safe_load(rules_out.read_text())["groups"]
    for a, b in zip(shipped, rewritten, strict=True):
        for ra, rb in zip(a["rules"], b["rules"], strict=True):
            assert {k: v for k, v in ra.items() if k != "annotations"} == {
                k: v for k, v in rb.items() if k != "annotations"
            }


def test_a_relative_runbook_base_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        load_generator().main(["--runbook-base", "docs/runbooks.md", "--out", "/dev/null"])
    assert exit_info.value.code != 0
    assert "absolute http(s) URL" in capsys.readouterr().err


def test_the_kustomization_names_the_image() -> None:
    daemonset = next(r for r in base_resources() if r["kind"] == "DaemonSet")
    image = daemonset["spec"]["template"]["spec"]["containers"][0]["image"]
    (entry,) = kustomization(K8S)["images"]
    assert entry["name"] == image.split(":")[0]
    assert "REGISTRY" in (K8S / "kustomization.yaml").read_text(encoding="utf-8")
