"""Names from NVML that are not valid UTF-8 are kept, with replacement characters (issue 12).

pynvml decodes every string strictly, so a GPU, vGPU type or process name holding a byte that is
not UTF-8 raises UnicodeDecodeError inside the call. The simulator reproduces that for names a
scenario writes with ``\\udcXX`` escapes; the session turns the error back into the name.
"""

from __future__ import annotations

from pathlib import Path

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.export.exposition import render
from vgpumon.nvml.loader import open_session

SCENARIO = r"""
name: bad-utf8
description: names with a byte that is not UTF-8
seed: 2
gpus:
  - model: l40s
    name: "NVIDIA \udcff L40S"
    virtualization_mode: host_vgpu
    vgpu:
      types:
        - {id: 1152, name: "NVIDIA L40S-8Q \udcfe", framebuffer: 8GiB, max_instances: 6}
      instances:
        - {id: 1, type: 1152, vm_id: vm-one}
"""


async def test_names_that_are_not_utf8_are_exported_with_replacement_characters(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bad-utf8.yaml"
    path.write_text(SCENARIO, encoding="utf-8", errors="surrogatepass")
    sampler = Sampler(open_session(sim=str(path)), SamplerConfig())
    try:
        snap = await sampler.cycle()
    finally:
        sampler.close()
    gpu = snap.gpus[0]
    assert gpu.name == "NVIDIA \ufffd L40S"
    assert [t.name for t in gpu.vgpu_types if t.type_id == 1152] == ["NVIDIA L40S-8Q \ufffd"]
    body = render(snap).decode("utf-8")
    assert 'name="NVIDIA \ufffd L40S"' in body
