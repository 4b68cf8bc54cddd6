"""The snapshot's JSON (``/api/v1/snapshot``, ``vgpumon snapshot --json``): ``to_json`` writes the
dataclasses as the encoder meets them; the text must be exactly that of the plain-data tree
``to_dict`` builds, and read back to the same snapshot."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from export_helpers import rich_snapshot

from vgpumon.collect.base import SamplerConfig
from vgpumon.collect.sampler import Sampler
from vgpumon.model import Snapshot, from_json, to_dict, to_json
from vgpumon.nvml.loader import open_session


def sampled(name: str) -> Snapshot:
    async def two_cycles() -> Snapshot:
        sampler = Sampler(open_session(sim=name), SamplerConfig(deadline_seconds=2.0))
        try:
            await sampler.cycle()
            return await sampler.cycle()
        finally:
            sampler.close()

    return asyncio.run(two_cycles())


@pytest.mark.parametrize("indent", [None, 2])
def test_json_text_is_that_of_the_plain_data_tree(indent: int | None) -> None:
    snapshot = rich_snapshot()
    gpu = dataclasses.replace(snapshot.gpus[0], xid_errors={79: 2, 13: 1})  # integer keys
    snapshot = dataclasses.replace(snapshot, gpus=(gpu, *snapshot.gpus[1:]))
    text = to_json(snapshot, indent=indent)
    assert text == json.dumps(to_dict(snapshot), indent=indent)
    assert '"79": 2' in text
    assert from_json(text) == snapshot


@pytest.mark.parametrize("name", ["kvm-vgpu-timesliced", "a100-mig-mixed", "hgx-8xh100-nvlink"])
def test_sampled_snapshots_write_the_same_text_and_read_back(name: str) -> None:
    snapshot = sampled(name)
    assert to_json(snapshot) == json.dumps(to_dict(snapshot))
    assert from_json(to_json(snapshot)) == snapshot


def test_something_that_is_not_snapshot_data_is_refused() -> None:
    snapshot = dataclasses.replace(rich_snapshot(), source=object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not part of a snapshot"):
        to_json(snapshot)
