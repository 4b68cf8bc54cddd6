"""The node-features component: NFD's features.d mounted, serve writing into it (the chart's
node-problem-detector wiring is checked in test_helm_chart.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_tools import kustomize as build
from k8s_tools import overlay

from vgpumon.cli import build_parser

FEATURES_D = "/etc/kubernetes/node-feature-discovery/features.d"


def kustomize(tmp_path: Path, components: list[str]) -> list[dict[str, Any]]:
    return build(overlay(tmp_path, tuple(components)))


@pytest.mark.parametrize(
    "components", [["node-features"], ["processes", "web-config", "node-features"]]
)
def test_node_features_component_mounts_features_d(tmp_path: Path, components: list[str]) -> None:
    docs = kustomize(tmp_path, components)
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    flag = next(a for a in container["args"] if a.startswith("--kubernetes.nfd-features-file="))
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
