"""The committed pod-resources stubs are exactly what grpcio-tools generates from the proto."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ci_helpers import optional_binding

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path("vgpumon/collect/enrich/podresources")
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def test_stubs_regenerate_identically(tmp_path: Path) -> None:
    optional_binding("grpc_tools", "dev")
    (tmp_path / PACKAGE).mkdir(parents=True)
    shutil.copy(ROOT / PACKAGE / "api.proto", tmp_path / PACKAGE / "api.proto")
    # The command of vgpumon/collect/enrich/podresources/__init__.py, in a scratch copy.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            "--python_out=.",
            "--pyi_out=.",
            "--grpc_python_out=.",
            str(PACKAGE / "api.proto"),
        ],
        cwd=tmp_path,
        check=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / PACKAGE / name).read_text()
        assert fresh == (ROOT / PACKAGE / name).read_text(), f"{name} differs: regenerate it"


def test_the_proto_keeps_its_licence_and_upstream_service() -> None:
    text = (ROOT / PACKAGE / "api.proto").read_text()
    assert "Licensed under the Apache License, Version 2.0" in text
    assert "package v1;" in text and "service PodResourcesLister" in text
