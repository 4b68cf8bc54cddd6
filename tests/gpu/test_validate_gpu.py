"""``vgpumon validate`` on a real GPU: the whole ladder passes (skipped without GPU or cuda-core).

About a minute: nine steps of 2 s settle and 3 s measurement, plus three worker start-ups.
"""

from __future__ import annotations

import json

import pytest

from vgpumon.cli import main
from vgpumon.loadgen.runner import cuda_core_installed

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not cuda_core_installed(), reason="needs cuda-core (the [load] extra)")
def test_full_ladder_passes_on_gpu_0(capsys):
    code = main(["validate", "--device", "0", "--json", "--no-progress"])
    data = json.loads(capsys.readouterr().out)
    assert data["failures"] == []
    assert code == 0 and data["status"] == "pass"
    assert [s["status"] for s in data["steps"]].count("pass") >= 8
    duty = next(s for s in data["steps"] if s["name"] == "duty-0.50")
    assert len(duty["workers"]) == 1 and duty["workers"][0]["pid"] > 0
