"""Names from NVML that are not valid UTF-8 are kept, with replacement characters (issue 12).

pynvml decodes every string strictly, so a GPU, vGPU type or process name holding a byte that is
not UTF-8 raises UnicodeDecodeError inside the call. The simulator reproduces that for a name that
carries the byte as a surrogate escape (scenario files refuse those, so the test sets the name on
the parsed scenario); the session turns the error back into the name.
"""

from __future__ import annotations

import dataclasses

from vgpumon.collect import Sampler, SamplerConfig
from vgpumon.metrics.exposition import render
from vgpumon.nvml.session import NvmlSession
from vgpumon.sim import create, parse_scenario

SCENARIO = """
name: bad-utf8
description: a GPU and a process whose names hold a byte that is not UTF-8
seed: 2
gpus:
  - model: l40s
    processes:
      - {pid: 4242, name: render, memory: 1GiB}
"""
RAW_BYTE = "\udcff"  # surrogate escape of the byte 0xFF (not UTF-8 on its own)


async def test_names_that_are_not_utf8_are_exported_with_replacement_characters() -> None:
    scenario = parse_scenario(SCENARIO, "bad-utf8.yaml")
    gpu = scenario.gpus[0]
    process = dataclasses.replace(gpu.processes[0], name=f"rend{RAW_BYTE}r")
    gpu = dataclasses.replace(gpu, name=f"NVIDIA {RAW_BYTE} L40S", processes=(process,))
    session = NvmlSession(create(dataclasses.replace(scenario, gpus=(gpu,))), "sim")
    session.init()
    sampler = Sampler(session, SamplerConfig())
    try:
        snap = await sampler.cycle()
    finally:
        sampler.close()
    got = snap.gpus[0]
    assert got.name == "NVIDIA \ufffd L40S"
    assert [p.name for p in got.processes or ()] == ["rend\ufffdr"]
    body = render(snap).decode("utf-8")
    assert 'name="NVIDIA \ufffd L40S"' in body
