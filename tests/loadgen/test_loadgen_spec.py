"""LoadSpec rules, launch geometry, footprint shares, device selection and the text parsers."""

from __future__ import annotations

import pytest

from vgpumon.errors import ConfigError
from vgpumon.loadgen.spec import (
    MIN_STREAM_BYTES,
    LoadSpec,
    blocks_for,
    memory_shares,
    parse_device,
    visible_devices_for,
)
from vgpumon.units import format_bytes, parse_duration, parse_size
from vgpumon.units import parse_ratio as parse_fraction

GIB = 1024**3


def test_default_spec_is_valid_full_load() -> None:
    spec = LoadSpec().validate()
    assert (spec.duty, spec.sm_fraction, spec.kernel, spec.processes) == (1.0, 1.0, "spin", 1)
    assert spec.threads_per_block == 32
    assert spec.period_s == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"duty": 1.5}, "duty"),
        ({"duty": -0.1}, "duty"),
        ({"duty": float("nan")}, "duty"),
        ({"sm_fraction": 0.0}, "SM fraction"),
        ({"sm_fraction": 1.01}, "SM fraction"),
        ({"kernel": "matmul"}, "unknown kernel"),
        ({"memory_bytes": -1}, "memory"),
        ({"memory_bytes": 1.5}, "memory"),
        ({"processes": 0}, "processes"),
        ({"processes": 65}, "processes"),
        ({"duration_s": 0.0}, "duration"),
        ({"duration_s": float("inf")}, "duration"),
        ({"period_s": 0.0001}, "period"),
        ({"period_s": 120.0}, "period"),
        ({"warps_per_block": 0}, "warps"),
        ({"warps_per_block": 33}, "warps"),
        ({"device": "gpu0"}, "bad device"),
        ({"kernel": "stream", "memory_bytes": 0}, "stream kernel"),
    ],
)
def test_invalid_specs_are_refused_with_one_line(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        LoadSpec(**changes).validate()  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_zero_duty_is_allowed_to_hold_only_memory() -> None:
    assert LoadSpec(duty=0.0, memory_bytes=GIB).validate().duty == 0.0


def test_stream_needs_its_buffer_per_process() -> None:
    LoadSpec(kernel="stream", memory_bytes=MIN_STREAM_BYTES).validate()
    with pytest.raises(ConfigError, match="per process"):
        LoadSpec(kernel="stream", memory_bytes=MIN_STREAM_BYTES, processes=2).validate()
    LoadSpec(kernel="stream", memory_bytes=2 * MIN_STREAM_BYTES, processes=2).validate()


def test_with_changes_validates_and_round_trips() -> None:
    spec = LoadSpec(duty=0.25, memory_bytes=GIB, device="GPU-0123abcd-0000-1111-2222-333344445555")
    stepped = spec.with_changes(duty=0.75, sm_fraction=0.5)
    assert (stepped.duty, stepped.sm_fraction, stepped.memory_bytes) == (0.75, 0.5, GIB)
    assert LoadSpec.from_dict(stepped.to_dict()) == stepped
    with pytest.raises(ConfigError):
        spec.with_changes(duty=2.0)
    with pytest.raises(ConfigError, match="unknown load spec field"):
        LoadSpec.from_dict({"duty": 0.5, "watts": 300})


@pytest.mark.parametrize(
    ("fraction", "sms", "blocks"),
    [
        (1.0, 132, 132),
        (0.5, 132, 66),
        (0.25, 132, 33),
        (0.75, 132, 99),
        (0.001, 132, 1),
        (1 / 7, 7, 1),
        (0.5, 7, 4),  # 3.5 rounds up, not to even
        (0.5, 1, 1),
        (0.3, 14, 4),  # MIG 1g slice sized device: 4.2 -> 4
    ],
)
def test_blocks_for_fraction(fraction: float, sms: int, blocks: int) -> None:
    assert blocks_for(fraction, sms) == blocks


def test_blocks_for_rejects_nonsense() -> None:
    with pytest.raises(ConfigError):
        blocks_for(0.0, 132)
    with pytest.raises(ConfigError):
        blocks_for(0.5, 0)


def test_memory_shares_add_up_and_rank0_takes_remainder() -> None:
    assert memory_shares(10, 3) == [4, 3, 3]
    assert memory_shares(GIB, 1) == [GIB]
    assert memory_shares(0, 4) == [0, 0, 0, 0]
    shares = memory_shares(3 * GIB + 7, 4)
    assert sum(shares) == 3 * GIB + 7
    assert max(shares) - min(shares) <= 7


@pytest.mark.parametrize(
    "device",
    [
        "0",
        "12",
        "GPU-5b3c0d5e-1a2b-3c4d-5e6f-7a8b9c0d1e2f",
        "MIG-1f2e3d4c-5b6a-7980-a1b2-c3d4e5f60718",
        "MIG-GPU-5b3c0d5e-1a2b-3c4d-5e6f-7a8b9c0d1e2f/1/0",
    ],
)
def test_parse_device_accepts_index_and_uuids(device: str) -> None:
    assert parse_device(device) == device


@pytest.mark.parametrize("device", ["", "-1", "cuda:0", "GPU-", "MIG-xyz", "0,1"])
def test_parse_device_refuses_other_text(device: str) -> None:
    with pytest.raises(ConfigError, match="bad device"):
        parse_device(device)


def test_visible_devices_index_resolves_against_inherited_list() -> None:
    uuid = "GPU-5b3c0d5e-1a2b-3c4d-5e6f-7a8b9c0d1e2f"
    assert visible_devices_for("1", None) == "1"
    assert visible_devices_for("1", "") == "1"
    assert visible_devices_for("1", "3,5") == "5"
    assert visible_devices_for("0", f"{uuid},2") == uuid
    assert visible_devices_for(uuid, "3,5") == uuid
    with pytest.raises(ConfigError, match="not visible"):
        visible_devices_for("2", "3,5")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        ("4096", 4096),
        ("512MiB", 512 * 1024**2),
        ("512M", 512 * 1024**2),
        ("2GiB", 2 * GIB),
        ("1.5g", int(1.5 * GIB)),
        ("4GB", 4 * 1000**3),
        ("1 KiB", 1024),
    ],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "lots", "5 parsecs", "-1G", "1e"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="bad size"):
        parse_size(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30", 30.0), ("30s", 30.0), ("100ms", 0.1), ("2m", 120.0), ("1h", 3600.0), ("0.5", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_parse_duration_refuses_units_it_does_not_know() -> None:
    with pytest.raises(ConfigError, match="bad duration"):
        parse_duration("3 fortnights")


def test_parse_fraction_takes_ratio_or_percent_never_guesses() -> None:
    assert parse_fraction("0.25") == 0.25
    assert parse_fraction("75%") == 0.75
    assert parse_fraction("1") == 1.0
    with pytest.raises(ConfigError, match="above 1"):
        parse_fraction("50")
    with pytest.raises(ConfigError, match="bad fraction"):
        parse_fraction("half")


def test_format_bytes() -> None:
    assert format_bytes(512) == "512 B"
    assert format_bytes(256 * 1024**2) == "256 MiB"
    assert format_bytes(3 * GIB // 2) == "1.5 GiB"
