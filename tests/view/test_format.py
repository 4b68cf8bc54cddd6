"""Value formatting: absent is a dash (never 0), units, sizes, gauges that tell 40 % from 45 %."""

from __future__ import annotations

import pytest

from vgpumon.model import VGPU_LICENSE_STATES
from vgpumon.view import format as f


@pytest.mark.parametrize(
    "fn",
    [f.pct, f.size, f.hertz, f.watts, f.celsius, f.duration, f.when, f.or_dash, f.license_state,
     f.expiry_status, f.vgpu_type],
)  # fmt: skip
def test_absent_is_a_dash_never_zero(fn: object) -> None:
    assert fn(None) == f.DASH  # type: ignore[operator]


def test_values() -> None:
    assert f.pct(0.0) == "0%" and f.pct(0.456) == "46%" and f.pct(1.0) == "100%"
    assert f.size(0) == "0 B" and f.size(1536) == "1.5 KiB" and f.size(12.5 * f.GIB) == "12.5 GiB"
    assert f.used_total(6 * f.GIB, 8 * f.GIB) == "6.0/8.0 GiB"
    assert f.used_total(None, 8 * f.GIB) == f"{f.DASH}/8.0 GiB"
    assert f.used_total(100 * f.MIB, 512 * f.MIB) == "100.0/512.0 MiB"
    assert f.hertz(1_410_000_000) == "1410 MHz"
    assert f.power_of_limit(212.4, 300) == "212/300 W" and f.power_of_limit(None, 300) == "—/300 W"
    assert f.celsius(41.2) == "41 °C"
    assert [f.duration(s) for s in (0.002, 0.0005, 41, 180, 7200 * 3, 86400 * 12)] == [
        "2 ms", "500 µs", "41 s", "3 min", "6 h", "12 d",
    ]  # fmt: skip
    assert f.when(1_767_225_600) == "2026-01-01 00:00 UTC"
    assert f.flag(None) == f.DASH and f.flag(True) == "on" and f.flag(False, "yes", "no") == "no"
    # One spelling per state, on every screen (the filter keeps NVML's names).
    assert f.license_state("unlicensed_restricted") == "restricted"
    assert f.license_state("unlicensed_unrestricted") == "grace period"
    assert all(len(f.license_state(s)) <= 13 for s in VGPU_LICENSE_STATES)
    assert f.vgpu_type("NVIDIA L40S-8Q") == "L40S-8Q"


def test_gauge_is_fixed_range_with_sub_cell_steps() -> None:
    assert f.bar(0.4, 10) == "████░░░░░░"
    assert f.bar(0.45, 10) == "████▌░░░░░"
    assert f.bar(0.95, 10) == "█████████▌"
    assert f.bar(1.7, 4) == "████" and f.bar(-1, 4) == "░░░░"
    assert f.bar(None, 4) == "╌╌╌╌"  # absent is not empty
    assert len({f.bar(r / 100, 10) for r in range(0, 101, 5)}) == 21
