"""The kustomize components combine in any order: each adds its own volumes, mounts and flags
without replacing another's (web-config once set the volume list whole, so node-features listed
before it lost its volume and left a mount without one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from k8s_tools import kustomize, overlay

COMPONENTS = ("processes", "web-config", "node-features", "basic-auth")


def pod_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    return dict(ds["spec"]["template"]["spec"])


def shape(pod: dict[str, Any]) -> tuple[Any, ...]:
    container = pod["containers"][0]
    return (
        sorted(v["name"] for v in pod.get("volumes", [])),
        sorted(m["mountPath"] for m in container.get("volumeMounts", [])),
        sorted(container["args"]),
        container["securityContext"],
        container["readinessProbe"],
        pod["hostPID"],
    )


@pytest.mark.parametrize("first", COMPONENTS)
def test_component_order_does_not_matter(tmp_path: Path, first: str) -> None:
    """Every order of the four components builds the same pod (each one first once, and the
    reverse of the listed order), and every mount has its volume."""
    rest = [c for c in COMPONENTS if c != first]
    orders = [(first, *rest), (first, *reversed(rest))]
    shapes = []
    for order in orders:
        pod = pod_of(kustomize(overlay(tmp_path, order)))
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for mount in pod["containers"][0].get("volumeMounts", []):
            assert mount["name"] in volumes, (order, mount)
        shapes.append(shape(pod))
    reference = shape(pod_of(kustomize(overlay(tmp_path, COMPONENTS))))
    for order, got in zip(orders, shapes, strict=True):
        assert got == reference, order


def test_node_features_before_web_config_keeps_its_volume(tmp_path: Path) -> None:
    pod = pod_of(kustomize(overlay(tmp_path, ("node-features", "web-config"))))
    assert {"nfd-features", "web-config"} <= {v["name"] for v in pod["volumes"]}
