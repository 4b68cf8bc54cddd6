"""The `vgpumon serve` command lines in the packaging are ones the real parser accepts."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from vgpumon.cli import build_parser
from vgpumon.errors import VgpumonError

PACKAGING = Path(__file__).resolve().parents[2] / "packaging"


def parse(argv: list[str]) -> None:
    build_parser("serve").parse_args(argv)


def systemd_argvs() -> list[list[str]]:
    """ExecStart with $VGPUMON_ARGS from the unit's default, from vgpumon.default and from the
    example line in vgpumon.default (systemd splits an unbraced $VAR into words)."""
    text = (PACKAGING / "systemd" / "vgpumon.service").read_text(encoding="utf-8")
    (line,) = re.findall(r"^ExecStart=(.+)$", text, re.M)
    defaults = (PACKAGING / "systemd" / "vgpumon.default").read_text(encoding="utf-8")
    values = re.findall(r"^Environment=VGPUMON_ARGS=(.+)$", text, re.M)
    values += re.findall(r'^#?\s*VGPUMON_ARGS="(.+)"$', defaults, re.M)
    assert len(values) == 3, values
    return [shlex.split(line.replace("$VGPUMON_ARGS", value))[1:] for value in values]


def container_argv() -> list[str]:
    text = (PACKAGING / "container" / "Containerfile").read_text(encoding="utf-8")
    (cmd,) = re.findall(r"^CMD (\[.+\])$", text, re.M)
    return list(json.loads(cmd))


def kubernetes_argvs() -> list[list[str]]:
    k8s = PACKAGING / "kubernetes"
    daemonset = next(  # the base: the Helm chart's default rendering
        d
        for d in yaml.safe_load_all((k8s / "vgpumon.yaml").read_text(encoding="utf-8"))
        if d and d["kind"] == "DaemonSet"
    )
    base = list(daemonset["spec"]["template"]["spec"]["containers"][0]["args"])
    argvs = [base]
    for component in sorted((k8s / "components").iterdir()):
        spec = yaml.safe_load((component / "kustomization.yaml").read_text(encoding="utf-8"))
        ops = [yaml.safe_load(patch["patch"]) for patch in spec["patches"]]
        extra = [
            op["value"]
            for patch_ops in ops
            if isinstance(patch_ops, list)  # JSON patches; a strategic merge patch is a dict
            for op in patch_ops
            if op["path"].endswith("/args/-")
        ]
        argvs.append(base + extra)
    return argvs


@pytest.mark.parametrize(
    "argv",
    [*systemd_argvs(), container_argv(), *kubernetes_argvs()],
    ids=[
        *["systemd"] * 3,
        "container",
        "kubernetes",
        *["kubernetes+component"] * (len(kubernetes_argvs()) - 1),
    ],
)
def test_serve_accepts_the_packaged_arguments(argv: list[str]) -> None:
    assert argv[0] == "serve"
    parse(argv)


def test_a_wrong_flag_is_refused() -> None:
    with pytest.raises(VgpumonError):
        parse(["serve", "--listen-address=:9839"])
