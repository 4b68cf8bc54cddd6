"""The one units grammar: the same text means the same value in scenario files, flags and config."""

from __future__ import annotations

import pytest

from vgpumon import units
from vgpumon.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", 0),
        (4096, 4096),
        ("4096", 4096),
        ("1 KiB", 1024),
        ("512M", 512 * 2**20),
        ("512MiB", 512 * 2**20),
        ("1G", 2**30),  # binary, as `validate --memory 1G` always read it
        ("1.5g", int(1.5 * 2**30)),
        ("80GiB", 80 * 2**30),
        ("4GB", 4 * 10**9),  # decimal
        ("1.6GB", 1_600_000_000),
        ("2T", 2 * 2**40),
        ("1TB", 10**12),
    ],
)
def test_sizes(text: object, value: int) -> None:
    assert units.parse_size(text) == value


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "bad size"),
        ("lots", "bad size"),
        ("5 parsecs", "bad size"),
        ("-1G", "at least 0"),
        ("1e", "bad size"),
        ("1e309GiB", "not a finite number"),  # was OverflowError in scenario files
        ("1e30", "at most 1 PiB"),  # was wrapped modulo 2^64
        (1e30, "at most 1 PiB"),
        ("2PiB", "bad size"),
        (True, "bad size"),
        ([1], "bad size"),
    ],
)
def test_sizes_refused(text: object, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        units.parse_size(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (3, 3.0),
        ("30", 30.0),
        ("0.5", 0.5),
        ("30s", 30.0),
        ("30 s", 30.0),
        ("100ms", 0.1),
        ("100us", 1e-4),  # refused by the old load/validate grammar
        ("100µs", 1e-4),
        ("250ns", 2.5e-7),
        ("2m", 120.0),
        ("2min", 120.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("1d", 86400.0),  # refused ("bad duration") by usage --range 30d, its own example
        ("30d", 30 * 86400.0),
        ("7d", 7 * 86400.0),
        ("1w", 7 * 86400.0),
        ("2w3d12h", 17.5 * 86400.0),
        ("1.5d", 1.5 * 86400.0),
    ],
)
def test_durations(text: object, seconds: float) -> None:
    assert units.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["3 fortnights", "10M", "1MS", "s", "-1s", "nan", "inf", "1e400", "1D", "1W", "1y"]
)
def test_durations_refused(text: str) -> None:
    with pytest.raises(ConfigError):
        units.parse_duration(text)


def test_duration_bounds_and_bare_unit() -> None:
    assert units.parse_duration("5", bare_unit="ms") == pytest.approx(0.005)
    with pytest.raises(ConfigError, match="at most 86400"):
        units.parse_duration("2d", hi=86400)
    assert units.parse_duration("-1s", lo=None) == -1.0


@pytest.mark.parametrize(
    ("text", "hertz"),
    [("1980MHz", 1.98e9), ("1.98GHz", 1.98e9), ("500kHz", 5e5), ("60Hz", 60.0), (1410, 1.41e9)],
)
def test_frequencies(text: object, hertz: float) -> None:
    assert units.parse_frequency(text) == pytest.approx(hertz)


def test_frequency_refuses_other_units() -> None:
    with pytest.raises(ConfigError, match="bad frequency"):
        units.parse_frequency("3W")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1s", 1.0), ("1m30s", 90.0), ("500ms", 0.5), ("1.5h", 5400.0), ("0", 0.0), ("2us", 2e-6)],
)
def test_go_dialect(text: str, seconds: float) -> None:
    assert units.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "s", "1x", "1s2", "1 s", "2min", "1d", "1w"])
def test_go_dialect_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="invalid duration"):
        units.parse_go_duration(text)


def test_scenario_only_units() -> None:
    assert units.parse_watts("70000mW") == pytest.approx(70.0)
    assert units.parse_ratio("85%") == pytest.approx(0.85)
    assert units.parse_byte_rate("3MiB/s") == 3 * 2**20
    for parser, bad in (
        (units.parse_watts, "1MW"),
        (units.parse_ratio, 1.5),
        (units.parse_ratio, True),
        (units.parse_byte_rate, "3MiB"),
        (units.parse_celsius, "300K"),
    ):
        with pytest.raises(ValueError):
            parser(bad)
