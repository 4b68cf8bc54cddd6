"""The ``field_values`` GPU key: a scenario answers any NVML field id itself."""

from __future__ import annotations

import pytest

import vgpumon.sim as sim
from vgpumon.errors import ConfigError
from vgpumon.sim.scenario import parse_scenario

TEXT = """\
gpus:
  - model: h100-sxm-80gb
    field_values:
      94: 7                     # modelled (PCIe replay counter): the scenario wins
      250: 12.5                 # not modelled
      300: -3                   # past what the simulated driver knows
      187: not_supported        # modelled, but this GPU says not supported
      251: 18446744073709551615
  - model: h100-sxm-80gb
"""
SUCCESS, NOT_SUPPORTED, INVALID = 0, 3, 2
DOUBLE, UINT, ULL, SLL = 0, 1, 3, 4
MEMBER = {DOUBLE: "dVal", UINT: "uiVal", ULL: "ullVal", SLL: "sllVal"}


def answers(index: int, ids: list[object]) -> list[tuple[int, int, object]]:
    module = sim.create(parse_scenario(TEXT, "field-values"))
    module.nvmlInit()
    handle = module.nvmlDeviceGetHandleByIndex(index)
    out = []
    for v in module.nvmlDeviceGetFieldValues(handle, ids):
        member = MEMBER.get(v.valueType) if v.nvmlReturn == SUCCESS else None
        out.append((v.nvmlReturn, v.valueType, getattr(v.value, member) if member else None))
    return out


def test_given_values_are_answered_in_their_type() -> None:
    given = parse_scenario(TEXT, "field-values").gpus[0].extra["field_values"]
    ids = sorted(given)
    expect = []
    for fid in ids:
        value = given[fid]
        if value is None:
            expect.append((NOT_SUPPORTED, 0, None))
        elif isinstance(value, float):
            expect.append((SUCCESS, DOUBLE, value))
        else:
            expect.append((SUCCESS, SLL if value < 0 else ULL, value))
    assert answers(0, ids) == expect
    # Every scope id gets the given answer.
    assert answers(0, [(250, 3)]) == [(SUCCESS, DOUBLE, given[250])]


def test_other_gpus_keep_the_simulators_answers() -> None:
    spec = parse_scenario(TEXT, "field-values").gpus[1]
    assert "field_values" not in spec.extra
    assert answers(1, [94, 187, 250, 300]) == [
        (SUCCESS, UINT, spec.pcie["replay_counter"]),
        (SUCCESS, UINT, round(spec.power_min_limit * 1000)),  # NVML answers milliwatts
        (NOT_SUPPORTED, 0, None),  # an id the simulator does not model
        (INVALID, 0, None),  # an id past what the simulated driver knows
    ]


@pytest.mark.parametrize(
    ("values", "line", "fragment"),
    [
        ("{0: 1}", 3, "field ids are integers from 1 to 4294967295, got 0"),
        ("{abc: 1}", 3, 'got "abc"'),
        ("{94: lots}", 3, 'expected a finite number or not_supported, got "lots"'),
        ("{94: .inf}", 3, "expected a finite number"),
        ("{94: true}", 3, "expected a finite number"),
        ("{94: 18446744073709551616}", 3, "out of NVML's 64-bit range"),
        ("{94: 1, 0x5e: 2}", 3, "duplicate field id"),
        ("[94]", 3, "expected a mapping of NVML field id"),
    ],
)
def test_bad_values_name_key_and_line(values: str, line: int, fragment: str) -> None:
    text = f"gpus:\n  - model: h100-sxm-80gb\n    field_values: {values}\n"
    with pytest.raises(ConfigError) as err:
        parse_scenario(text, "bad")
    message = str(err.value)
    assert message.startswith(f"scenario bad line {line}: gpus[0].field_values"), message
    assert fragment in message, message
