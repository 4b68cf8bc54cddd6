"""Numbers outside physical sense in scenario files are refused with key and line (issue: wrong
numbers were accepted, wrapped or clamped silently, or crashed the simulator)."""

from __future__ import annotations

import pytest

from vgpumon.errors import ConfigError
from vgpumon.sim import parse_scenario

L40S_HOST = """\
gpus:
  - model: l40s
    virtualization_mode: host_vgpu
    vgpu:
      types:
        - {{id: 1152, name: "NVIDIA L40S-8Q", framebuffer: {framebuffer}, max_instances: 2}}
      instances:
{instances}
"""


def host(instances: str, framebuffer: str = "8GiB") -> str:
    return L40S_HOST.format(framebuffer=framebuffer, instances=instances)


ONE = "        - {type: 1152, framebuffer_used: 1GiB}"


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        # was wrapped modulo 2^64
        (
            "gpus:\n  - model: h100-sxm-80gb\n    memory: {total: 1e30}\n",
            "memory.total",
            "at most 1 PiB",
        ),
        # was OverflowError
        (
            "gpus:\n  - model: h100-sxm-80gb\n    memory: {total: 1e309GiB}\n",
            "memory.total",
            "not a finite number",
        ),
        # was clamped to 0
        (
            "gpus:\n  - model: h100-sxm-80gb\n    power: {draw: -50W}\n",
            "power.draw",
            "must be at least 0",
        ),
        (
            "gpus:\n  - model: h100-sxm-80gb\n    power: {limit: 1e9}\n",
            "power.limit",
            "must be at most 10000",
        ),
        (
            "gpus:\n  - model: h100-sxm-80gb\n    temperature: {gpu: 1e308}\n",
            "temperature.gpu",
            "must be at most 200",
        ),
        (
            "gpus:\n  - model: h100-sxm-80gb\n    temperature: {shutdown: -300}\n",
            "temperature.shutdown",
            "must be at least -40",
        ),
        (
            "gpus:\n  - model: h100-sxm-80gb\n    sm_count: 100000000000000000000\n",
            "sm_count",
            "an integer from 1 to 1024",
        ),
        ("gpus:\n  - model: h100-sxm-80gb\n    sm_count: 1e20\n", "sm_count", "an integer"),
        (
            "gpus:\n  - model: h100-sxm-80gb\n    pcie: {replay_counter: 100000000000000000000}\n",
            "pcie.replay_counter",
            "an integer >= 0",
        ),
        # was ZeroDivisionError
        (host(ONE, framebuffer="0"), "framebuffer", "must be at least 1"),
        # was clamped silently to the framebuffer
        (
            host("        - {type: 1152, framebuffer_used: 9GiB}"),
            "framebuffer_used",
            "more than the 8589934592 bytes",
        ),
        # more vGPUs than the type allows, at the same time
        (host("\n".join([ONE] * 3)), "vgpu.instances", "3 vGPUs of type 'NVIDIA L40S-8Q'"),
    ],
)
def test_out_of_range_numbers_are_refused(text: str, where: str, why: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(text, "bad.yaml")
    message = str(info.value)
    assert message.startswith("scenario bad.yaml line "), message
    assert where in message and why in message, message
    assert "\n" not in message


def test_instances_that_never_overlap_may_exceed_the_count_in_total() -> None:
    staggered = "\n".join(
        f"        - {{type: 1152, framebuffer_used: 1GiB, start: {i * 10}s, stop: {i * 10 + 10}s}}"
        for i in range(4)
    )
    scenario = parse_scenario(host(staggered), "ok.yaml")
    assert scenario.gpus
